// serve's front: the hot path on the worker's loop, every other connection
// handed to the cpp-httplib server (serve_front.hpp).

#include "serve_front.hpp"
#include "serve_openai.hpp"

#include "actors/client.hpp"
#include "apps/cli/request_frame.hpp"

#include "transport/upstream_exchange.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <httplib.h>

#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <optional>
#include <unordered_set>

#include <sys/socket.h>

#include <cerrno>
#include <deque>

namespace pgw::serve {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

/// The longest request head answered here (httplib's line limit).
constexpr size_t max_head_bytes = 8192;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

std::string_view trim(std::string_view s) {
  auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos)
    return {};
  return s.substr(first, s.find_last_not_of(" \t") + 1 - first);
}

/// A request line's method is one cpp-httplib knows (it refuses others
/// with an empty 400).
bool known_method(std::string_view request) {
  auto method = request.substr(0, request.find(' '));
  for (std::string_view m : {"GET", "HEAD", "POST", "PUT", "DELETE",
                             "CONNECT", "OPTIONS", "TRACE", "PATCH"})
    if (method == m)
      return true;
  return false;
}

/// A request head the front answers itself; nullopt = hand it over.
struct hot_head {
  httplib::Request req; ///< method, path, headers (body added later)
  size_t body_bytes = 0;
  bool close = false; ///< the client asks to close (`request_frame::close`)
};

std::optional<hot_head> parse_hot_head(std::string_view head,
                                       size_t max_body) {
  auto eol = head.find("\r\n");
  auto line = head.substr(0, eol);
  hot_head out;
  for (const char* path : {"/v1/chat/completions", "/v1/embeddings",
                           "/v1/ocr"})
    if (line == std::string("POST ") + path + " HTTP/1.1")
      out.req.path = path;
  if (out.req.path.empty())
    return std::nullopt;
  out.req.method = "POST";
  bool has_length = false;
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 2);
    eol = head.find("\r\n");
    auto field = head.substr(0, eol);
    if (field.empty())
      break;
    auto colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return std::nullopt;
    auto name = field.substr(0, colon);
    if (name.find_first_of(" \t") != std::string_view::npos)
      return std::nullopt;
    auto value = trim(field.substr(colon + 1));
    if (same_header_name(name, "Content-Length")) {
      size_t n = 0;
      auto [end, ec] = std::from_chars(value.data(),
                                       value.data() + value.size(), n);
      if (has_length || ec != std::errc{} || end != value.data() + value.size()
          || n > max_body)
        return std::nullopt;
      has_length = true;
      out.body_bytes = n;
    } else if (same_header_name(name, "Transfer-Encoding")
               || same_header_name(name, "Expect")
               || same_header_name(name, "Upgrade")) {
      return std::nullopt;
    }
    out.req.headers.emplace(std::string{name}, std::string{value});
  }
  if (!has_length)
    return std::nullopt;
  return out;
}

/// A response's status line and headers (`res.headers`), then either its
/// Content-Length or chunked transfer, and `Connection: close` when asked.
std::string response_head(const httplib::Response& res, bool chunked,
                          bool close, size_t reserve = 0) {
  std::string out;
  out.reserve(256 + reserve);
  out += "HTTP/1.1 ";
  out += std::to_string(res.status);
  out += ' ';
  out += reason_phrase(res.status);
  out += "\r\n";
  for (auto& [name, value] : res.headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (chunked) {
    out += "Transfer-Encoding: chunked";
  } else {
    out += "Content-Length: ";
    out += std::to_string(res.body.size());
  }
  out += close ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n";
  return out;
}

/// `text` as one chunk of a chunked body (nothing for empty text: an empty
/// chunk would end the body).
void append_chunk(std::string& to, const std::string& text) {
  if (text.empty())
    return;
  char size[20];
  auto [end, ec] = std::to_chars(size, size + sizeof size, text.size(), 16);
  (void) ec;
  to.append(size, end);
  to += "\r\n";
  to += text;
  to += "\r\n";
}

/// Embeddings and OCR bodies up to this size are answered on the loop.
constexpr size_t max_side_body_bytes = 256 * 1024;

/// A live stream's deltas are framed into one write up to about this many
/// bytes; the rest wait, unframed, for the next write (see `held`).
constexpr size_t live_write_bytes = 256 * 1024;

/// A refused request's connection is read and discarded for up to this long
/// (and this many bytes) after its answer, before it closes: closing with
/// unread bytes would reset the connection, and the client could lose the
/// answer while it still sends its body.
constexpr double linger_s = 2;
constexpr size_t linger_bytes = 1024 * 1024;

} // namespace

