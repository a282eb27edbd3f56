#include "transport/beast_transport.hpp"

#include "config/limits.hpp"
#include "transport/classify.hpp"
#include "transport/socket_bytes.hpp"
#include "transport/upstream_exchange.hpp"

#include <caf/send.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

namespace pgw {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;

double ms_between(steady::time_point from, steady::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

steady::duration seconds(double s) {
  return saturating_duration<steady::duration>(s);
}

std::string_view view(beast::string_view s) {
  return {s.data(), s.size()};
}

/// One upstream connection, plain or TLS, bound to one loop.
struct connection {
  connection(asio::io_context& ctx, size_t loop_index)
    : plain(ctx), loop(loop_index), idle_timer(ctx) {
    // nop
  }

  tcp::socket& lowest() {
    return tls ? tls->next_layer() : plain;
  }

  /// Runs `f` with the stream requests and responses go through.
  template <class F>
  void with_stream(F&& f) {
    if (tls)
      f(*tls);
    else
      f(plain);
  }

  tcp::socket plain; ///< moved into `tls` for HTTPS
  /// On the heap: a plain connection (most of those held open) does not
  /// carry an empty TLS stream's ~400 bytes.
  std::unique_ptr<ssl::stream<tcp::socket>> tls;
  size_t loop;
  /// While pooled: ends its idle time (see watch_idle).
  asio::steady_timer idle_timer;
  /// Counts its stays in the pool: a watch of an earlier stay that fired
  /// too late to be cancelled leaves this one alone.
  uint64_t stays = 0;
};

using connection_ptr = std::shared_ptr<connection>;

/// Where the parser puts what it reads.
class body_sink {
public:
  virtual ~body_sink() = default;
  /// A piece of the body; false stops reading.
  virtual bool on_body_piece(std::string_view data) = 0;
};

/// A Beast parser that keeps nothing: status, fields and body pieces go to
/// the call's response_reader as they are parsed, so the header bounds
/// (lines, bytes) are enforced in the read loop and the body never piles up
/// outside the reader's caps.
class reader_parser : public http::basic_parser<false> {
public:
  reader_parser(response_reader& reader, body_sink& sink)
    : reader_(reader), sink_(sink) {
    header_limit(static_cast<std::uint32_t>(max_header_bytes + 1024));
    body_limit(boost::none); // the reader's caps bound the body
    eager(true);
  }

  /// True when the reader (not the connection) stopped the read.
  bool refused() const {
    return refused_;
  }

  /// True when the message read is an interim 1xx response (RFC 9110
  /// §15.2): not the answer; the final response follows on the connection.
  bool interim() const {
    return interim_;
  }

private:
  void on_request_impl(http::verb, beast::string_view, beast::string_view,
                       int, error_code& ec) override {
    ec = http::error::bad_method; // a response parser
  }

  void on_response_impl(int code, beast::string_view, int,
                        error_code& ec) override {
    if (code == 101) { // the connection would speak another protocol
      reader_.on_status(code);
      reader_.refuse_head(unexpected_switching_protocols);
      return refuse(ec);
    }
    interim_ = code >= 100 && code < 200; // its fields are not the answer's
    if (!interim_)
      reader_.on_status(code);
  }

  void on_field_impl(http::field, beast::string_view name,
                     beast::string_view value, error_code& ec) override {
    if (!interim_ && !reader_.on_field(view(name), view(value)))
      refuse(ec);
  }

  void on_header_impl(error_code& ec) override {
    if (!interim_ && !reader_.on_header_end())
      refuse(ec);
  }

  void on_body_init_impl(boost::optional<std::uint64_t> const&,
                         error_code&) override {
    // nop
  }

  std::size_t on_body_impl(beast::string_view body, error_code& ec) override {
    if (!sink_.on_body_piece(view(body)))
      refuse(ec);
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, beast::string_view,
                            error_code&) override {
    // nop
  }

  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                                 error_code& ec) override {
    return on_body_impl(body, ec);
  }

  void on_finish_impl(error_code&) override {
    // nop
  }

  void refuse(error_code& ec) {
    refused_ = true;
    ec = asio::error::operation_aborted;
  }

  response_reader& reader_;
  body_sink& sink_;
  bool refused_ = false;
  bool interim_ = false;
};

/// Interim responses skipped before the answer; more is malformed.
constexpr int max_interim_responses = 16;

/// What is wrong with the upstream's HTTP framing, in plain words, when
/// Beast's parser refused it; empty for any other error (a connection cut,
/// a clean end of stream, our own limits).
std::string framing_problem(const error_code& ec) {
  if (ec.category() != http::make_error_code(http::error::bad_version)
                          .category())
    return {};
  std::string what;
  switch (static_cast<http::error>(ec.value())) {
    case http::error::bad_version:
    case http::error::bad_status:
    case http::error::bad_reason:
    case http::error::bad_method:
    case http::error::bad_target:
      what = "an invalid status line";
      break;
    case http::error::bad_line_ending:
    case http::error::bad_field:
    case http::error::bad_value:
    case http::error::bad_obs_fold:
      what = "an invalid header line";
      break;
    case http::error::bad_content_length:
    case http::error::multiple_content_length:
      what = bad_content_length;
      break;
    case http::error::bad_transfer_encoding:
      what = bad_transfer_encoding;
      break;
    case http::error::bad_chunk:
    case http::error::bad_chunk_extension:
      what = "an invalid chunk in a chunked body";
      break;
    default:
      return {};
  }
  return broken_framing(what + " (" + ec.message() + ")");
}

/// Where a call failed before a status line.
enum class stage { none, resolve, connect, tls, write, read };

bool is_ip_literal(const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

} // namespace

// -- the transport's shared parts -------------------------------------------------

/// A call's way back to its transport (see httplib_transport's): a cancel
/// posts to a loop only while `self` is set, and closing clears it first.
struct beast_owner_link {
  std::mutex mtx;
  beast_transport::impl* self = nullptr;
};

struct beast_call;

struct beast_transport::impl : transport_counters {
  options opts;
  std::shared_ptr<beast_owner_link> link
    = std::make_shared<beast_owner_link>();

