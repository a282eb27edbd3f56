// `pgw-actor serve`: an OpenAI-compatible HTTP server in front of the
// gateways of every configured scope.

#include "config/json_text.hpp"
#include "commands.hpp"
#include "serve_app.hpp"
#include "serve_front.hpp"
#include "serve_openai.hpp"

#include "apps/cli/http_connection.hpp"
#include "apps/cli/request_frame.hpp"
#include "apps/node/node_builder.hpp"
#include "config/support/log.hpp"
#include "config/url.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <thread>
#include <unordered_set>

namespace pgw::cli {

namespace {

namespace json = boost::json;
using serve::context;

constexpr const char* serve_usage = R"(usage: pgw-actor serve [options]

  --listen HOST:PORT  address to listen on (default 127.0.0.1:8080)
  --env-file F        read configuration from F (default ./.env when present)

An OpenAI-compatible server: POST /v1/chat/completions (JSON or SSE; `model`
is a scope, or SCOPE/source to pin a source), POST /v1/embeddings and
/v1/ocr (`model` an embedding / OCR scope), GET /v1/models, /healthz,
/readyz, /metrics (Prometheus). Auth by PGW_SERVE_KEYS_FILE (SHA-256 digests
of accepted bearer keys). SIGTERM/SIGINT: stop accepting, let calls finish
for PGW_SERVE_DRAIN_S, cancel the rest, 2 s later close every client
connection still open, exit 0 (within PGW_SERVE_DRAIN_S + 2 s).
)";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "pgw-actor serve: %s\n", msg.c_str());
  return exit_usage;
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost"
         || host.rfind("127.", 0) == 0;
}

/// Each scope's gateway status (a scope that does not answer in time is
/// left out).
std::vector<gateway_status> statuses(context& ctx) {
  std::vector<gateway_status> out;
  caf::scoped_actor self{*ctx.sys};
  for (auto& entry : ctx.scopes)
    self->request(entry.second.gateway, std::chrono::seconds(2), atom::status_v)
      .receive([&](gateway_status& st) { out.push_back(std::move(st)); },
               [](caf::error&) {});
  return out;
}

/// Why serve is not ready, or empty when it is: every scope answers its
/// status, its governance backend is readable and one source is not open.
std::string not_ready(context& ctx) {
  auto all = statuses(ctx);
  if (all.size() != ctx.scopes.size())
    return "a gateway did not answer its status";
  for (auto& g : all) {
    bool usable = false;
    for (auto& s : g.sources) {
      if (!s.limiter.unavailable.empty() || !s.breaker.unavailable.empty())
        return "scope " + g.scope + ": governance backend unreachable";
      usable = usable || s.breaker.state != "open";
    }
    if (!usable)
      return "scope " + g.scope + ": every source's circuit is open";
  }
  return {};
}