struct front::impl : std::enable_shared_from_this<front::impl> {
  asio::io_context& loop;
  context& ctx;
  front_options opts;
  tcp::acceptor acceptor;
  asio::steady_timer retry; ///< the next accept after a failed one
  bool accept_failing = false; ///< the last accept failed (on the loop)
  bool stopping = false;    ///< on the loop

  struct session;
  /// Sessions waiting for a request (closed by `stop`); on the loop.
  std::unordered_set<session*> idle;
  /// Sessions whose call runs (cancelled by `cancel_all`); on the loop.
  std::unordered_set<session*> calling;
  /// Every session with its connection (closed by `close_all`); on the loop.
  std::unordered_set<session*> open;
  bool all_cancelled = false; ///< on the loop

  std::mutex mtx;
  std::condition_variable cv;
  int64_t running = 0; ///< hot requests started and not yet written

  impl(asio::io_context& l, context& c, front_options o)
    : loop(l), ctx(c), opts(o), acceptor(l), retry(l) {
    // nop
  }

  void accept() {
    acceptor.async_accept([self = shared_from_this()](error_code ec,
                                                      tcp::socket sock) {
      if (self->stopping)
        return;
      if (ec) {
        // Out of descriptors, say: try again shortly rather than spin. The
        // operator hears of it once per run of failures.
        if (!self->accept_failing && self->opts.warn)
          self->opts.warn("cannot accept a connection (" + ec.message()
                          + "); trying again every 10 ms");
        self->accept_failing = true;
        self->retry.expires_after(std::chrono::milliseconds(10));
        self->retry.async_wait([self](error_code) { self->accept(); });
        return;
      }
      if (self->accept_failing && self->opts.warn)
        self->opts.warn("accepting connections again");
      self->accept_failing = false;
      error_code ignored;
      sock.set_option(tcp::no_delay(true), ignored);
      std::make_shared<session>(self, std::move(sock))->next_request();
      self->accept();
    });
  }

  void request_started() {
    std::lock_guard<std::mutex> guard{mtx};
    ++running;
  }

  void request_ended() {
    std::lock_guard<std::mutex> guard{mtx};
    if (--running == 0)
      cv.notify_all();
  }

  struct session : std::enable_shared_from_this<session> {
    std::shared_ptr<impl> owner;
    tcp::socket sock;
    asio::steady_timer timer;
    std::string in; ///< bytes read and not yet answered
    /// The request in `in` is partly read: its read deadline runs.
    bool reading = false;
    /// The keep-alive deadline runs (set once per wait between requests:
    /// blank lines before a request do not push it back).
    bool waiting_armed = false;
    /// This request's `100 Continue` went out.
    bool continue_sent = false;
    /// How far this request's chunked body was scanned.
    cli::chunk_cursor chunks;
    /// The whole request's framing (its size, head and body), once whole.
    cli::request_frame framed;
    std::array<char, 16384> chunk{};

    // The request being answered.
    httplib::Request req;
    httplib::Response res;
    openai_request call;
    chat_start start;
    std::shared_ptr<in_flight_guard> guard;
    std::optional<client> caller;
    bool calling = false; ///< a call runs (and is in `owner->calling`)
    bool left = false;    ///< the client hung up during the call
    std::chrono::steady_clock::time_point started;
    bool close_after = false;
    bool lingering = false; ///< a refused request: linger, then close
    std::string out;
    /// How a live stream ended badly after its 200 (the access line).
    std::string outcome;

    // A live stream (`stream: true`, not buffered): the deltas are written
    // as SSE chunks as they come, on the loop.
    std::unique_ptr<live_call> live; ///< while the call runs
    bool head_sent = false;  ///< its 200 and first chunk are out
    bool live_over = false;  ///< its terminal event came (the last bytes queued)
    bool writing = false;    ///< an async_write of `out` runs
    bool write_failed = false;
    std::string pending;     ///< bytes queued behind the running write
    /// Deltas waiting behind the running write, unframed. Each holds its
    /// transport's ticket (`stream_delta::hold`): while a client reads
    /// slower than the upstream sends, the transport's relay sees them
    /// alive and joins what comes next into fewer, larger deltas, so
    /// nothing here grows past the answer's own bound
    /// (MAX_RESPONSE_BYTES) and a client that keeps reading gets all of it.
    std::deque<stream_delta> held;
    /// The terminal event's chunks, written once `held` is out.
    std::string closing;
    long long created = 0;