  // Declared first, destroyed last: every call lives in a handler of its
  // loop, so destroying the loops destroys the calls.
  struct loop_deleter {
    bool owned = true;
    void operator()(asio::io_context* ctx) const {
      if (owned)
        delete ctx;
    }
  };
  std::vector<std::unique_ptr<asio::io_context, loop_deleter>> loops;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>>
    guards;
  std::vector<std::thread> threads;
  std::atomic<size_t> next_loop{0};

  std::atomic<size_t> running{0};

  transport_warnings warn;

  std::mutex pool_mtx;
  std::unordered_map<std::string, std::vector<connection_ptr>> idle;

  /// TLS contexts by CA file ("" = the system store / SSL_CERT_FILE); null
  /// with the reason when the file cannot be loaded.
  std::mutex tls_mtx;
  std::map<std::string, std::pair<std::shared_ptr<ssl::context>, std::string>>
    tls_contexts;

  explicit impl(options o) : opts(o) {
    if (opts.loop != nullptr) {
      loops.emplace_back(opts.loop, loop_deleter{false});
      link->self = this;
      return;
    }
    size_t n = opts.threads;
    if (n == 0)
      n = std::max(1u, std::thread::hardware_concurrency());
    for (size_t i = 0; i < n; ++i) {
      loops.emplace_back(new asio::io_context(1), loop_deleter{});
      guards.push_back(asio::make_work_guard(*loops.back()));
      // Creates the loop's reactor (epoll and eventfd descriptors) now, not
      // with the first call: a process out of descriptors later still has
      // a working transport that answers local_resource_exhausted.
      asio::steady_timer warm_up{*loops.back()};
    }
    for (size_t i = 0; i < n; ++i)
      threads.emplace_back([ctx = loops[i].get()] { ctx->run(); });
    link->self = this;
  }

  ~impl() {
    {
      std::lock_guard<std::mutex> guard{link->mtx};
      link->self = nullptr;
    }
    guards.clear();
    for (auto& ctx : loops)
      if (ctx.get_deleter().owned)
        ctx->stop();
    for (auto& t : threads) {
      if (t.get_id() == std::this_thread::get_id())
        t.detach(); // a loop's own handler released the transport
      else
        t.join();
    }
    {
      std::lock_guard<std::mutex> guard{pool_mtx};
      idle.clear();
    }
    // Destroys every call still waiting in a loop (its socket closes).
    loops.clear();
  }

