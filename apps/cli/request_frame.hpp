#pragma once

/// Where one HTTP/1.1 request ends in the bytes read from a connection
/// (RFC 9112 §2–§7), for `pgw-actor serve`'s front: it reads every request
/// whole, within one read deadline, before anything answers it or a
/// cpp-httplib thread takes it (so that a client trickling bytes holds
/// no thread), and refuses what would let two parsers disagree on where a
/// request ends (request smuggling, desync): conflicting or malformed
/// Content-Length, Transfer-Encoding beside Content-Length, obsolete line
/// folding, a malformed request line or header line; and a request with
/// two Authorization fields (which one holds the key would be ambiguous).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pgw::cli {

struct request_frame {
  enum class state {
    partial, ///< more bytes are needed
    whole,   ///< `bytes` of the input are one request (head and body)
    bad,     ///< to be refused with `status` and `reason`, then closed
  };

  state what = state::partial;
  /// The head's size through its blank line (0 while the head is partial).
  size_t head_bytes = 0;
  /// whole: the request's size, head and body.
  size_t bytes = 0;
  /// The head asks `Expect: 100-continue` (to be answered once, before the
  /// client sends its body).
  bool expects_continue = false;
  /// bad: 400, 413 (body over the limit), 431 (head over the limit) or
  /// 501 (a transfer coding other than chunked).
  int status = 0;
  /// bad: what was wrong, in plain words.
  std::string reason;
  /// whole: the head gives neither Content-Length nor Transfer-Encoding,
  /// so the body is empty (RFC 9112 §6.3).
  bool no_length = false;
  /// The client asks that the connection close after this request's
  /// answer: a Connection field lists the `close` option (a
  /// comma-separated list in any case, over one field or several; RFC 9110
  /// §7.6.1), or an HTTP/1.0 request does not list `keep-alive`. Set once
  /// the head is whole.
  bool close = false;
  /// whole, chunked: where the trailer section starts (just after the last
  /// chunk's line); 0 for other requests.
  size_t trailer_at = 0;
};

/// How far a chunked body was scanned, kept between calls for one request
/// so that each read scans only what is new (a body of many tiny chunks
/// read in many pieces would otherwise be scanned from its start each time).
struct chunk_cursor {
  size_t at = 0;      ///< the next chunk-size line (0: not started)
  uint64_t total = 0; ///< the sizes of the chunks before it
};

/// Frames the request at the start of `in`. `max_head` bounds the head
/// (request line and header fields), `max_body` the body (its
/// Content-Length, or its chunks' sizes together). `cursor`, when given,
/// carries a chunked body's scan from one call to the next for the same
/// request (reset it for the next request).
request_frame frame_request(std::string_view in, size_t max_head,
                            size_t max_body, chunk_cursor* cursor = nullptr);

/// Rewrites an absolute-form request target at the start of `in` (`POST
/// http://host:port/v1/chat/completions HTTP/1.1`, what a client sends to
/// a proxy; RFC 9112 §3.2.2 asks a server to accept it) into the origin
/// form (`/v1/chat/completions`; a target without a path becomes `/`).
/// Only the request line changes. Returns how many bytes shorter `in`
/// got: 0 for any other target (origin form, `*`, authority form) or
/// scheme than http/https.
size_t to_origin_form(std::string& in);

} // namespace pgw::cli
