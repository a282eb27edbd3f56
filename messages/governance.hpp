#pragma once

/// Limiter and breaker results and status (SPEC §5, §6), as they travel
/// between the gateway, attempts and the per-source governance actors.

#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace pgw {

// -- limiter ----------------------------------------------------------------------

/// A limiter permit: one request in the RPM window, `est` tokens in the TPM
/// window and one in-flight slot (a lease), until settled and released.
struct permit {
  std::string id; ///< unique per limiter; empty = no permit
  std::string source;
  int64_t est = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, permit& x) {
  return f(caf::meta::type_name("pgw.permit"), x.id, x.source, x.est);
}

/// The answer to `try_acquire`.
struct acquire_result {
  bool granted = false;
  permit granted_permit; ///< when granted
  /// When refused: `rpm`, `tpm` or `concurrency`.
  std::string reason;
  /// When refused: seconds until a retry can succeed.
  double retry_after_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, acquire_result& x) {
  return f(caf::meta::type_name("pgw.acquire_result"), x.granted,
           x.granted_permit, x.reason, x.retry_after_s);
}

/// A limiter's live state.
struct limiter_status {
  std::string source;
  caf::optional<int64_t> rpm_limit;
  caf::optional<int64_t> tpm_limit;
  caf::optional<int64_t> concurrency_limit;
  int64_t rpm_used = 0;   ///< requests in the current 60 s window
  int64_t tpm_used = 0;   ///< tokens (estimates and settled) in the window
  int64_t in_flight = 0;  ///< live leases
  uint64_t acquired = 0;  ///< permits granted
  uint64_t settled = 0;   ///< permits settled (each once)
  uint64_t released = 0;  ///< permits released (each once)
  uint64_t refused_rpm = 0;
  uint64_t refused_tpm = 0;
  uint64_t refused_concurrency = 0;
  uint64_t leases_expired = 0; ///< in-flight leases that ran out unreleased
  /// This process's own permits, counted by its limiter actor whatever the
  /// backend. The figures above are the backend's: with Redis they are
  /// shared by every node of the namespace (and runs before this one), so
  /// only these say whether this node's permits ended.
  uint64_t own_acquired = 0; ///< permits granted to this process
  uint64_t own_settled = 0;  ///< its settles that took effect
  uint64_t own_released = 0; ///< its releases that freed a live lease
  /// Its releases that found no live lease (it ran out first, or was
  /// forgotten): the permit ended by expiry.
  uint64_t own_expired = 0;
  int64_t own_pending = 0; ///< its settles and releases not through yet
  /// Why the backend could not be read (Redis down): then only `source` and
  /// the limits are filled. Empty when the figures above are current.
  std::string unavailable;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, limiter_status& x) {
  return f(caf::meta::type_name("pgw.limiter_status"), x.source, x.rpm_limit,
           x.tpm_limit, x.concurrency_limit, x.rpm_used, x.tpm_used,
           x.in_flight, x.acquired, x.settled, x.released, x.refused_rpm,
           x.refused_tpm, x.refused_concurrency, x.leases_expired,
           x.own_acquired, x.own_settled, x.own_released, x.own_expired,
           x.own_pending, x.unavailable);
}

// -- breaker ----------------------------------------------------------------------

/// The answer to `enter`.
struct breaker_entry {
  bool allowed = false;
  uint64_t epoch = 0; ///< fences results: older epochs are ignored
  bool probe = false; ///< this caller holds the half-open probe lease
  /// When refused: seconds until the circuit may let a caller in.
  double retry_after_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, breaker_entry& x) {
  return f(caf::meta::type_name("pgw.breaker_entry"), x.allowed, x.epoch,
           x.probe, x.retry_after_s);
}

/// A breaker's live state.
struct breaker_status {
  std::string source;
  /// "closed", "open" (refusing callers), "half_open" (a probe in flight,
  /// or the next caller probes)
  std::string state;
  uint64_t epoch = 0;
  int64_t failure_count = 0;  ///< consecutive failures (at the threshold when rate-opened)
  int64_t threshold = 0;      ///< effective consecutive threshold (with the lift)
  int64_t reopen_streak = 0;
  double open_for_s = 0;      ///< seconds until open_until (0 unless open)
  int64_t window_attempts = 0;
  int64_t window_failures = 0;
  bool probe_in_flight = false;
  uint64_t opens = 0;         ///< times opened (any reason)
  uint64_t probes = 0;        ///< probe leases granted
  uint64_t probe_failures = 0;
  /// Why the backend could not be read (Redis down): then only `source` is
  /// filled and `state` is "unknown". Empty when the figures are current.
  std::string unavailable;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, breaker_status& x) {
  return f(caf::meta::type_name("pgw.breaker_status"), x.source, x.state,
           x.epoch, x.failure_count, x.threshold, x.reopen_streak,
           x.open_for_s, x.window_attempts, x.window_failures,
           x.probe_in_flight, x.opens, x.probes, x.probe_failures,
           x.unavailable);
}

/// Work finished on one of the project's own threads, to be completed inside
/// the actor that started it (e.g. delivering a response promise). Local to
/// the process: never serialized.
struct local_task {
  std::function<void()> run;
};

} // namespace pgw

// A closure that only ever travels between threads of one process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<pgw::local_task>)
