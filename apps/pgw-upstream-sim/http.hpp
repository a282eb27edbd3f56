#pragma once

/// The simulator's minimal HTTP/1.1 pieces: parsing a request head and
/// writing response heads, chunks and JSON strings. Bodies are framed by
/// Content-Length only.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace pgw::sim::detail {

/// A parsed request head (the body is read separately).
struct request_head {
  std::string method;
  std::string path; ///< the target without its query string
  int minor_version = 1;
  bool keep_alive = true;       ///< HTTP/1.1 default or "Connection: keep-alive"
  bool expect_continue = false; ///< "Expect: 100-continue"
  bool has_bearer = false;      ///< "Authorization: Bearer <non-empty>"
  /// The Authorization header's value, kept only for models that echo it
  /// (`echo_auth`, a hostile upstream's behaviour); never logged.
  std::string authorization;
  bool has_transfer_encoding = false;
  std::optional<size_t> content_length;
};

/// Parses `head` (request line and header lines, without the final blank
/// line). Returns an empty string on success, else why it is malformed.
std::string parse_request_head(std::string_view head, request_head& out);

/// "OK", "Not Found", ... ("Unknown" for codes it does not know).
const char* reason_phrase(int status);

/// A response head with Content-Length (or chunked when `content_length` is
/// empty). `extra` is inserted verbatim (lines ending in "\r\n").
std::string response_head(int status, std::string_view content_type,
                          std::optional<size_t> content_length, bool close,
                          std::string_view extra = {});

/// Appends `s` as a JSON string literal (quotes included) to `out`.
void append_json_string(std::string& out, std::string_view s);

/// Appends one chunk of a chunked body carrying `payload` to `out`.
void append_chunk(std::string& out, std::string_view payload);

} // namespace pgw::sim::detail