  static std::string pool_key(const source_config& src) {
    return src.scope + "/" + src.name;
  }

  /// An idle connection for `src`, or null.
  connection_ptr take_idle(const source_config& src) {
    std::lock_guard<std::mutex> guard{pool_mtx};
    auto i = idle.find(pool_key(src));
    if (i == idle.end() || i->second.empty())
      return nullptr;
    auto conn = std::move(i->second.back());
    i->second.pop_back();
    return conn;
  }

  /// Pools `conn` (on its loop; else it closes) and watches it there.
  void give_back(std::shared_ptr<const source_config> src,
                 connection_ptr conn) {
    uint64_t stay = 0;
    {
      std::lock_guard<std::mutex> guard{pool_mtx};
      auto& list = idle[pool_key(*src)];
      if (list.size() >= opts.max_idle_per_source)
        return;
      stay = ++conn->stays;
      list.push_back(conn);
    }
    watch_idle(std::move(src), conn, stay);
  }

  /// Closes pooled `conn` after `opts.idle_timeout`, or at once when the
  /// upstream closes it or sends anything while it is idle: no socket left
  /// in CLOSE_WAIT, no stray byte kept for the next call. Runs on `conn`'s
  /// loop, before any call can take it there (`run` cancels the watch).
  void watch_idle(std::shared_ptr<const source_config> src,
                  const connection_ptr& conn, uint64_t stay) {
    auto end_stay = [src = std::move(src), weak = std::weak_ptr{conn},
                     owner = link, stay](const error_code& ec) {
      if (ec == asio::error::operation_aborted)
        return; // a call took it, or it closed
      auto c = weak.lock();
      if (!c)
        return;
      std::lock_guard<std::mutex> guard{owner->mtx};
      if (owner->self != nullptr)
        owner->self->drop_idle(*src, *c, stay);
    };
    conn->idle_timer.expires_after(opts.idle_timeout);
    conn->idle_timer.async_wait(end_stay);
    conn->lowest().async_wait(tcp::socket::wait_read, std::move(end_stay));
  }

  /// Takes `conn` out of the pool if it is still there for stay `stay`
  /// (its last owner closes it).
  void drop_idle(const source_config& src, connection& conn, uint64_t stay) {
    std::lock_guard<std::mutex> guard{pool_mtx};
    auto i = idle.find(pool_key(src));
    if (i == idle.end())
      return;
    auto& list = i->second;
    auto at = std::find_if(list.begin(), list.end(), [&](auto& c) {
      return c.get() == &conn;
    });
    if (at != list.end() && conn.stays == stay) {
      list.erase(at);
      closed_idle.fetch_add(1, std::memory_order_relaxed);
    }
  }

  /// The TLS context for `ca_file`, or null with why.
  std::pair<std::shared_ptr<ssl::context>, std::string>
  tls_context(const std::string& ca_file) {
    std::lock_guard<std::mutex> guard{tls_mtx};
    auto i = tls_contexts.find(ca_file);
    if (i != tls_contexts.end())
      return i->second;
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
    ctx->set_verify_mode(ssl::verify_peer);
    SSL_CTX_set_mode(ctx->native_handle(), SSL_MODE_RELEASE_BUFFERS);
    error_code ec;
    if (ca_file.empty())
      ctx->set_default_verify_paths(ec); // honours SSL_CERT_FILE
    else
      ctx->load_verify_file(ca_file, ec);
    std::pair<std::shared_ptr<ssl::context>, std::string> entry;
    if (ec)
      entry.second = "cannot load the CA certificates: " + ec.message();
    else
      entry.first = std::move(ctx);
    tls_contexts.emplace(ca_file, entry);
    return entry;
  }
};

// -- one call ---------------------------------------------------------------------

/// Lives on one loop: every member is touched by that loop's thread only.
struct beast_call : std::enable_shared_from_this<beast_call>, body_sink {
  beast_call(beast_transport::impl& owner, size_t loop_index)
    : self(owner),
      loop(loop_index),
      ctx(*owner.loops[loop_index]),
      timer(ctx) {
    // nop
  }