    /// When the connection closes unless something happens (`max` = no
    /// limit now, while a call runs). One timer checks it lazily: moving
    /// the deadline costs no system call.
    std::chrono::steady_clock::time_point deadline
      = std::chrono::steady_clock::time_point::max();
    bool timer_armed = false;

    session(std::shared_ptr<impl> o, tcp::socket s)
      : owner(std::move(o)), sock(std::move(s)), timer(owner->loop) {
      owner->open.insert(this);
    }

    void expire_in(double s) {
      deadline = std::chrono::steady_clock::now() + seconds(s);
      if (!timer_armed || deadline < timer.expiry())
        arm_timer();
    }

    void no_deadline() {
      deadline = std::chrono::steady_clock::time_point::max();
    }

    void arm_timer() {
      timer_armed = true;
      timer.expires_at(deadline);
      timer.async_wait([weak = weak_from_this()](error_code ec) {
        auto self = weak.lock();
        if (!self || ec) // aborted: re-armed (still armed) or closed
          return;
        self->timer_armed = false;
        if (self->deadline == std::chrono::steady_clock::time_point::max())
          return;
        if (std::chrono::steady_clock::now() >= self->deadline)
          return self->close();
        self->arm_timer();
      });
    }

    ~session() {
      owner->idle.erase(this);
      owner->calling.erase(this);
      owner->open.erase(this);
    }

    void close() {
      owner->idle.erase(this);
      no_deadline();
      timer.cancel();
      error_code ignored;
      sock.close(ignored);
    }

    /// Answers the request `in` holds once it is whole, or reads more.
    /// Every request is read whole here, within the read timeout from its
    /// first byte, before anything answers it (a client that trickles
    /// bytes holds no httplib thread and no connection past that); one
    /// that cannot be framed safely is refused and the connection closed
    /// (apps/cli/request_frame.hpp).
    void next_request() {
      if (owner->stopping)
        return close();
      // Blank lines before a request line are ignored (RFC 9112 §2.2).
      in.erase(0, std::min(in.size(), in.find_first_not_of("\r\n")));
      if (in.empty())
        return read_more();
      auto frame = cli::frame_request(in, max_head_bytes,
                                      owner->opts.max_body_bytes, &chunks);
      using state = cli::request_frame::state;
      if (frame.what == state::bad)
        return refuse(frame);
      waiting_armed = false; // a request began
      if (frame.what == state::partial) {
        if (!reading) {
          reading = true;
          expire_in(owner->opts.read_timeout_s);
        }
        if (frame.expects_continue && !continue_sent)
          return send_continue();
        return read_more();
      }
      reading = false;
      chunks = {};
      // An absolute-form target is read as its path (RFC 9112 §3.2.2).
      if (auto shorter = cli::to_origin_form(in); shorter > 0) {
        frame.head_bytes -= shorter;
        frame.bytes -= shorter;
        if (frame.trailer_at > 0)
          frame.trailer_at -= shorter;
      }
      framed = frame;
      if (!known_method(in))
        return refuse_method();
      if (continue_sent) {
        continue_sent = false;
        forget_expect(frame.head_bytes);
      }
      auto head = parse_hot_head(std::string_view{in}.substr(0, frame.head_bytes),
                                 owner->opts.max_body_bytes);
      if (!head)
        return hand_off();
      head->close = frame.close;
      answer(std::move(*head), frame.head_bytes);
    }

    /// Reads on; the deadline is the keep-alive time between requests,
    /// the request's read deadline (set once, by `next_request`) within one.
    void read_more() {
      bool waiting = in.empty();
      if (waiting) {
        owner->idle.insert(this);
        if (!waiting_armed) {
          waiting_armed = true;
          expire_in(owner->opts.keep_alive_s);
        }
      }
      sock.async_read_some(
        asio::buffer(chunk),
        [self = shared_from_this()](error_code ec, size_t n) {
          self->owner->idle.erase(self.get());
          if (ec)
            return self->close();
          self->in.append(self->chunk.data(), n);
          self->next_request();
        });
    }