std::string models_json(const context& ctx) {
  json::array data;
  auto add = [&data](const std::string& id) {
    data.push_back(json::object{
      {"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "pgw"}});
  };
  for (auto& entry : ctx.scopes) {
    add(entry.second.config->name);
    for (auto& src : entry.second.config->sources)
      add(entry.second.config->name + "/" + src.name);
  }
  return json_text(json::object{{"object", "list"}, {"data", data}});
}

thread_local std::chrono::steady_clock::time_point request_started;

/// cpp-httplib's server, telling its handlers the socket of the connection
/// they serve (`serve::client_socket`, for the disconnect watch): 0.11.4
/// gives a handler only the addresses, and its per-connection loop is
/// private, so the loop is restated here as httplib has it (keep-alive up
/// to the count and timeout, shutdown and close at the end), the idle wait
/// on poll rather than select slices, and one `http_connection` stream for
/// the connection's requests instead of a socket stream per request (each
/// response in one send, no poll per read or write; http_connection.hpp).
/// The same loop serves the connections the front hands over
/// (`serve_handed`).
class server : public httplib::Server {
public:
  /// Takes back a connection handed over, after its request: the socket
  /// and the bytes the front read past that request (set before the front
  /// starts).
  std::function<void(int fd, std::string rest)> give_back;

  /// A connection the front accepted, with one whole request it read from
  /// it: that request is answered here, then the connection goes back to
  /// the front (`give_back`) with `rest`, the bytes the front read after
  /// the request, which reads the next one — so this thread never waits on
  /// the client's bytes. Whatever of the request a handler left unread (a
  /// body refused before it was read, as a wrong key's) is dropped with
  /// it: the front's framing decides where the next request starts.
  void serve_handed(int sock, std::string_view request, std::string rest) {
    int flags = ::fcntl(sock, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK) != 0)
      ::fcntl(sock, F_SETFL, flags & ~O_NONBLOCK); // Asio's; reads block here
    serve_connection(sock, request, &rest);
  }

  /// The drain's grace is over: shuts down the socket of every connection
  /// a thread serves (a blocked read or write returns, the thread closes
  /// it), and closes at once any handed over later. Any thread.
  void shut_connections() {
    std::lock_guard<std::mutex> guard{open_mtx_};
    shut_ = true;
    for (int fd : open_)
      ::shutdown(fd, SHUT_RDWR);
  }

private:
  /// Every socket a thread serves now, and whether `shut_connections`
  /// ran. A socket leaves the set before it is closed or given back, so
  /// `shut_connections` never reaches a descriptor reused since.
  std::mutex open_mtx_;
  std::unordered_set<int> open_;
  bool shut_ = false;

  /// Adds `sock` to the served ones; false after `shut_connections`.
  bool track(socket_t sock) {
    std::lock_guard<std::mutex> guard{open_mtx_};
    if (shut_)
      return false;
    open_.insert(sock);
    return true;
  }

  void untrack(socket_t sock) {
    std::lock_guard<std::mutex> guard{open_mtx_};
    open_.erase(sock);
  }

  bool process_and_close_socket(socket_t sock) override {
    return serve_connection(sock, {}, nullptr);
  }

  /// `rest`: a handed connection's bytes after its one request (null for a
  /// connection httplib accepted itself).
  bool serve_connection(socket_t sock, std::string_view read,
                        std::string* rest) {
    if (!track(sock)) {
      ::close(sock);
      return false;
    }
    serve::client_socket = sock;
    bool ret = false;
    http_connection strm{sock, read_timeout_sec_, read_timeout_usec_,
                         write_timeout_sec_, write_timeout_usec_};
    strm.prefill(read);
    // httplib closes only on a Connection field that is exactly "close";
    // the front's framing reads the field's list of options ("keep-alive,
    // close" too). The handed request was framed whole already.
    bool asks_close = rest != nullptr
                      && cli::frame_request(read, read.size(), SIZE_MAX).close;
    for (auto count = keep_alive_max_count_;
         count > 0 && svr_sock_ != INVALID_SOCKET
         && (strm.buffered() || next_request(sock));
         --count) {
      bool close_connection = count == 1 || asks_close;
      bool connection_closed = false;
      ret = process_request(strm, close_connection, connection_closed,
                            nullptr);
      ret = strm.end_request() && ret;
      if (!ret || connection_closed || asks_close)
        break;
      if (rest != nullptr && give_back && svr_sock_ != INVALID_SOCKET) {
        serve::client_socket = -1;
        untrack(sock);
        give_back(sock, std::move(*rest));
        return ret;
      }
    }
    serve::client_socket = -1;
    untrack(sock);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  /// Waits up to the keep-alive timeout for the connection's next request
  /// (or its end): true when there is something to read.
  bool next_request(socket_t sock) const {
    pollfd p{sock, POLLIN, 0};
    int n;
    do
      n = ::poll(&p, 1, static_cast<int>(keep_alive_timeout_sec_ * 1000));
    while (n < 0 && errno == EINTR);
    return n > 0;
  }
};

/// The threads of the connections httplib serves: those the front hands
/// over and those httplib accepts itself on its loopback port (its task
/// queue forwards here). A thread owns a connection until it closes. Lives
/// past httplib's `listen`: `close` ends the hand-overs (a later one is
/// closed at once) and joins the threads once their connections are done.
class connection_threads {
public:
  connection_threads(server& svr, size_t threads) : svr_(svr), pool_(threads) {
    // nop
  }

  ~connection_threads() {
    close();
  }

  /// From the front's loop: queues the connection for a thread.
  void hand_over(int fd, std::string request, std::string rest) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (closed_) {
      ::close(fd);
      return;
    }
    pool_.enqueue([this, fd, request = std::move(request),
                   rest = std::move(rest)]() mutable {
      svr_.serve_handed(fd, request, std::move(rest));
    });
  }

  void close() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (std::exchange(closed_, true))
        return;
    }
    pool_.shutdown();
  }

  /// httplib's task queue: its own connections on the same threads; its
  /// shutdown (when `listen` returns) leaves the threads to `close`.
  struct forward : httplib::TaskQueue {
    explicit forward(connection_threads& to) : to_(to) {}
    void enqueue(std::function<void()> fn) override {
      to_.pool_.enqueue(std::move(fn));
    }
    void shutdown() override {
      // nop
    }
    connection_threads& to_;
  };

private:
  server& svr_;
  httplib::ThreadPool pool_;
  std::mutex mtx_;
  bool closed_ = false;
};