  beast_transport::impl& self;
  /// `self`, kept alive by a call on an outside loop (which the transport
  /// cannot stop); null on the transport's own loops, which end the calls.
  std::shared_ptr<beast_transport::impl> keep;
  size_t loop;
  asio::io_context& ctx;
  upstream_call call;
  caf::actor sink;
  uint64_t tag = 0;
  upstream_target target;

  connection_ptr conn;
  bool reused = false;
  bool retried = false;
  int interims = 0; ///< interim 1xx responses skipped
  /// When the request was written (see retry_stale).
  steady::time_point written_at;
  bool request_dropped = false; ///< see drop_request
  std::unique_ptr<tcp::resolver> resolver;
  http::request<http::string_body> req;
  beast::flat_buffer buf{2 * max_header_bytes};
  std::optional<response_reader> reader;
  std::optional<reader_parser> parser;
  asio::steady_timer timer;
  caf::optional<double> ttft_ms; ///< set at the first token

  steady::time_point started;
  steady::time_point connect_started;
  steady::time_point last_activity; ///< the answer's last progress
  std::optional<steady::time_point> done_at;
  std::optional<steady::time_point> finish_at;
  bool connecting = false;
  bool connected = false; ///< request bytes may have gone out
  bool first_token = false;
  bool sent = false; ///< the response was read to its end
  bool cancelled = false;
  bool over = false;
  timeout_kind fired = timeout_kind::none;
  stage failed_at = stage::none;
  error_code failure;
  long verify_result = X509_V_OK;
  bool certificate_rejected = false;
  std::string tls_problem;

  // -- timeouts --

  std::pair<steady::time_point, timeout_kind> deadline() const {
    auto& src = *call.source;
    auto best = started + seconds(src.timeout_s);
    auto kind = timeout_kind::total;
    auto consider = [&](steady::time_point t, timeout_kind k) {
      if (t < best) {
        best = t;
        kind = k;
      }
    };
    if (connecting)
      consider(connect_started + seconds(src.connect_timeout_s),
               conn && conn->tls ? timeout_kind::handshake
                                 : timeout_kind::connect);
    if (call.stream) {
      if (!first_token) {
        if (src.ttft_timeout_s)
          consider(started + seconds(*src.ttft_timeout_s), timeout_kind::ttft);
      } else {
        consider(last_activity + seconds(src.stream_idle_timeout_s),
                 timeout_kind::idle);
      }
      if (finish_at)
        consider(*finish_at + seconds(wait_after_finish_s),
                 timeout_kind::after_finish);
      if (done_at)
        consider(*done_at + seconds(drain_after_done_s), timeout_kind::drain);
    }
    return {best, kind};
  }

  /// (Re)arms the one timer at the earliest deadline. Activity does not
  /// re-arm it: when it fires early it looks again.
  void arm() {
    timer.expires_at(deadline().first);
    timer.async_wait([c = shared_from_this()](const error_code& ec) {
      if (ec || c->over)
        return;
      auto [when, kind] = c->deadline();
      if (steady::now() >= when)
        c->stop(kind);
      else
        c->arm();
    });
  }

  /// Stops the call: `none` = the caller cancelled (nothing is sent).
  void stop(timeout_kind why) {
    if (over || cancelled || fired != timeout_kind::none)
      return;
    if (why == timeout_kind::none) {
      cancelled = true;
      self.cancelled.fetch_add(1, std::memory_order_relaxed);
    } else {
      fired = why;
    }
    // The pending operation ends with an error; its handler finishes.
    error_code ignored;
    if (resolver)
      resolver->cancel();
    if (conn)
      conn->lowest().close(ignored);
    timer.cancel();
  }

  bool stopped() const {
    return cancelled || fired != timeout_kind::none;
  }

  // -- the steps --