    /// `Expect: 100-continue` with the body still to come: the interim
    /// answer, once, then the body is read.
    void send_continue() {
      continue_sent = true;
      static const std::string interim = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(sock, asio::buffer(interim),
                        [self = shared_from_this()](error_code ec, size_t) {
                          if (ec)
                            return self->close();
                          self->read_more();
                        });
    }

    /// The front sent this request's `100 Continue`: its Expect field is
    /// renamed in place (same length), so that neither the hot path nor
    /// httplib, handed the request, answers it again.
    void forget_expect(size_t head_bytes) {
      for (size_t at = in.find("\r\n") + 2; at < head_bytes;) {
        auto eol = in.find("\r\n", at);
        auto colon = in.find(':', at);
        if (colon < eol && same_header_name(std::string_view{in}.substr(
                                              at, colon - at),
                                            "Expect"))
          in.replace(at, colon - at, "X-Sent");
        at = eol + 2;
      }
    }

    /// A request that cannot be framed safely (request_frame.hpp): its
    /// error in OpenAI's shape, then the connection closes — what follows
    /// cannot be trusted to start a request.
    void refuse(const cli::request_frame& frame) {
      req = httplib::Request{};
      auto line = std::string_view{in}.substr(0, in.find("\r\n"));
      auto sp1 = line.find(' ');
      auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
      // The access line's method (client text only when it is a short
      // upper-case word) and route (named only when it is one of serve's).
      auto method = sp2 == std::string_view::npos ? std::string_view{}
                                                  : line.substr(0, sp1);
      bool word = !method.empty() && method.size() <= 16;
      for (char c : method)
        word = word && c >= 'A' && c <= 'Z';
      req.method = word ? std::string{method} : "-";
      if (word)
        req.path = std::string{line.substr(sp1 + 1, sp2 - sp1 - 1)};
      in.clear();
      close_after = true;
      lingering = true;
      started = std::chrono::steady_clock::now();
      res = httplib::Response{};
      owner->request_started();
      send_error(res, frame.status, frame.reason, "invalid_request_error",
                 frame.status == 413 ? "request_too_large" : "invalid_request");
      respond(false);
    }

    /// A method cpp-httplib does not know (it would answer an empty 400):
    /// 501 naming it (methods are case-sensitive, RFC 9110 §9.1).
    void refuse_method() {
      cli::request_frame no;
      no.status = 501;
      no.reason = "the method \"" + in.substr(0, std::min<size_t>(
                                                  in.find(' '), 16))
                  + "\" is not supported (methods are case-sensitive: GET, "
                    "POST, ...)";
      refuse(no);
    }

    /// After a refusal's answer: no more sending; what the client still
    /// sends is read and dropped until it closes, for up to `linger_s` and
    /// `linger_bytes`; then the connection closes.
    void linger() {
      error_code ignored;
      sock.shutdown(tcp::socket::shutdown_send, ignored);
      expire_in(linger_s);
      drain(0);
    }

    void drain(size_t dropped) {
      if (dropped > linger_bytes)
        return close();
      sock.async_read_some(asio::buffer(chunk),
                           [self = shared_from_this(), dropped](error_code ec,
                                                                size_t n) {
                             if (ec)
                               return self->close();
                             self->drain(dropped + n);
                           });
    }

