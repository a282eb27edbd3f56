#pragma once

/// How one attempt ended (SPEC §4) and everything the transport learned.

#include "pgw/messages/chat.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace pgw {

/// Every attempt ends in exactly one outcome.
enum class outcome : uint8_t {
  ok,
  request_rejected,
  source_rejected,
  result_invalid,
  source_dead,
  transient,
  rate_limited,
  cancelled,
  hedge_cancelled,
};

/// The SPEC name, e.g. "rate_limited".
const char* to_string(outcome x);

/// Reasons decided on outside the transport (SPEC §12): the answer went
/// over MAX_RESPONSE_BYTES (`source_rejected`, settles the estimate).
constexpr const char* reason_response_too_large = "response_too_large";
/// This process could not open a socket (file descriptors or memory
/// exhausted): `source_rejected`, no breaker, settles 0.
constexpr const char* reason_local_exhausted = "local_resource_exhausted";

/// The result of one upstream call, as produced by a transport.
struct attempt_result {
  outcome kind = outcome::transient;
  /// Short machine reason: "ok", "http_503", "connect_error", "reset",
  /// "ttft_timeout", "idle_timeout", "total_timeout", "stream_cut",
  /// "malformed_body", "empty_answer", "content_policy_violation", ...
  std::string reason;
  int32_t http_status = 0; ///< 0 when no status line was read
  std::string error_code;    ///< upstream error body `code` (or `type`)
  std::string error_message; ///< upstream error body `message`
  /// Seconds to wait before this source may be asked again (Retry-After).
  caf::optional<double> retry_after_s;
  /// True once request bytes may have reached the upstream; false when the
  /// connection failed before anything was sent (settles 0, SPEC §8).
  bool upstream_reached = false;
  /// One of the attempt's timers ended it (connect, TLS handshake, TTFT,
  /// idle, total): the failure cost its full wait, so the source is demoted
  /// at once (SPEC §12, failover conduct), whatever `reason` says.
  bool timed_out = false;
  bool stream = false;
  // -- the answer (kind == ok, or result_invalid with a body) --
  std::string content;
  std::string reasoning_content;
  std::string finish_reason;
  std::string model; ///< model named by the upstream answer
  bool usage_reported = false;
  /// The upstream reported usage outside [0, 10^9] (or not integral): it is
  /// `unavailable`, and telemetry says `rejected`.
  bool usage_rejected = false;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int32_t malformed_events = 0; ///< SSE events skipped as malformed
  std::vector<tool_call> tool_calls; ///< normalised (see tool_call_assembler)
  // -- structured output: the attempt's check of `content` (a call with a
  // schema), so that the call does not validate the answer again --
  /// The validated JSON, serialized (after repair); empty when the answer
  /// is not JSON even after repair, or was not checked.
  std::string parsed;
  /// `parsed` needed `repair_json`.
  bool repaired = false;
  /// Why the answer does not match (result_invalid, reason
  /// schema_mismatch or invalid_json).
  std::vector<schema_issue> schema_issues;
  // -- timing (transport wall time, milliseconds) --
  double latency_ms = 0; ///< request sent .. outcome known
  caf::optional<double> ttft_ms;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_result& x) {
  return f(caf::meta::type_name("pgw.attempt_result"), x.kind, x.reason,
           x.http_status, x.error_code, x.error_message, x.retry_after_s,
           x.upstream_reached, x.timed_out, x.stream, x.content, x.reasoning_content,
           x.finish_reason, x.model, x.usage_reported, x.usage_rejected,
           x.prompt_tokens,
           x.completion_tokens, x.malformed_events, x.latency_ms, x.ttft_ms,
           x.tool_calls, x.parsed, x.repaired, x.schema_issues);
}

/// True for a `source_rejected` answer that is the upstream's fault, not
/// the request's (SPEC §12): an answer over MAX_RESPONSE_BYTES (a
/// decompression bomb too) or a redirect (reason `redirect`, never
/// followed). A call that no source is left for after such answers fails
/// `result_invalid`, not `request_rejected`: the caller's request was fine.
bool upstream_at_fault(const attempt_result& r);

/// True for a `source_rejected` result that is this process's own fault
/// (`local_resource_exhausted`): neither the caller's nor the upstream's. A
/// call that no source is left for after it fails `retry_exhausted` (the
/// unavailable family: try again later), not `request_rejected`.
bool local_failure(const attempt_result& r);

} // namespace pgw