  void run() {
    if (cancelled)
      return finish();
    self.running.fetch_add(1, std::memory_order_relaxed);
    started = steady::now();
    last_activity = started;
    target = target_of(call.source->base_url);
    req = http::request<http::string_body>{
      http::verb::post, request_path(target, call.kind), 11};
    for (auto& [k, v] : request_headers(call, target))
      req.set(k, v);
    req.body() = std::move(call.body); // kept for a retry in `req`
    req.prepare_payload();
    reader.emplace(call);
    reader->relay_to(sink, tag); // the first token and deltas
    if (conn) { // its idle watch ends
      error_code ignored;
      conn->idle_timer.cancel();
      conn->lowest().cancel(ignored);
    }
    // A pooled connection the upstream closed (or wrote to) while it was
    // idle is left before the request goes out: checked however briefly it
    // was idle, as a stray response may follow the answer within
    // microseconds and would be read as this call's answer.
    if (conn && !idle_socket_usable(conn->lowest().native_handle())) {
      conn.reset(); // closes it
      reused = false;
      self.closed_idle.fetch_add(1, std::memory_order_relaxed);
    }
    if (conn) {
      self.reused.fetch_add(1, std::memory_order_relaxed);
      send_request();
    } else {
      open();
    }
    arm();
  }

  void open() {
    connecting = true;
    connect_started = steady::now();
    conn = std::make_shared<connection>(ctx, loop);
    error_code ec;
    auto addr = asio::ip::make_address(target.host, ec);
    if (!ec) {
      tcp::endpoint ep{addr, static_cast<unsigned short>(target.port)};
      conn->plain.async_connect(
        ep, [c = shared_from_this()](const error_code& e) { c->on_connect(e); });
      return;
    }
    resolver = std::make_unique<tcp::resolver>(ctx);
    resolver->async_resolve(
      target.host, std::to_string(target.port),
      [c = shared_from_this()](const error_code& e,
                               tcp::resolver::results_type results) {
        if (c->stopped())
          return c->finish();
        if (e) {
          c->failed_at = stage::resolve;
          c->failure = e;
          return c->finish();
        }
        asio::async_connect(
          c->conn->plain, results,
          [c](const error_code& e2, const tcp::endpoint&) { c->on_connect(e2); });
      });
  }

  void on_connect(const error_code& ec) {
    if (stopped())
      return finish();
    if (ec) {
      failed_at = stage::connect;
      failure = ec;
      return finish();
    }
    self.opened.fetch_add(1, std::memory_order_relaxed);
    error_code ignored;
    conn->plain.set_option(tcp::no_delay{true}, ignored);
    if (!target.tls) {
      connecting = false;
      return send_request();
    }
    auto [tls_ctx, problem] = self.tls_context(call.source->ca_file);
    if (!tls_ctx) {
      failed_at = stage::tls;
      tls_problem = problem;
      return finish();
    }
    conn->tls = std::make_unique<ssl::stream<tcp::socket>>(
      std::move(conn->plain), *tls_ctx);
    auto* ssl_handle = conn->tls->native_handle();
    auto* param = SSL_get0_param(ssl_handle);
    X509_VERIFY_PARAM_set_hostflags(param,
                                    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (is_ip_literal(target.host)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, target.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl_handle, target.host.c_str()); // SNI
      X509_VERIFY_PARAM_set1_host(param, target.host.c_str(), 0);
    }
    conn->tls->async_handshake(
      ssl::stream_base::client,
      [c = shared_from_this()](const error_code& e) { c->on_handshake(e); });
  }

  void on_handshake(const error_code& ec) {
    if (stopped())
      return finish();
    if (ec) {
      failed_at = stage::tls;
      failure = ec;
      verify_result = SSL_get_verify_result(conn->tls->native_handle());
      certificate_rejected = verify_result != X509_V_OK;
      return finish();
    }
    connecting = false;
    send_request();
  }

  void send_request() {
    // Whoever stops the call may have decided first that its request
    // never leaves (it then settles 0): the cancel is on its way.
    if (call.gate && !call.gate->pass()) {
      cancelled = true;
      self.cancelled.fetch_add(1, std::memory_order_relaxed);
      return finish();
    }
    connected = true;
    parser.emplace(*reader, *this);
    buf.clear();
    conn->with_stream([&](auto& stream) {
      http::async_write(stream, req,
                        [c = shared_from_this()](const error_code& ec,
                                                 size_t) { c->on_written(ec); });
    });
  }

  void on_written(const error_code& ec) {
    if (stopped())
      return finish();
    if (ec) {
      if (retry_stale())
        return;
      failed_at = stage::write;
      failure = ec;
      return finish();
    }
    if (!reused || retried)
      drop_request(); // no stale-connection retry can send it again
    written_at = steady::now();
    read_more();
  }