/// After the drain, how long the cancelled requests have to end before
/// every client connection closes.
constexpr auto close_grace = std::chrono::seconds(2);

/// Waits for SIGTERM/SIGINT (blocked in every thread, taken here), then
/// stops the server and, after the drain time (or a second signal), cancels
/// the calls still running; after `close_grace` more (or another signal),
/// closes every client connection still open, so that none holds the exit.
class signal_watch {
public:
  signal_watch(context& ctx, server& svr, serve::front& front,
               double drain_s)
    : ctx_(ctx), svr_(svr), front_(front), drain_s_(drain_s) {
    thread_ = std::thread([this] { run(); });
  }

  ~signal_watch() {
    done_ = true;
    thread_.join();
  }

private:
  enum class woke { signal, done, timeout };

  woke wait(std::chrono::steady_clock::duration limit) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done_) {
      if (std::chrono::steady_clock::now() >= deadline)
        return woke::timeout;
      timespec ts{0, 20'000'000};
      if (sigtimedwait(&set, nullptr, &ts) > 0)
        return woke::signal;
    }
    return woke::done;
  }

  void run() {
    woke w;
    while ((w = wait(std::chrono::hours(24))) == woke::timeout)
      continue;
    if (w == woke::done)
      return;
    log::write(log::level::warn, "serve",
               fmt::format("signal received: draining {} call(s) for up to {} s",
                           ctx_.in_flight.load(), drain_s_));
    front_.stop();
    svr_.stop();
    auto drain = std::chrono::milliseconds(
      static_cast<int64_t>(std::min(drain_s_, 86400.0 * 30) * 1000));
    // A second signal ends the drain at once.
    auto ended = wait(drain);
    if (ended == woke::done)
      return;
    serve::set_shutdown_cause(
      ended == woke::signal
        ? "the server is shutting down: a second signal ended its drain"
        : fmt::format("the server is shutting down: its drain time "
                      "(PGW_SERVE_DRAIN_S={}) ran out",
                      drain_s_));
    if (ctx_.in_flight > 0)
      log::write(log::level::warn, "serve",
                 fmt::format("drain over: cancelling {} call(s)",
                             ctx_.in_flight.load()));
    ctx_.watch.cancel_all();
    front_.cancel_all();
    // A connection can still hold the exit: a client that reads no more of
    // its answer (a write waits on it), or sends no more of its request.
    if (wait(close_grace) == woke::done)
      return;
    log::write(log::level::warn, "serve",
               "closing the client connections still open");
    front_.close_all();
    svr_.shut_connections();
  }

  context& ctx_;
  server& svr_;
  serve::front& front_;
  double drain_s_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void setup_routes(context& ctx, httplib::Server& svr) {
  svr.set_pre_routing_handler([&ctx](const httplib::Request& req,
                                     httplib::Response& res) {
    request_started = std::chrono::steady_clock::now();
    serve::stream_outcome.clear();
    if (req.path.rfind("/v1/", 0) == 0 && !ctx.keys.empty()
        && !ctx.keys.accepts(req.get_header_value("Authorization"))) {
      serve::send_error(res, 401, "missing or wrong bearer key",
                        "authentication_error", "invalid_api_key");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.Post("/v1/chat/completions",
           [&ctx](const httplib::Request& req, httplib::Response& res) {
             serve::handle_chat(ctx, req, res);
           });
  svr.Post("/v1/embeddings",
           [&ctx](const httplib::Request& req, httplib::Response& res) {
             serve::handle_embeddings(ctx, req, res);
           });
  svr.Post("/v1/ocr", [&ctx](const httplib::Request& req, httplib::Response& res) {
    serve::handle_ocr(ctx, req, res);
  });
  svr.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(ctx), "application/json");
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  svr.Get("/readyz", [&ctx](const httplib::Request&, httplib::Response& res) {
    auto why = not_ready(ctx);
    res.status = why.empty() ? 200 : 503;
    json::object body{{"status", why.empty() ? "ready" : "not_ready"}};
    if (!why.empty())
      body["reason"] = why;
    res.set_content(json_text(body), "application/json");
  });
  svr.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.stats.render(statuses(ctx)),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty())
      return;
    if (res.status == 413)
      serve::send_error(res, 413, "request body too large (PGW_SERVE_MAX_BODY_BYTES)",
                        "invalid_request_error", "request_too_large");
    else if (res.status == 404)
      serve::send_error(res, 404, "no route " + req.path.substr(0, 100),
                        "invalid_request_error", "not_found");
    else // never an empty error (the front refuses what it can name)
      serve::send_error(res, res.status,
                        "the request could not be read (HTTP "
                          + std::to_string(res.status) + ")",
                        "invalid_request_error", "invalid_request");
  });
  svr.set_logger([&ctx](const httplib::Request& req,
                        const httplib::Response& res) {
    // A stream that broke after its 200 went out says how it ended.
    serve::log_request(ctx, req, res, request_started, serve::stream_outcome);
    serve::stream_outcome.clear();
  });
}

} // namespace

} // namespace pgw::cli

