#pragma once

/// The errors a caller can receive (SPEC §4) as a CAF error category, and the
/// detail object carried in the error's context.

#include "pgw/messages/spent.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace pgw {

/// Error codes of the `pgw` category. Code 0 is CAF's "no error" and is never
/// used.
enum class error_code : uint8_t {
  request_rejected = 1,
  retry_exhausted,
  stalled,
  circuit_open,
  quota_exhausted,
  call_deadline_exceeded,
  governance_unavailable,
  cancelled,
  invalid_request,
  invalid_config,
  internal,
  /// Structured output: no round produced an answer that matches the
  /// schema within `STRUCTURED__MAX_REASKS` re-asks.
  result_invalid,
  /// Live streaming: the stream a caller was already receiving broke (cut,
  /// stall, malformed, deadline) after the call committed to its source; the
  /// partial answer cannot be completed by another source.
  stream_interrupted,
};

/// The SPEC name of a code, e.g. "circuit_open".
const char* to_string(error_code x);

/// Parses a SPEC name; returns false for unknown names.
bool from_string(const std::string& name, error_code& x);

/// True for the "gateway unavailable" family (retry_exhausted, stalled,
/// circuit_open, quota_exhausted), which carries `retry_after_s`.
bool is_unavailable_family(error_code x);

/// What one source did last in a failed call.
struct source_error {
  std::string reason;      ///< machine reason, as in `per_source`
  int32_t http_status = 0; ///< HTTP status of its last answer, or 0
  std::string message;     ///< the upstream's error message, if any
  /// Plain words that replace the reason when it says more: what a source
  /// still in flight was doing ("in flight 30.1 s, no first token"), why a
  /// skipped circuit is open; empty otherwise.
  std::string doing;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, source_error& x) {
  return f(caf::meta::type_name("pgw.source_error"), x.reason, x.http_status,
           x.message, x.doing);
}

/// "a: unauthorized (401 \"Incorrect API key\")" or "a: in flight 3.0 s,
/// no first token": one source's line for messages and plain output.
std::string describe(const std::string& source, const source_error& x);

/// The line of a source skipped for `reason` (cooling, circuit_open, ...)
/// after `last`, its line so far: a failure with a status or an upstream
/// message stays in it ("cooling after rate_limited (429 \"…\")"), since
/// the skip alone hides the cause (once, however often it is skipped);
/// else `why` (why its circuit is open: "circuit open, opened after …";
/// which limit is reached: "quota full, RPM limit reached (RPM=3)"),
/// else the bare reason.
source_error after_skip(const source_error& last, const std::string& reason,
                        const std::string& why);

/// Every source's line, joined with "; " (what a caller's message ends with).
std::string describe(const std::map<std::string, source_error>& sources);

/// What went wrong, beyond the code.
struct error_detail {
  std::string message;          ///< human-readable, never contains a secret
  int32_t upstream_status = 0;  ///< HTTP status of the deciding answer, or 0
  std::string upstream_code;    ///< e.g. "content_policy_violation"
  std::string upstream_message; ///< the upstream's error message
  /// Earliest time (seconds from now) a retry could succeed, when known.
  caf::optional<double> retry_after_s;
  /// The last reason seen per source, e.g. {"a": "http_503"}.
  std::map<std::string, std::string> per_source;
  std::string call_id;
  /// The same sources with their last HTTP status, upstream message and,
  /// for sources still in flight, what they were doing.
  std::map<std::string, source_error> sources;
  // -- stream_interrupted ---------------------------------------------------
  /// The source whose stream broke and its machine reason (`stream_cut`,
  /// `idle_timeout`, `call_deadline_exceeded`, ...). A live call cancelled
  /// after its commit names its source here too (no reason): accounting
  /// books the call to it.
  std::string stream_source;
  std::string stream_reason;
  /// The usage so far: as reported by the upstream (when it did), and the
  /// answer bytes the caller already received.
  bool usage_reported = false;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t streamed_bytes = 0;
  // -- a call that failed after upstream work ------------------------------
  /// What the sources reported for work done before the call failed, by
  /// source: an embedding call's answered sub-batches, a chat call's whole
  /// answers it refused (a schema mismatch, invalid tool calls). Upstream
  /// work done, though the caller gets no answer.
  spent_by_source spent;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, error_detail& x) {
  return f(caf::meta::type_name("pgw.error_detail"), x.message,
           x.upstream_status, x.upstream_code, x.upstream_message,
           x.retry_after_s, x.per_source, x.call_id, x.sources,
           x.stream_source, x.stream_reason, x.usage_reported,
           x.prompt_tokens, x.completion_tokens, x.streamed_bytes,
           x.spent);
}

/// `text` with every control character (line breaks, tabs, \x01, DEL)
/// replaced by a space: upstream text shown on one line.
std::string one_line(std::string text);

/// Builds a `pgw` error carrying `detail`; its upstream-derived fields
/// (`upstream_code`, `upstream_message`, each source's `message`) are put on
/// one line.
caf::error make_error(error_code code, error_detail detail);

/// `err` with `spent` added to its detail's `spent` (a call that failed
/// after upstream work); `err` itself when it carries no pgw detail.
caf::error with_spent(const caf::error& err, const spent_by_source& spent);

/// Builds a `pgw` error with only a message.
caf::error make_error(error_code code, std::string message);

/// The code of a `pgw` error, or nothing for errors of other categories.
caf::optional<error_code> code_of(const caf::error& err);

/// The detail of a `pgw` error, or nullptr when it carries none.
const error_detail* detail_of(const caf::error& err);

/// "code: message" for any error; never prints a secret.
std::string describe(const caf::error& err);

/// The words of an error for a user: its detail's message when it has one
/// (no code in front), else the error rendered by `describe`.
std::string words_of(const caf::error& err);

} // namespace pgw

CAF_ERROR_CODE_ENUM(pgw::error_code, "pgw")