    /// A request with its whole body: a chat completion (JSON, buffered or
    /// live SSE) answered here unless the handler would refuse its body
    /// (handed over, so that httplib answers it exactly as before); an
    /// embeddings or OCR request (`answer_side`).
    void answer(hot_head head, size_t head_bytes) {
      auto& ctx = owner->ctx;
      req = std::move(head.req);
      req.body.assign(in, head_bytes, head.body_bytes);
      call = openai_request{};
      if (!ctx.keys.empty()
          && !ctx.keys.accepts(req.get_header_value("Authorization")))
        return hand_off();
      if (req.path != "/v1/chat/completions") {
        // A large embeddings batch or document is decoded and checked on
        // an httplib thread, not on the thread every actor shares.
        if (head.body_bytes > max_side_body_bytes)
          return hand_off();
        return answer_side(head_bytes, head.body_bytes, head.close);
      }
      if (parse_request(req.body, call))
        return hand_off();
      in.erase(0, head_bytes + head.body_bytes);
      close_after = head.close;
      started = std::chrono::steady_clock::now();
      res = httplib::Response{};
      owner->request_started();
      guard = std::make_shared<in_flight_guard>(ctx);
      if (guard->overloaded(res) || !start_chat(ctx, req, call, res, start))
        return respond(false);
      client& cl = *start.scope->chat;
      no_deadline(); // the call has its own
      caller.emplace(cl);
      left = false;
      calling = true;
      owner->calling.insert(this);
      if (call.stream && start.mode != "buffered") { // a live stream
        start_live(cl);
      } else {
        cl.chat_then(std::move(call.req),
                     [self = shared_from_this()](
                       caf::expected<chat_response> result) {
                       auto& loop = self->owner->loop;
                       asio::post(loop,
                                  [self, r = std::move(result)]() mutable {
                                    self->answered(r);
                                  });
                     });
      }
      if (owner->all_cancelled)
        cancel_call();
      watch_hang_up();
    }

    /// An embeddings or OCR request: answered here, with the handler's
    /// checks and answer (`start_side`), the call started with
    /// `client::embed_then` / `ocr_then`.
    void answer_side(size_t head_bytes, size_t body_bytes, bool close) {
      auto& ctx = owner->ctx;
      in.erase(0, head_bytes + body_bytes);
      close_after = close;
      started = std::chrono::steady_clock::now();
      res = httplib::Response{};
      owner->request_started();
      guard = std::make_shared<in_flight_guard>(ctx);
      side_start side;
      if (guard->overloaded(res) || !start_side(ctx, req, res, side))
        return respond(false);
      client& cl = *side.scope->chat;
      no_deadline(); // the call has its own
      caller.emplace(cl);
      start.call_id = side.call_id; // for cancel_call
      left = false;
      calling = true;
      owner->calling.insert(this);
      side.launch(cl, [self = shared_from_this()](side_answer write) {
        asio::post(self->owner->loop, [self, write = std::move(write)] {
          self->side_answered(write);
        });
      });
      if (owner->all_cancelled)
        cancel_call();
      watch_hang_up();
    }

    void side_answered(const side_answer& write) {
      calling = false;
      owner->calling.erase(this);
      error_code ignored;
      sock.cancel(ignored); // the hang-up watch
      write(res, left);
      respond(left);
    }

    /// Cancels the running call (the client left, or the drain is over).
    void cancel_call() {
      if (live)
        live->cancel();
      else if (caller)
        caller->cancel(start.call_id);
    }

    void answered(caf::expected<chat_response>& result) {
      calling = false;
      owner->calling.erase(this);
      error_code ignored;
      sock.cancel(ignored); // the hang-up watch
      finish_chat(owner->ctx, call, start, result, left, res);
      respond(left);
    }

