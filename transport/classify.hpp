#pragma once

/// Classification of upstream answers into SPEC §4 outcomes.

#include "messages/outcome.hpp"

#include <string>

namespace pgw {

/// Fills `out.kind`, `out.reason`, `out.http_status`, `out.error_code` and
/// `out.error_message` for an HTTP error status (anything but 2xx) and its
/// body (an OpenAI-style `{"error": {"message", "type", "code"}}` or any
/// other text, which is tolerated). Rules:
/// - 400 with code `context_length_exceeded` (or a message saying the
///   context length / maximum context was exceeded), 413, and 404 with code
///   `model_not_found` (or a message saying the model does not exist / was
///   not found) → `source_rejected`;
/// - other 400, 404, 422 and other 4xx not listed below → `request_rejected`;
/// - 401, 402, 403, and 429 with code or type `insufficient_quota` →
///   `source_dead`;
/// - other 429 → `rate_limited`;
/// - 3xx → `source_rejected` with reason `redirect` (never followed);
/// - 408, 409, 425, 5xx and anything else → `transient`.
/// `reason` is the upstream code when it has one of the named codes
/// (`content_policy_violation`, `context_length_exceeded`,
/// `insufficient_quota`, `model_not_found`), else `http_<status>`.
/// Message and code are scrubbed of secrets (`scrub`), then truncated to
/// 500 bytes.
void classify_http_error(int status, const std::string& body,
                         attempt_result& out);

/// Classifies an `error` object that arrived inside a 200 stream (an SSE
/// event whose JSON has an `error` member; `error_json` is that member).
/// Uses its numeric `status`/`code` when it has one, else its code/type
/// string: rate-limit codes → `rate_limited`, `insufficient_quota` →
/// `source_dead`, `context_length_exceeded` → `source_rejected`,
/// `content_policy_violation`/`invalid_request_error` → `request_rejected`,
/// anything else → `transient`. `reason` is prefixed `stream_error:`.
void classify_stream_error(const std::string& error_json, attempt_result& out);

} // namespace pgw
