#pragma once

/// Classification of upstream answers into SPEC §4 outcomes.

#include "messages/outcome.hpp"

#include <string>

namespace pgw {

/// Broken HTTP framing both transports name alike (a `malformed_response`
/// message): "the upstream's HTTP response has " + what.
std::string broken_framing(const std::string& what);

/// The framing faults both transports tell apart, in the same words.
inline constexpr const char* bad_content_length
  = "an invalid or repeated Content-Length";
inline constexpr const char* bad_transfer_encoding
  = "an invalid Transfer-Encoding (or one with Content-Length)";
inline constexpr const char* unexpected_switching_protocols
  = "an unexpected 101 Switching Protocols response";

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
/// `insufficient_quota`, `model_not_found`), else `unauthorized` for 401,
/// `forbidden` for 403, `http_<status>` for the rest.
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

/// Classifies a TLS failure before any request byte was sent (SPEC §12).
/// `certificate_rejected` false = the handshake itself failed →
/// `tls_handshake` (`transient`). Otherwise the certificate was refused, by
/// OpenSSL's verify result `verify_result`: expired or not yet valid →
/// `tls_expired`; a host name mismatch, or a chain that verified (so the
/// name check refused it) → `tls_hostname_mismatch`; anything else →
/// `tls_unknown_ca`. A refused certificate is `source_dead`: asking that
/// source again in the call cannot succeed. The message is OpenSSL's, or
/// for a host name mismatch "certificate does not match host `host`".
void classify_tls_failure(bool certificate_rejected, long verify_result,
                          attempt_result& out, const std::string& host = {});

} // namespace pgw