    /// While the call runs: a client that hangs up cancels it at once. Data
    /// instead (a pipelined request) is read on and kept for the next
    /// request, so that a hang-up behind it is seen too; up to one whole
    /// request's worth (`pipelined_cap`), after which reading stops (TCP
    /// holds the rest back) and so does the watch.
    void watch_hang_up() {
      sock.async_wait(
        tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
          if (!self->calling || ec == asio::error::operation_aborted)
            return;
          auto cap = self->pipelined_cap();
          for (;;) {
            if (self->in.size() >= cap)
              return; // read when this call is answered
            auto room = std::min(self->chunk.size(), cap - self->in.size());
            auto n = ::recv(self->sock.native_handle(), self->chunk.data(),
                            room, MSG_DONTWAIT);
            if (n > 0) {
              self->in.append(self->chunk.data(), static_cast<size_t>(n));
              continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK
                          || errno == EINTR))
              return self->watch_hang_up(); // all read; watch on
            break; // the end of the stream (0), or a reset
          }
          self->left = true;
          self->cancel_call();
        });
    }

    /// How many bytes a connection may hold unanswered while a call runs:
    /// one request of the largest size `frame_request` accepts.
    size_t pipelined_cap() const {
      return max_head_bytes + owner->opts.max_body_bytes;
    }

    void respond(bool gone) {
      guard.reset();
      if (res.status == -1)
        res.status = 200; // as httplib does for a handler that set none
      if (gone) { // httplib logs 499 and writes nothing
        finished();
        return close();
      }
      bool close = close_after || owner->stopping;
      // The head, then the body where it is (an embeddings answer may be
      // a hundred megabytes: no second copy of it).
      out = response_head(res, false, close);
      std::array<asio::const_buffer, 2> bytes{asio::buffer(out),
                                              asio::buffer(res.body)};
      expire_in(owner->opts.write_timeout_s);
      asio::async_write(sock, bytes,
                        [self = shared_from_this(), close](error_code ec,
                                                           size_t) {
                          self->no_deadline();
                          self->finished();
                          std::string().swap(self->res.body); // sent
                          if (!ec && self->lingering)
                            return self->linger();
                          if (ec || close)
                            return self->close();
                          self->next_request();
                        });
    }

    /// The request's access line and metrics; it no longer runs.
    void finished() {
      log_request(owner->ctx, req, res, started, outcome);
      outcome.clear();
      out.clear();
      owner->request_ended();
    }

    // -- live streaming -------------------------------------------------------

    void start_live(client& cl) {
      head_sent = live_over = writing = write_failed = false;
      pending.clear();
      held.clear();
      closing.clear();
      created = static_cast<long long>(std::time(nullptr));
      auto self = shared_from_this();
      // The callbacks run on the CAF worker, which is this loop's thread;
      // posted all the same, so that they never run inside another handler.
      live = std::make_unique<live_call>(cl.chat_stream(
        std::move(call.req),
        [self](const stream_delta& d) {
          asio::post(self->owner->loop, [self, d] { self->live_delta(d); });
        },
        [self] {
          asio::post(self->owner->loop, [self] { self->live_end(); });
        }));
    }

    /// A delta: the first one (the call committed to its source) sends the
    /// 200 and the stream's opening chunk.
    void live_delta(const stream_delta& d) {
      if (!live || live_over || write_failed)
        return;
      if (!head_sent) {
        head_sent = true;
        res.status = 200;
        res.set_header("x-pgw-source", d.source);
        res.set_header("x-pgw-cache", d.cache_hit ? "hit" : "miss");
        res.set_header("x-pgw-stream-mode", "live");
        res.set_header("Cache-Control", "no-cache");
        res.set_header("Content-Type", "text/event-stream");
        pending += response_head(res, true, close_after || owner->stopping);
        append_chunk(pending, stream_open_sse(start.call_id, call.model,
                                              created));
      }
      held.push_back(d);
      flush_live();
    }

    /// The terminal event (after the last delta): before any delta, an
    /// ordinary answer (an error, or an answer without deltas in the
    /// buffered form); after, the closing chunks or one error event.
    void live_end() {
      auto result = live->result().get(); // set before on_end runs
      calling = false;
      owner->calling.erase(this);
      auto& ctx = owner->ctx;
      if (!head_sent) {
        error_code ignored;
        sock.cancel(ignored); // the hang-up watch; no write runs
        finish_chat(ctx, call, start, result, left, res);
        live.reset();
        return respond(left);
      }
      const auto& scope_name = start.scope->config->name;
      double total_s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start.started)
                         .count();
      if (result) {
        ctx.stats.record_call(scope_name, result->source, "ok", total_s,
                              &*result);
        closing = stream_close_sse(*result, call.model, created,
                                   call.include_usage);
      } else {
        outcome = code_name(result.error());
        ctx.stats.record_failure(scope_name, result.error(), total_s);
        closing = error_sse(result.error());
      }
      if (left)
        outcome = "client_gone";
      live_over = true;
      flush_live();
    }

    /// Writes what is queued, one write at a time: the deltas held behind
    /// the last write, framed up to `live_write_bytes` (the rest stay
    /// held), then the terminal event's chunks. Once those are out (or the
    /// client is gone), the request ends.
    void flush_live() {
      if (writing)
        return;
      if (write_failed) {
        pending.clear();
        held.clear();
      }
      while (!held.empty() && pending.size() < live_write_bytes) {
        append_chunk(pending, delta_sse(held.front(), start.call_id,
                                        call.model, created));
        held.pop_front();
      }
      if (held.empty() && live_over && !write_failed && !closing.empty()) {
        append_chunk(pending, closing);
        pending += "0\r\n\r\n";
        closing.clear();
      }
      if (pending.empty()) {
        if (live_over && held.empty())
          end_live();
        return;
      }
      writing = true;
      out.swap(pending);
      pending.clear();
      expire_in(owner->opts.write_timeout_s);
      asio::async_write(sock, asio::buffer(out),
                        [self = shared_from_this()](error_code ec, size_t) {
                          self->writing = false;
                          self->no_deadline();
                          self->out.clear();
                          if (ec && !self->write_failed) {
                            self->write_failed = true;
                            self->left = true;
                            if (self->live)
                              self->live->cancel();
                          }
                          self->flush_live();
                        });
    }

    void end_live() {
      live.reset(); // the call's helper (its callbacks hold this session)
      error_code ignored;
      sock.cancel(ignored); // the hang-up watch
      guard.reset();
      if (write_failed && outcome.empty())
        outcome = "client_gone"; // the call ended well; its end never got out
      finished();
      if (write_failed || close_after || owner->stopping)
        return close();
      next_request();
    }

    // -- the hand-off ---------------------------------------------------------

    /// Gives the connection, with the whole request at the start of `in`,
    /// to the cpp-httplib server (`front_options::hand_off`); the bytes
    /// after it travel along and come back with the connection
    /// (`take_back`), whatever httplib left unread. The session ends.
    /// httplib gets the request as framed here: `Content-Length: 0` when
    /// the head gives no length (httplib would read a POST's body until
    /// the connection ends), a chunked body without its trailer fields
    /// (httplib refuses any).
    void hand_off() {
      no_deadline(); // httplib keeps its own timeouts
      timer.cancel();
      error_code ec;
      int fd = sock.release(ec);
      if (ec)
        return close();
      auto rest = in.substr(framed.bytes);
      in.resize(framed.bytes);
      if (framed.trailer_at > 0)
        in.replace(framed.trailer_at, std::string::npos, "\r\n");
      if (framed.no_length)
        in.insert(framed.head_bytes - 2, "Content-Length: 0\r\n");
      owner->opts.hand_off(fd, std::move(in), std::move(rest));
      in.clear();
    }
  };
};