namespace pgw::serve {

namespace {

/// The route label of a path (bounded for metrics).
std::string route_of(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/embeddings", "/v1/ocr",
                        "/v1/models", "/healthz", "/readyz", "/metrics"})
    if (path == r)
      return r;
  return "other";
}

} // namespace

void log_request(context& ctx, const httplib::Request& req,
                 const httplib::Response& res,
                 std::chrono::steady_clock::time_point started,
                 const std::string& outcome) {
  ctx.stats.record_request(route_of(req.path), res.status);
  if (log::current_level() > log::level::info)
    return;
  auto ms = std::chrono::duration<double, std::milli>(
              std::chrono::steady_clock::now() - started)
              .count();
  auto header = [&res](const char* name) {
    auto v = res.get_header_value(name);
    return v.empty() ? std::string("-") : v;
  };
  auto line = fmt::format("access {} {} {}{} scope={} source={} ms={:.1f} call={}",
                          req.method,
                          route_of(req.path) == "other" ? "-" : req.path,
                          res.status, outcome.empty() ? "" : " " + outcome,
                          header("x-pgw-scope"), header("x-pgw-source"), ms,
                          header("x-pgw-call-id"));
  if (ctx.access_log) // always at this level
    ctx.access_log->push(std::move(line));
}

} // namespace pgw::serve

