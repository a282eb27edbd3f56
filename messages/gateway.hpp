#pragma once

/// Messages between a call supervisor and its gateway: admission (which
/// source runs the next attempt), attempt reports, and the gateway's status.

#include "pgw/messages/governance.hpp"
#include "pgw/messages/outcome.hpp"
#include "pgw/messages/telemetry.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pgw {

/// A supervisor asks its gateway for a source to run the next attempt on.
struct admit_request {
  /// Sources never to pick (rejected ones; the primary's source for a hedge).
  std::vector<std::string> exclude;
  /// Failures per source in this call: sources with ≥ 2 move to the tail.
  std::map<std::string, int32_t> failures;
  /// Sources that had a time-costly failure in this call (a timeout: it
  /// cost at least the source's own bound): they move to the tail at once.
  std::vector<std::string> demote;
  /// Tokens to reserve; 0 = the source's EST_TOKENS (embedding sub-batches
  /// bring their own estimate).
  int64_t est = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admit_request& x) {
  return f(caf::meta::type_name("pgw.admit_request"), x.exclude, x.failures,
           x.demote, x.est);
}

/// Why admission passed over a source.
enum class skip_reason : uint8_t {
  cooling,      ///< the gateway's 429 cooldown memo
  circuit_open, ///< its breaker refused entry
  quota,        ///< its limiter refused a permit
};

/// "cooling", "circuit_open", "quota": the words error details and
/// telemetry use (`error_detail::per_source`).
const char* to_string(skip_reason x);

/// Why admission admitted no source.
enum class admission_refusal : uint8_t {
  none,         ///< every source was excluded: nothing is left to try
  cooling,      ///< every skipped source was cooling
  circuit_open, ///< every skipped source's circuit was open
  quota,        ///< every skipped source's quota was full
  mixed,        ///< the skipped sources had different reasons
};

const char* to_string(admission_refusal x);

/// What a call's timer is for (armed at the gateway: actors/timer_table.hpp).
/// The timer message carries the kind and an id the call chooses (a round,
/// a retry generation, a sub-batch), never one packed into the other.
enum class timer_kind : uint8_t {
  stall,    ///< the stall window since the last progress may be over
  deadline, ///< the call deadline passed
  retry,    ///< a backoff or refusal wait is over: admit again
  hedge,    ///< a round may need one more (hedge) leg now
};

/// "stall", "deadline", "retry", "hedge".
const char* to_string(timer_kind x);

/// The gateway's answer: a source with its permit and breaker entry, or why
/// none can run now.
struct admit_result {
  bool admitted = false;
  std::string source;    ///< when admitted
  permit granted_permit; ///< when admitted: the limiter permit
  uint64_t epoch = 0;    ///< when admitted: the breaker epoch entered at
  bool probe = false;    ///< when admitted: the half-open probe
  /// When refused: each source that was skipped and why.
  std::map<std::string, skip_reason> skipped;
  /// When refused: seconds until each skipped source may run again.
  std::map<std::string, double> retry_in;
  /// When refused: seconds until the earliest skipped source may run again.
  caf::optional<double> retry_after_s;
  /// When refused: why no source was admitted.
  admission_refusal refusal = admission_refusal::none;
  /// When refused: why a skipped source's circuit is open, when known
  /// ("opened after unauthorized 401").
  std::map<std::string, std::string> why;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admit_result& x) {
  return f(caf::meta::type_name("pgw.admit_result"), x.admitted, x.source,
           x.granted_permit, x.epoch, x.probe, x.skipped, x.retry_in,
           x.retry_after_s, x.refusal, x.why);
}

/// Sent to the gateway exactly once for every admitted attempt when it ends.
struct attempt_report {
  std::string source;
  outcome kind = outcome::transient;
  caf::optional<double> retry_after_s;
  /// The attempt's machine reason and HTTP status (0 = none), so the gateway
  /// can say why a source's circuit opened.
  std::string reason;
  int32_t http_status = 0;
  /// False for embedding sub-batches: they never feed the health EWMA.
  bool feeds_health = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_report& x) {
  return f(caf::meta::type_name("pgw.attempt_report"), x.source, x.kind,
           x.retry_after_s, x.reason, x.http_status,
           x.feeds_health);
}

/// Live state of one source as the gateway sees it.
struct source_status {
  std::string name;
  std::string model;
  int32_t in_flight = 0;
  /// Seconds left in the 429 cooldown memo, 0 when not cooling.
  double cooling_s = 0;
  int64_t attempts = 0;
  int64_t ok = 0;
  int64_t failed = 0;
  int64_t rate_limited = 0;
  /// Attempts that ended, by SPEC §4 outcome name.
  std::map<std::string, int64_t> outcomes;
  double ewma = 1.0; ///< the health_aware selector's score input
  limiter_status limiter;
  breaker_status breaker;
  /// Structured output: the strongest rung this source is still asked with
  /// (lowered, for the process, by a 400 that rejected response_format).
  std::string structured_rung;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, source_status& x) {
  return f(caf::meta::type_name("pgw.source_status"), x.name, x.model,
           x.in_flight, x.cooling_s, x.attempts, x.ok, x.failed,
           x.rate_limited, x.outcomes, x.ewma, x.limiter, x.breaker,
           x.structured_rung);
}

/// The answer to `status` on a gateway.
struct gateway_status {
  std::string scope;
  std::string selector;
  int64_t calls_started = 0;
  int64_t calls_ok = 0;
  int64_t calls_failed = 0;
  int64_t calls_active = 0;
  /// Timers armed for live calls (stall window, deadline, retry, hedge).
  int64_t timers_armed = 0;
  std::vector<source_status> sources;
  /// The telemetry sink's counters (rows written, dropped, ...); empty path
  /// when the gateway has no telemetry.
  telemetry_status telemetry;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gateway_status& x) {
  return f(caf::meta::type_name("pgw.gateway_status"), x.scope, x.selector,
           x.calls_started, x.calls_ok, x.calls_failed, x.calls_active,
           x.timers_armed, x.sources, x.telemetry);
}

} // namespace pgw