front::front(asio::io_context& loop, context& ctx, const std::string& host,
             uint16_t port, front_options opts)
  : impl_(std::make_shared<impl>(loop, ctx, opts)) {
  tcp::endpoint at{asio::ip::make_address(host), port};
  auto& acc = impl_->acceptor;
  acc.open(at.protocol());
  acc.set_option(tcp::acceptor::reuse_address(true));
  acc.bind(at);
  acc.listen(4096);
}

front::~front() {
  stop();
}

uint16_t front::port() const {
  return impl_->acceptor.local_endpoint().port();
}

void front::start() {
  asio::post(impl_->loop, [self = impl_] { self->accept(); });
}

void front::stop() {
  asio::post(impl_->loop, [self = impl_] {
    if (self->stopping)
      return;
    self->stopping = true;
    error_code ignored;
    self->acceptor.close(ignored);
    auto waiting = self->idle;
    for (auto* s : waiting)
      s->close();
  });
}

void front::cancel_all() {
  asio::post(impl_->loop, [self = impl_] {
    self->all_cancelled = true;
    for (auto* s : self->calling)
      s->cancel_call();
  });
}

void front::close_all() {
  asio::post(impl_->loop, [self = impl_] {
    // A write or read waiting on the client ends (operation_aborted), and
    // with it the request; a call still running answers into nothing.
    auto sessions = self->open;
    for (auto* s : sessions)
      s->close();
  });
}

void front::take_back(int fd, std::string read) {
  asio::post(impl_->loop, [self = impl_, fd, read = std::move(read)]() mutable {
    if (self->stopping) {
      ::close(fd);
      return;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    error_code ec;
    tcp::socket sock{self->loop};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0
        || (sock.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd,
                        ec),
            ec)) {
      ::close(fd);
      return;
    }
    auto s = std::make_shared<impl::session>(self, std::move(sock));
    s->in = std::move(read);
    s->next_request();
  });
}

void front::wait_idle() {
  std::unique_lock<std::mutex> lock{impl_->mtx};
  impl_->cv.wait(lock, [this] { return impl_->running == 0; });
}

} // namespace pgw::serve