namespace pgw::cli {

int serve_main(const std::vector<std::string>& args) {
  std::optional<std::string> env_file;
  std::string listen = "127.0.0.1:8080";
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(serve_usage, stdout);
      return exit_ok;
    }
    if ((a == "--listen" || a == "--env-file") && i + 1 < args.size()) {
      (a == "--listen" ? listen : env_file.emplace()) = args[++i];
      continue;
    }
    return usage_error(a == "--listen" || a == "--env-file"
                         ? a + " needs a value"
                         : "unknown option " + a);
  }
  auto colon = listen.rfind(':');
  auto digits = colon == std::string::npos ? std::string{}
                                           : listen.substr(colon + 1);
  if (digits.empty() || digits.size() > 5
      || digits.find_first_not_of("0123456789") != std::string::npos
      || std::stoi(digits) > 65535)
    return usage_error("--listen " + listen
                       + ": expected HOST:PORT (PORT a decimal number "
                         "from 0 to 65535)");
  auto port = std::stoi(digits);
  auto host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code bad_host;
  boost::asio::ip::make_address(host, bad_host);
  if (bad_host)
    return usage_error("--listen " + listen + ": " + host
                       + " is not an IPv4 or IPv6 address");
  if (std::getenv("PGW_LOG") == nullptr)
    log::set_level(log::level::info); // the access log is on by default
  auto cfg = load(env_file);
  if (!cfg)
    return exit_usage;
  context ctx;
  ctx.cfg = &*cfg;
  ctx.call_prefix = "serve-" + std::to_string(::getpid()) + "-";
  auto& sc = cfg->global.serve;
  if (!sc.keys_file.empty()) {
    if (auto problem = serve::key_set::load(sc.keys_file, ctx.keys)) {
      std::fprintf(stderr, "pgw-actor: invalid_config: %s\n",
                   problem->c_str());
      return exit_usage;
    }
  } else if (!is_loopback(host)) {
    log::write(log::level::warn, "serve",
               "no PGW_SERVE_KEYS_FILE: anyone who reaches " + listen
                 + " can spend the sources' quota");
  }
  // Every thread started from here on inherits the blocked signals; the
  // signal watch takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (log::current_level() <= log::level::warn)
    ctx.access_log = std::make_unique<line_writer>(STDERR_FILENO, 10000);

  // The one loop of the process: the CAF worker runs it while idle, and it
  // carries the front's connections and the Beast transport's calls
  // (serve_front.hpp). It lives as long as the process (threads of the
  // actor system may still post to it while the process ends).
  static auto* loop = new boost::asio::io_context(1);
  static auto* loop_work = new auto(boost::asio::make_work_guard(*loop));
  (void) loop_work;
  system_config sys_cfg{false, loop};
  caf::actor_system sys{sys_cfg};
  ctx.sys = &sys;
  // Ends the gateways and drops their handles before `sys` goes, on every
  // path out of here.
  struct gateways_release {
    context& c;
    ~gateways_release() {
      for (auto& entry : c.scopes)
        caf::anon_send_exit(entry.second.gateway,
                            caf::exit_reason::user_shutdown);
      c.scopes.clear();
    }
  } release{ctx};
  node_options opts;
  opts.default_telemetry_db = default_telemetry_db;
  opts.transport_loop = loop;
  // One response cache for the process; its keys carry the scope.
  auto process_cache = spawn_cache(sys, *cfg);
  if (!process_cache) {
    std::fprintf(stderr, "pgw-actor: %s\n",
                 describe(process_cache.error()).c_str());
    return exit_usage;
  }
  opts.cache = *process_cache;
  for (auto& [name, scope] : cfg->scopes) {
    auto gw = spawn_gateway(sys, *cfg, name, opts);
    if (!gw) {
      std::fprintf(stderr, "pgw-actor: %s\n", describe(gw.error()).c_str());
      return exit_usage;
    }
    std::string key = name;
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    ctx.scopes[key] = serve::served_scope{
      &scope, *gw, std::make_shared<client>(sys, *gw)};
  }
  if (ctx.scopes.empty()) {
    std::fprintf(stderr, "pgw-actor serve: no scope configured\n");
    return exit_usage;
  }

  server svr;
  auto threads = static_cast<size_t>(std::min<int64_t>(sc.max_inflight, 4096)) + 8;
  connection_threads connections{svr, threads};
  svr.new_task_queue = [&connections] {
    return new connection_threads::forward(connections);
  };
  svr.set_tcp_nodelay(true);
  svr.set_keep_alive_max_count(10000);
  svr.set_keep_alive_timeout(2); // an idle connection delays a drain by this much
  svr.set_payload_max_length(static_cast<size_t>(sc.max_body_bytes));
  auto secs = [](double s) {
    return std::chrono::microseconds(static_cast<int64_t>(s * 1e6));
  };
  svr.set_read_timeout(secs(sc.read_timeout_s));
  svr.set_write_timeout(secs(sc.write_timeout_s));
  int listen_fd = -1;
  svr.set_socket_options([&listen_fd](int fd) {
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = fd;
  });
  setup_routes(ctx, svr);
  // httplib answers the connections the front hands over. Its own listener
  // (loopback, any port) is what its `listen` and `stop` run on.
  int backend_port = svr.bind_to_any_port("127.0.0.1");
  std::unique_ptr<serve::front> front;
  std::string listen_error = "cannot start the HTTP server";
  if (backend_port > 0) {
    serve::front_options fo;
    fo.max_body_bytes = static_cast<size_t>(sc.max_body_bytes);
    fo.read_timeout_s = sc.read_timeout_s;
    fo.write_timeout_s = sc.write_timeout_s;
    fo.hand_off = [&connections](int fd, std::string request,
                                 std::string rest) {
      connections.hand_over(fd, std::move(request), std::move(rest));
    };
    svr.give_back = [&front](int fd, std::string read) {
      front->take_back(fd, std::move(read));
    };
    // Through the stderr writer's thread (the loop must not wait on
    // stderr); there is none above the warn level.
    fo.warn = [&ctx](const std::string& text) {
      if (ctx.access_log)
        ctx.access_log->push(log::line(log::level::warn, "serve", text));
    };
    try {
      front = std::make_unique<serve::front>(
        *loop, ctx, host, static_cast<uint16_t>(port), fo);
    } catch (const boost::system::system_error& e) {
      listen_error = e.code().message(); // "Address already in use"
    }
  }
  if (!front) {
    std::fprintf(stderr, "pgw-actor serve: cannot listen on %s: %s\n",
                 listen.c_str(), listen_error.c_str());
    return exit_other;
  }
  if (listen_fd >= 0)
    ::listen(listen_fd, 4096); // httplib's compiled-in backlog is 5
  front->start();
  // The first stdout line, read by scripts and tests (`--listen HOST:0`).
  // An IPv6 address in brackets, as --listen takes it: "[::1]:8080".
  url_parts shown;
  shown.host = host;
  shown.ipv6 = host.find(':') != std::string::npos;
  shown.port = static_cast<uint16_t>(front->port());
  std::printf("listening %s\n", shown.authority().c_str());
  std::fflush(stdout);
  {
    signal_watch watch{ctx, svr, *front, sc.drain_s};
    svr.listen_after_bind();
    // httplib's connections end after their current request; the front's
    // requests finish (or are cancelled at the drain's end by the watch).
    connections.close();
    front->wait_idle();
  }
  ctx.access_log.reset(); // its lines before the last one
  std::fprintf(stderr, "pgw-actor serve: stopped\n");
  return exit_ok;
}

} // namespace pgw::cli