  /// Frees the request's fields and body (~1 kB a call in flight, most of
  /// a streaming call's life) once nothing can send it again.
  void drop_request() {
    auto gone = std::move(req); // freed here; `req` is left empty
    request_dropped = true;
  }

  void read_more() {
    conn->with_stream([&](auto& stream) {
      http::async_read_some(stream, buf, *parser,
                            [c = shared_from_this()](const error_code& ec,
                                                     size_t) {
                              c->on_read(ec);
                            });
    });
  }

  void on_read(const error_code& ec) {
    if (stopped())
      return finish();
    if (ec) {
      if (parser->refused())
        return finish(); // the reader stopped it: caps, [DONE], header
      if (ec == http::error::header_limit
          || ec == http::error::buffer_overflow) {
        reader->refuse_head("headers_too_large");
        return finish();
      }
      if (auto what = framing_problem(ec); !what.empty()) {
        reader->refuse_head(std::move(what)); // malformed_response
        return finish();
      }
      // How soon after the write a failure still shows a stale connection
      // (read here, on failure: no getsockopt per call).
      if (steady::now() - written_at
            <= stale_failure_window(conn->lowest().native_handle())
          && retry_stale())
        return;
      failed_at = stage::read;
      failure = ec;
      return finish();
    }
    if (parser->is_done() && parser->interim()) {
      // 100 Continue, 103 Early Hints, ...: the answer follows.
      if (++interims > max_interim_responses) {
        reader->refuse_head("more than "
                            + std::to_string(max_interim_responses)
                            + " interim 1xx responses");
        return finish();
      }
      parser.emplace(*reader, *this); // reads on from what `buf` holds
      return read_more();
    }
    if (parser->is_done()) {
      sent = true;
      return finish();
    }
    if (!request_dropped && parser->got_some())
      drop_request(); // a response came: the connection was not stale
    read_more();
  }

  /// A reused keep-alive connection the upstream closed while it was idle
  /// fails before any response byte: retried once on a fresh connection,
  /// transparently (no breaker, no retry budget). Only a failed write, or a
  /// read failing within stale_failure_window of the write, shows that; a
  /// later failure may follow a request the upstream took (it fails the
  /// attempt, counted as any other).
  bool retry_stale() {
    if (!reused || retried || reader->status() != 0 || interims > 0
        || parser->got_some())
      return false;
    retried = true;
    reused = false;
    conn.reset();
    connected = false;
    reader.emplace(call);
    reader->relay_to(sink, tag); // the first token and deltas
    open();
    arm(); // the connect deadline
    return true;
  }

  bool on_body_piece(std::string_view data) override {
    // Beast's read completes only with the whole message (or an error):
    // activity is what the parser hands over, as it arrives — and only
    // progress of the answer counts (pings and empty deltas do not).
    auto step = reader->on_body(data.data(), data.size());
    if (step.progress)
      last_activity = steady::now();
    bool rearm = false;
    if (step.first_token && !first_token) {
      first_token = true;
      ttft_ms = ms_between(started, steady::now());
      rearm = true;
    }
    if (step.done) {
      done_at = steady::now();
      rearm = true;
    }
    if (step.finished) {
      finish_at = steady::now();
      rearm = true;
    }
    if (rearm)
      arm();
    return step.keep_reading;
  }

  void classify_failure(attempt_result& r) {
    switch (failed_at) {
      case stage::resolve:
        r.reason = "connect_error";
        r.upstream_reached = false;
        break;
      case stage::connect:
        r.upstream_reached = false;
        if ((failure.category() == boost::system::system_category()
             && is_local_exhaustion_errno(failure.value()))
            || local_resources_exhausted()) {
          fail_local_exhaustion(r, self.warn);
          break;
        }
        r.reason = "connect_error";
        break;
      case stage::tls:
        // Which failure it was: handshake, unknown CA, host name, expiry.
        classify_tls_failure(certificate_rejected, verify_result, r,
                             target.host);
        if (!tls_problem.empty())
          r.error_message = tls_problem;
        break;
      default:
        fail_before_status(r, failed_at == stage::write);
        break;
    }
  }

