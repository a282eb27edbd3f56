#pragma once

/// serve's front (issues 13 and 17): the HTTP server on the public address,
/// on the loop the CAF worker runs while idle (actors/wake_after_unlock.hpp),
/// the loop the Beast transport's calls run on too.
///
/// It answers chat completions itself — `POST /v1/chat/completions`, JSON
/// or SSE — with the same checks, headers, metrics and access line as the
/// cpp-httplib handler (`start_chat` / `finish_chat`): a non-streaming or
/// buffered call through `client::chat_then`, its answer written from the
/// loop; a live stream through `client::chat_stream`, each delta written
/// from the loop as an SSE chunk as it comes (the 200 with the first one;
/// an error before it is an ordinary answer, after it one error event).
/// Embeddings and OCR requests up to 256 KiB are answered here too
/// (`start_side`, `client::embed_then` / `ocr_then`). Read, call, upstream
/// exchange and write share one thread, and no thread sleeps per request
/// (BENCHMARKS.md, "Both together").
///
/// Every request is read whole here first, within the read timeout from its
/// first byte (`100 Continue` sent when asked), and framed strictly
/// (apps/cli/request_frame.hpp): a request that could be framed two ways
/// (conflicting or malformed Content-Length, Transfer-Encoding beside it,
/// line folding), a malformed request or header line, a head over 8 KiB or
/// a body over the limit is refused here with its error in OpenAI's shape,
/// and the connection closes. Every other request the front does not
/// answer — the GET routes, a larger embeddings or OCR body, no
/// Content-Length, a chunked body, HTTP/1.0, a chat body the handler
/// refuses, a wrong key — hands its connection, with that whole request,
/// to the cpp-httplib server (`front_options::hand_off`); one of its
/// threads answers that request and gives the connection back
/// (`take_back`). So no httplib thread ever waits on a client's bytes, and
/// a client that trickles them holds nothing past the read timeout. While
/// a call runs the front watches the socket for a client that hangs up (no
/// system call per request) and cancels the call at once.

#include "serve_app.hpp"

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace pgw::serve {

struct front_options {
  size_t max_body_bytes = 8 * 1024 * 1024;
  double read_timeout_s = 30;
  double write_timeout_s = 30;
  /// An idle keep-alive connection closes after this long (httplib's too).
  double keep_alive_s = 2;
  /// Takes a connection the front does not answer: its socket (blocking
  /// or not), one whole request read from it, and the bytes read after
  /// that request (to come back unchanged with `take_back`). Runs on the
  /// loop; it must not block. Required.
  std::function<void(int fd, std::string request, std::string rest)> hand_off;
  /// Takes a line for the operator: the front cannot accept connections
  /// (out of descriptors, say) and tries again every 10 ms, or accepts
  /// again. Runs on the loop; it must not block. Optional.
  std::function<void(const std::string& text)> warn;
};

class front {
public:
  /// Listens on `host:port` (0 = any free port). Throws
  /// boost::system::system_error when it cannot.
  front(boost::asio::io_context& loop, context& ctx, const std::string& host,
        uint16_t port, front_options opts);
  ~front();
  front(const front&) = delete;
  front& operator=(const front&) = delete;

  uint16_t port() const;

  /// Starts accepting (on the loop).
  void start();

  /// Stops accepting and closes idle connections; a running request is
  /// answered, then its connection closes. Any thread.
  void stop();

  /// The drain time is over: cancels every call the front runs, and every
  /// later one. Any thread.
  void cancel_all();

  /// The drain's grace is over: closes every connection the front holds —
  /// one whose client reads no more of its answer, or sends no more of its
  /// request, too — so that the requests still running end at once. Any
  /// thread.
  void close_all();

  /// Blocks until every request the front answers itself is done.
  void wait_idle();

  /// A connection handed off, its request answered, comes back with the
  /// bytes the front read past that request (`hand_off`'s `rest`): the
  /// front reads its next request. After `stop`, the connection closes.
  /// Any thread.
  void take_back(int fd, std::string read);

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

} // namespace pgw::serve