  void finish() {
    if (over)
      return;
    over = true;
    timer.cancel();
    if (resolver)
      resolver->cancel();
    bool was_running = static_cast<bool>(reader);
    if (was_running)
      self.running.fetch_sub(1, std::memory_order_relaxed);
    self.finished.fetch_add(1, std::memory_order_relaxed);
    if (cancelled) {
      conn.reset(); // closes it
      return;       // the attempt is gone; it settles on its own (SPEC §8)
    }
    attempt_result res; // built at the end: not held while the call runs
    res.ttft_ms = ttft_ms;
    res.latency_ms = ms_between(started, steady::now());
    bool reusable = reader->complete(
      res, fired, sent, connected, self.warn,
      [this](attempt_result& r) { classify_failure(r); });
    // Only after a complete final answer with nothing after it: never
    // after an interim response, an error, a cut or a stopped read.
    if (reusable && sent && reader->status() >= 200 && parser
        && parser->keep_alive() && buf.size() == 0 && conn
        && conn->lowest().is_open())
      self.give_back(call.source, std::move(conn));
    conn.reset();
    caf::anon_send(sink, atom::done_v, tag, std::move(res));
  }
};

// -- handle -----------------------------------------------------------------------

namespace {

class beast_call_handle : public call_handle {
public:
  beast_call_handle(std::weak_ptr<beast_call> call,
                    std::shared_ptr<beast_owner_link> link,
                    asio::io_context* ctx)
    : call_(std::move(call)), link_(std::move(link)), ctx_(ctx) {
    // nop
  }

  void cancel() override {
    std::lock_guard<std::mutex> guard{link_->mtx};
    if (link_->self == nullptr)
      return; // the transport closed: its calls are gone
    // Never a strong reference here: a call is destroyed on its loop.
    asio::post(*ctx_, [weak = call_] {
      if (auto c = weak.lock())
        c->stop(timeout_kind::none);
    });
  }

private:
  std::weak_ptr<beast_call> call_;
  std::shared_ptr<beast_owner_link> link_;
  asio::io_context* ctx_;
};

} // namespace

// -- transport --------------------------------------------------------------------

beast_transport::beast_transport() : beast_transport(options{}) {
  // nop
}

beast_transport::beast_transport(options opts)
  : impl_(std::make_shared<impl>(opts)) {
  // nop
}

beast_transport::~beast_transport() = default;

std::shared_ptr<call_handle>
beast_transport::start(upstream_call call, caf::actor sink, uint64_t tag) {
  bool stream = call.stream;
  auto reply_to = sink;
  try {
    return start_call(std::move(call), std::move(sink), tag);
  } catch (const std::exception&) {
    // Asio could not allocate what the call needs (descriptors, memory):
    // our failure, told like a connect that could not open a socket.
    attempt_result res;
    res.stream = stream;
    fail_local_exhaustion(res, impl_->warn);
    caf::anon_send(reply_to, atom::done_v, tag, std::move(res));
    return std::make_shared<beast_call_handle>(std::weak_ptr<beast_call>{},
                                               impl_->link,
                                               impl_->loops[0].get());
  }
}

std::shared_ptr<call_handle>
beast_transport::start_call(upstream_call call, caf::actor sink, uint64_t tag) {
  auto& self = *impl_;
  // A pooled connection decides the loop; else the next one in turn.
  auto conn = self.take_idle(*call.source);
  size_t loop = conn ? conn->loop
                     : self.next_loop.fetch_add(1, std::memory_order_relaxed)
                         % self.loops.size();
  auto c = std::make_shared<beast_call>(self, loop);
  if (!self.loops[loop].get_deleter().owned)
    c->keep = impl_;
  c->call = std::move(call);
  c->sink = std::move(sink);
  c->tag = tag;
  c->conn = std::move(conn);
  c->reused = static_cast<bool>(c->conn);
  self.started.fetch_add(1, std::memory_order_relaxed);
  auto* ctx = self.loops[loop].get();
  asio::post(*ctx, [c] { c->run(); });
  return std::make_shared<beast_call_handle>(c, self.link, ctx);
}

transport_stats beast_transport::stats() const {
  auto out = impl_->snapshot();
  out.io_threads = impl_->threads.size();
  out.watched = impl_->running.load();
  return out;
}

transport_ptr make_beast_transport(size_t threads) {
  beast_transport::options opts;
  opts.threads = threads;
  return std::make_shared<beast_transport>(opts);
}

} // namespace pgw
