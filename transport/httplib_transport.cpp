#include "transport/httplib_transport.hpp"

#include "config/limits.hpp"
#include "config/log.hpp"
#include "config/scrub.hpp"
#include "config/url.hpp"
#include "transport/chat_codec.hpp"
#include "transport/classify.hpp"
#include "transport/io_pool.hpp"
#include "transport/retry_after.hpp"
#include "transport/socket_bytes.hpp"
#include "transport/sse_parser.hpp"
#include "transport/stream_relay.hpp"

#include <caf/send.hpp>

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <queue>
#include <set>
#include <sys/socket.h>
#include <unistd.h>
#include <thread>
#include <unordered_map>

namespace pgw {

namespace {

using steady = std::chrono::steady_clock;

double ms_between(steady::time_point from, steady::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

steady::duration seconds(double s) {
  return saturating_duration<steady::duration>(s);
}

/// Header phase bounds (SPEC §12): more is `malformed_response`.
constexpr size_t max_header_lines = 100;
constexpr size_t max_header_bytes = 64 * 1024;

/// How long a stream may go on after `[DONE]` (the chunked terminator is
/// expected at once) and after a `finish_reason` (waiting for usage).
constexpr double drain_after_done_s = 0.05;
constexpr double wait_after_finish_s = 2.0;

/// Room for the JSON envelope around a non-streamed answer.
constexpr size_t body_envelope_bytes = 64 * 1024;

/// True when the source's HEADERS set `name` (any case).
bool source_sets_header(const source_config& src, std::string_view name) {
  for (auto& kv : src.headers) {
    if (kv.first.size() != name.size())
      continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i)
      same = std::tolower(static_cast<unsigned char>(kv.first[i]))
             == std::tolower(static_cast<unsigned char>(name[i]));
    if (same)
      return true;
  }
  return false;
}

/// Where a source's requests go: taken apart once by the project's URL
/// parser (config/url.hpp), so host and port reach the HTTP client as they
/// are (IPv6 literals included) and never a URL string it parses again.
struct upstream_target {
  bool tls = false;
  std::string host; ///< IPv6 without brackets
  int port = 80;
  std::string host_header; ///< `host[:port]`, IPv6 in brackets
  std::string prefix;      ///< the path before /chat/completions, no '/' last
};

upstream_target target_of(const std::string& base_url) {
  upstream_target t;
  url_parts parts;
  parse_url(base_url, parts); // validated before any source exists
  t.tls = parts.scheme == "https";
  t.host = parts.host;
  t.port = parts.port ? *parts.port : t.tls ? 443 : 80;
  t.host_header = parts.authority();
  t.prefix = parts.path;
  while (!t.prefix.empty() && t.prefix.back() == '/')
    t.prefix.pop_back();
  return t;
}

/// Why the watchdog stopped a call; `drain` and `after_finish` end a stream
/// that is already complete (or cut), not a timeout.
enum class timeout_kind : int { none = 0, total, ttft, idle, drain,
                                after_finish, head };

/// The socket a pooled connection uses now, so the header guard can see
/// how much the upstream sent.
struct fd_slot {
  std::atomic<int> fd{-1};
};

/// A client (plain or TLS) with its socket slot.
template <class Client>
struct slotted : Client, fd_slot {
  using Client::Client;
};

using pooled_client = httplib::ClientImpl;

fd_slot& slot_of(pooled_client& cli) {
  return dynamic_cast<fd_slot&>(cli);
}

/// True when this process cannot create a socket right now (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM): a connect that failed was our failure.
bool local_resources_exhausted() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ::close(fd);
    return false;
  }
  return errno == EMFILE || errno == ENFILE || errno == ENOBUFS
         || errno == ENOMEM;
}

uint64_t bytes_received(int fd) {
  return tcp_bytes_received(fd);
}

const char* reason_of(timeout_kind k) {
  switch (k) {
    case timeout_kind::total:
      return "total_timeout";
    case timeout_kind::ttft:
      return "ttft_timeout";
    case timeout_kind::idle:
      return "idle_timeout";
    default:
      return "timeout";
  }
}

} // namespace

// -- per-call state -------------------------------------------------------------

/// A call's way back to its transport. A cancel may come from any thread at
/// any time, also while the transport closes: `stop()` submits to the
/// transport's I/O pool only while holding `mtx` and seeing `self` set, and
/// closing clears `self` under the same mutex before the pool is destroyed.
struct owner_link {
  std::mutex mtx;
  httplib_transport::impl* self = nullptr;
};

/// Shared by the I/O thread running the call, its cancel handle and the
/// watchdog. `mtx` guards `client` (the connection in use) and the
/// cancellation flags.
struct call_state {
  upstream_call call;
  caf::actor sink;
  uint64_t tag = 0;
  /// The transport, while it is open (see owner_link).
  std::shared_ptr<owner_link> owner;

  std::mutex mtx;
  std::shared_ptr<pooled_client> client; // set while send() runs
  /// Until the status line and headers were read: the header guard's
  /// business (bytes received before the request, on a reused socket).
  std::atomic<bool> in_head{true};
  std::atomic<uint64_t> head_base{0};
  std::atomic<bool> cancelled{false};      // by the caller or a timeout
  std::atomic<int> timeout{0};             // timeout_kind that fired
  std::atomic<bool> finished{false};
  std::atomic<bool> first_token{false};
  steady::time_point started;
  std::atomic<steady::rep> last_activity{0};
  /// When `[DONE]` / a `finish_reason` arrived (0 = not yet).
  std::atomic<steady::rep> done_at{0};
  std::atomic<steady::rep> finish_at{0};
  /// Its key in the watchdog's map, if watched (guarded by the watchdog's
  /// mutex).
  std::optional<steady::time_point> watched_at;

  void touch() {
    last_activity.store(steady::now().time_since_epoch().count(),
                        std::memory_order_relaxed);
  }

  /// The next moment a timeout may fire, and which one.
  std::pair<steady::time_point, timeout_kind> deadline() const {
    auto& src = *call.source;
    auto best = started + seconds(src.timeout_s);
    auto kind = timeout_kind::total;
    if (call.stream) {
      if (!first_token.load()) {
        if (src.ttft_timeout_s) {
          auto t = started + seconds(*src.ttft_timeout_s);
          if (t < best) {
            best = t;
            kind = timeout_kind::ttft;
          }
        }
      } else {
        auto last = steady::time_point{
          steady::duration{last_activity.load(std::memory_order_relaxed)}};
        auto t = last + seconds(src.stream_idle_timeout_s);
        if (t < best) {
          best = t;
          kind = timeout_kind::idle;
        }
      }
      auto bound = [&](const std::atomic<steady::rep>& at, double after,
                       timeout_kind k) {
        auto rep = at.load();
        if (rep == 0)
          return;
        auto t = steady::time_point{steady::duration{rep}} + seconds(after);
        if (t < best) {
          best = t;
          kind = k;
        }
      };
      bound(finish_at, wait_after_finish_s, timeout_kind::after_finish);
      bound(done_at, drain_after_done_s, timeout_kind::drain);
    }
    return {best, kind};
  }

  /// Stops the call; `why` is none for a caller's cancel.
  void stop(timeout_kind why);
};

// -- implementation -------------------------------------------------------------

struct httplib_transport::impl {
  options opts;
  std::shared_ptr<owner_link> link = std::make_shared<owner_link>();

  // -- calls that have not finished, so closing can cancel them --
  std::mutex live_mtx;
  std::unordered_map<call_state*, std::weak_ptr<call_state>> live;
  bool closing = false;

  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<uint64_t> cancelled{0};
  std::atomic<uint64_t> opened{0};
  std::atomic<uint64_t> reused{0};

  // -- connection pool, per source --
  std::mutex pool_mtx;
  std::unordered_map<std::string, std::vector<std::shared_ptr<pooled_client>>>
    idle_conns;

  // -- Retry-After warnings: once per source --
  std::mutex warn_mtx;
  std::set<std::string> warned_non_finite;
  std::set<std::string> warned_capped;
  std::optional<steady::time_point> last_local_warning;

  // -- watchdog --
  // Calls by their next deadline. A call is in it while it runs: moved when
  // its deadline moves earlier (first token), removed when it finishes, so
  // the set holds the calls in flight and nothing more.
  using watch_key = std::pair<steady::time_point, call_state*>;
  std::mutex watch_mtx;
  std::condition_variable watch_cv;
  std::map<watch_key, std::weak_ptr<call_state>> watched;
  bool watch_stop = false;
  std::thread watch_thread;
  std::condition_variable guard_cv; // the header guard's (same mutex)
  std::thread guard_thread;

  // Declared last, so destroyed first: its destructor waits for every I/O
  // thread while everything those threads touch (the maps above) still lives.
  io_pool pool;

  explicit impl(options o) : opts(o) {
    link->self = this;
  }

  void start_watchdog() {
    watch_thread = std::thread{[this] { watch_loop(); }};
    guard_thread = std::thread{[this] { guard_loop(); }};
  }

  void stop_watchdog() {
    {
      std::lock_guard<std::mutex> guard{watch_mtx};
      watch_stop = true;
    }
    watch_cv.notify_all();
    guard_cv.notify_all();
    if (watch_thread.joinable())
      watch_thread.join();
    if (guard_thread.joinable())
      guard_thread.join();
  }

  /// The header guard (SPEC §12): cpp-httplib 0.11 reads status line and
  /// headers without bound, so every 20 ms each call still in its header
  /// phase has its socket's received bytes (TCP_INFO) checked; beyond
  /// 64 KiB (plus room for a TLS handshake) the call is stopped and fails
  /// `malformed_response`. Memory stays bounded by what arrives in 20 ms.
  void guard_loop() {
    constexpr auto period = std::chrono::milliseconds{20};
    constexpr uint64_t allowance = max_header_bytes + 16 * 1024;
    std::vector<std::shared_ptr<call_state>> heads;
    std::unique_lock<std::mutex> guard{watch_mtx};
    while (!watch_stop) {
      guard_cv.wait_for(guard, period);
      if (watch_stop)
        break;
      guard.unlock();
      {
        std::lock_guard<std::mutex> live_guard{live_mtx};
        for (auto& kv : live)
          if (auto st = kv.second.lock(); st && st->in_head.load())
            heads.push_back(std::move(st));
      }
      for (auto& st : heads) {
        std::shared_ptr<pooled_client> cli;
        {
          std::lock_guard<std::mutex> st_guard{st->mtx};
          cli = st->client;
        }
        if (!cli || !st->in_head.load())
          continue;
        auto got = bytes_received(slot_of(*cli).fd.load());
        if (got > st->head_base.load() + allowance)
          st->stop(timeout_kind::head);
      }
      heads.clear();
      guard.lock();
    }
  }

  /// Watches `st` for `when` (replacing its earlier entry).
  void watch(const std::shared_ptr<call_state>& st, steady::time_point when) {
    std::lock_guard<std::mutex> guard{watch_mtx};
    if (st->watched_at)
      watched.erase({*st->watched_at, st.get()});
    st->watched_at = when;
    auto pos = watched.emplace(watch_key{when, st.get()}, st).first;
    if (pos == watched.begin())
      watch_cv.notify_one();
  }

  /// Stops watching `st` (it finished).
  void unwatch(call_state* st) {
    std::lock_guard<std::mutex> guard{watch_mtx};
    if (st->watched_at) {
      watched.erase({*st->watched_at, st});
      st->watched_at.reset();
    }
  }

  void watch_loop() {
    std::unique_lock<std::mutex> guard{watch_mtx};
    while (!watch_stop) {
      if (watched.empty()) {
        watch_cv.wait(guard);
        continue;
      }
      auto head = watched.begin();
      auto when = head->first.first;
      if (when > steady::now()) {
        watch_cv.wait_until(guard, when);
        continue;
      }
      auto st = head->second.lock();
      if (st)
        st->watched_at.reset();
      watched.erase(head);
      guard.unlock();
      if (st && !st->finished.load()) {
        auto [next, kind] = st->deadline();
        if (steady::now() >= next)
          st->stop(kind);
        else
          watch(st, next);
      }
      guard.lock();
    }
  }

  std::string pool_key(const source_config& src) const {
    return src.scope + "/" + src.name;
  }

  /// A connection for `src`: an idle one when `reused` is given and the
  /// pool has one (`*reused` says so), else a new one.
  std::shared_ptr<pooled_client> acquire(const source_config& src,
                                         const upstream_target& target,
                                         bool* reused_out) {
    if (reused_out != nullptr) {
      std::lock_guard<std::mutex> guard{pool_mtx};
      auto& idle = idle_conns[pool_key(src)];
      if (!idle.empty()) {
        auto cli = std::move(idle.back());
        idle.pop_back();
        reused.fetch_add(1, std::memory_order_relaxed);
        *reused_out = true;
        return cli;
      }
    }
    std::shared_ptr<pooled_client> cli;
    if (target.tls)
      cli = std::make_shared<slotted<httplib::SSLClient>>(target.host,
                                                          target.port);
    else
      cli = std::make_shared<slotted<httplib::ClientImpl>>(target.host,
                                                           target.port);
    cli->set_keep_alive(true);
    cli->set_tcp_nodelay(true);
    cli->set_follow_location(false);
    // Decompression only when the source asked for an encoding; then the
    // answer cap bounds the decompressed bytes (they reach our receiver).
    cli->set_decompress(source_sets_header(src, "Accept-Encoding"));
    cli->enable_server_certificate_verification(true);
    if (!src.ca_file.empty())
      cli->set_ca_cert_path(src.ca_file); // CA_FILE, else the system store
    cli->set_connection_timeout(
      std::chrono::duration<double>(src.connect_timeout_s));
    // The watchdog enforces TIMEOUT_S, TTFT and idle timeouts precisely;
    // httplib's per-read timeout is only a backstop behind it.
    auto backstop = std::chrono::duration<double>(src.timeout_s + 5);
    cli->set_read_timeout(backstop);
    cli->set_write_timeout(backstop);
    return cli;
  }

  void give_back(const source_config& src,
                 std::shared_ptr<pooled_client> cli) {
    std::lock_guard<std::mutex> guard{pool_mtx};
    auto& idle = idle_conns[pool_key(src)];
    if (idle.size() < opts.max_idle_per_source)
      idle.push_back(std::move(cli));
  }

  void warn_non_finite(const source_config& src) {
    std::lock_guard<std::mutex> guard{warn_mtx};
    if (warned_non_finite.insert(pool_key(src)).second)
      log::warn("transport",
                "source {}/{} sent a non-finite Retry-After; ignored",
                src.scope, src.name);
  }

  /// Once per 10 s at most: local exhaustion comes in bursts.
  void warn_local_exhaustion() {
    auto now = steady::now();
    std::lock_guard<std::mutex> guard{warn_mtx};
    if (last_local_warning && now - *last_local_warning < std::chrono::seconds{10})
      return;
    last_local_warning = now;
    log::warn("transport", "cannot open sockets: file descriptors or memory "
                           "exhausted in this process (raise ulimit -n or "
                           "lower concurrency); calls fail with "
                           "local_resource_exhausted");
  }

  void warn_capped(const source_config& src, double seconds) {
    std::lock_guard<std::mutex> guard{warn_mtx};
    if (warned_capped.insert(pool_key(src)).second)
      log::warn("transport",
                "source {}/{} sent a Retry-After of {:.0f} s; capped at 30 "
                "days (and at BREAKER__MAX_COOLDOWN_S)",
                src.scope, src.name, seconds);
  }

  void run(const std::shared_ptr<call_state>& st);
};

void call_state::stop(timeout_kind why) {
  std::shared_ptr<pooled_client> cli;
  {
    std::lock_guard<std::mutex> guard{mtx};
    if (cancelled.load() || finished.load())
      return;
    timeout.store(static_cast<int>(why));
    cancelled.store(true);
    cli = client;
  }
  std::lock_guard<std::mutex> guard{owner->mtx};
  auto self = owner->self;
  if (!self)
    return; // the transport closed; its I/O threads are gone or going
  if (why == timeout_kind::none)
    self->cancelled.fetch_add(1, std::memory_order_relaxed);
  // Client::stop() may wait for a connect in progress (it shares a mutex with
  // it), so it never runs on the caller's thread.
  if (cli)
    self->pool.submit([cli] { cli->stop(); });
}

void httplib_transport::impl::run(const std::shared_ptr<call_state>& st) {
  struct unregister {
    impl* self;
    call_state* st;
    ~unregister() {
      std::lock_guard<std::mutex> guard{self->live_mtx};
      self->live.erase(st);
    }
  } unregister_on_exit{this, st.get()};
  auto& src = *st->call.source;
  attempt_result res;
  res.stream = st->call.stream;
  auto target = target_of(src.base_url);
  bool was_reused = false;
  auto cli = acquire(src, target, &was_reused);
  // Makes `c` the call's connection; false when the call was cancelled.
  auto attach = [this, &st](const std::shared_ptr<pooled_client>& c) {
    {
      std::lock_guard<std::mutex> guard{st->mtx};
      if (st->cancelled.load())
        return false;
      st->client = c;
    }
    // Runs under the client's socket mutex whenever a new socket is created:
    // a cancel that came before the connect shuts it down here (no race).
    std::weak_ptr<call_state> weak = st;
    auto& slot = slot_of(*c);
    st->head_base.store(bytes_received(slot.fd.load()));
    auto raw_slot = &slot; // its client owns this function: outlives it
    c->set_socket_options([this, weak, raw_slot](int sock) {
      int one = 1;
      ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      opened.fetch_add(1, std::memory_order_relaxed);
      raw_slot->fd.store(sock);
      auto s = weak.lock();
      if (s)
        s->head_base.store(0);
      if (!s || s->cancelled.load())
        ::shutdown(sock, SHUT_RDWR);
    });
    return true;
  };
  if (!attach(cli)) {
    std::lock_guard<std::mutex> guard{st->mtx};
    st->finished.store(true);
    give_back(src, std::move(cli));
    return;
  }

  httplib::Request req;
  req.method = "POST";
  auto kind = st->call.kind;
  bool embeddings = kind != upstream_kind::chat; // a raw 2xx body
  req.path = target.prefix
             + (kind == upstream_kind::embeddings  ? "/embeddings"
                : kind == upstream_kind::ocr_text  ? "/ocr/text"
                : kind == upstream_kind::ocr_parse ? "/parse?return_type="
                                                     "content_list_json"
                                                   : "/chat/completions");
  req.set_header("Host", target.host_header);
  req.body = st->call.body;
  req.set_header("Content-Type", st->call.content_type.empty()
                                   ? "application/json"
                                   : st->call.content_type);
  req.set_header("Accept",
                 st->call.stream ? "text/event-stream" : "application/json");
  req.set_header("User-Agent", "pgw/0.1");
  bool decompress = source_sets_header(src, "Accept-Encoding");
  if (!decompress)
    req.set_header("Accept-Encoding", "identity");
  if (!src.api_key.empty())
    req.set_header("Authorization", "Bearer " + src.api_key);
  for (auto& [k, v] : src.headers)
    req.set_header(k, v);

  int status = 0;
  bool sse_mode = false;
  std::string retry_after, retry_after_ms;
  bool has_retry_after = false, has_retry_after_ms = false;
  std::string body;
  bool body_too_big = false;
  bool answer_too_big = false;
  // Why the header phase was refused ("" = it was not).
  std::string bad_head;
  std::string location;
  auto answer_cap = static_cast<size_t>(
    std::max<int64_t>(src.max_response_bytes, 1));
  sse_parser parser;
  stream_accumulator acc{answer_cap};
  std::vector<sse_event> events;
  bool done_seen = false;
  bool error_seen = false;

  req.response_handler = [&](const httplib::Response& r) {
    st->in_head.store(false);
    status = r.status;
    res.upstream_reached = true;
    size_t head_bytes = 0;
    for (auto& kv : r.headers)
      head_bytes += kv.first.size() + kv.second.size() + 4;
    if (r.headers.size() > max_header_lines || head_bytes > max_header_bytes) {
      bad_head = "headers_too_large";
      return false;
    }
    auto encoding = r.get_header_value("Content-Encoding");
    if (!decompress && !encoding.empty() && encoding != "identity") {
      bad_head = "unexpected_content_encoding";
      return false;
    }
    if (status >= 300 && status < 400)
      location = r.get_header_value("Location");
    if (r.has_header("Retry-After")) {
      has_retry_after = true;
      retry_after = r.get_header_value("Retry-After");
    }
    if (r.has_header("retry-after-ms")) {
      has_retry_after_ms = true;
      retry_after_ms = r.get_header_value("retry-after-ms");
    }
    auto ctype = r.get_header_value("Content-Type");
    sse_mode = st->call.stream && status >= 200 && status < 300
               && ctype.find("text/event-stream") != std::string::npos;
    st->touch();
    return !st->cancelled.load();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (st->cancelled.load())
      return false;
    st->touch();
    if (!sse_mode) {
      if (body.size() + n > opts.max_body_bytes) {
        body_too_big = true;
        return false;
      }
      if (body.size() + n > answer_cap + body_envelope_bytes) {
        answer_too_big = true;
        return false;
      }
      body.append(data, n);
      return true;
    }
    // After [DONE] nothing more is read: bytes that follow close the
    // connection (a well-behaved server sends only the chunked terminator).
    if (done_seen)
      return false;
    parser.feed(data, n, events);
    size_t handled = 0;
    for (auto& ev : events) {
      if (done_seen || error_seen)
        break;
      ++handled;
      bool was_finished = acc.finished();
      // relay_event sends the first token and, when asked, the deltas.
      switch (relay_event(acc, ev, st->call, st->sink, st->tag)) {
        case stream_accumulator::step::first_token:
          if (!st->first_token.exchange(true)) {
            res.ttft_ms = ms_between(st->started, steady::now());
            // The idle deadline may come before the one being watched; later
            // moves only push it back, which the watchdog handles lazily.
            watch(st, st->deadline().first);
          }
          break;
        case stream_accumulator::step::done:
          done_seen = true;
          st->done_at.store(steady::now().time_since_epoch().count());
          watch(st, st->deadline().first);
          break;
        case stream_accumulator::step::error:
          error_seen = true;
          break;
        default:
          break;
      }
      if (!was_finished && acc.finished()) {
        st->finish_at.store(steady::now().time_since_epoch().count());
        watch(st, st->deadline().first);
      }
    }
    bool trailing = done_seen && handled < events.size();
    events.clear();
    return !(error_seen || trailing || parser.failed());
  };

  st->started = steady::now();
  st->touch();
  watch(st, st->deadline().first);
  httplib::Response resp;
  auto err = httplib::Error::Success;
  bool sent = cli->send(req, resp, err);
  // A reused keep-alive connection the upstream closed while it was idle
  // fails before any response byte: retried once on a fresh connection,
  // transparently (no breaker, no retry budget).
  if (!sent && was_reused && status == 0 && !st->cancelled.load()
      && (err == httplib::Error::Read || err == httplib::Error::Write)) {
    cli = acquire(src, target, nullptr);
    if (attach(cli)) {
      resp = httplib::Response{};
      err = httplib::Error::Success;
      sent = cli->send(req, resp, err);
    }
  }
  auto ended = steady::now();
  {
    std::lock_guard<std::mutex> guard{st->mtx};
    st->client.reset();
    st->finished.store(true);
  }
  unwatch(st.get());
  auto fired = static_cast<timeout_kind>(st->timeout.load());
  bool cancelled_by_caller = st->cancelled.load() && fired == timeout_kind::none;
  finished.fetch_add(1, std::memory_order_relaxed);
  if (cancelled_by_caller)
    return; // the attempt is gone; it settles on its own (SPEC §8)
  res.latency_ms = ms_between(st->started, ended);

  if (sse_mode) {
    parser.finish(events);
    for (auto& ev : events) {
      if (done_seen || error_seen)
        break;
      auto step = relay_event(acc, ev, st->call, st->sink, st->tag);
      if (step == stream_accumulator::step::done)
        done_seen = true;
      else if (step == stream_accumulator::step::error)
        error_seen = true;
    }
    res.malformed_events = acc.malformed();
  }

  bool reusable = false;
  if (fired == timeout_kind::head)
    bad_head = "headers_too_large";
  if (!bad_head.empty()) {
    res.kind = outcome::transient;
    res.reason = "malformed_response";
    res.error_message = bad_head;
  } else if (fired != timeout_kind::none) {
    // A stream that already had its finish_reason is complete (SPEC §10):
    // silence while waiting for usage or [DONE] does not spoil it.
    if (sse_mode && (acc.finished() || done_seen)) {
      acc.finish(res);
    } else {
      res.kind = outcome::transient;
      res.reason = reason_of(fired);
      // Request bytes may have gone out unless the connection never opened.
      res.upstream_reached = res.upstream_reached
                             || (err != httplib::Error::Connection
                                 && err != httplib::Error::ConnectionTimeout
                                 && err != httplib::Error::SSLConnection);
    }
  } else if (sse_mode && parser.failed()) {
    res.kind = outcome::result_invalid;
    res.reason = "sse_line_too_long";
  } else if (sse_mode) {
    // EOF, [DONE], an error event or a broken connection: the accumulator
    // decides (complete only after a finish_reason).
    acc.finish(res);
    reusable = sent && done_seen;
  } else if (!sent && status == 0) {
    res.kind = outcome::transient;
    switch (err) {
      case httplib::Error::Connection:
        res.upstream_reached = false;
        if (local_resources_exhausted()) {
          // Our process, not the upstream: no breaker, no health sample
          // (source_rejected feeds neither), nothing was sent (settles 0).
          res.kind = outcome::source_rejected;
          res.reason = "local_resource_exhausted";
          res.error_message = "this process cannot open a socket (file "
                              "descriptors or memory exhausted)";
          warn_local_exhaustion();
          break;
        }
        res.reason = "connect_error";
        break;
      case httplib::Error::ConnectionTimeout:
        res.reason = "connect_timeout";
        res.upstream_reached = false;
        break;
      case httplib::Error::SSLConnection:
      case httplib::Error::SSLLoadingCerts:
      case httplib::Error::SSLServerVerification:
        // Which failure it was: handshake, unknown CA, host name, expiry.
        if (auto* tls = dynamic_cast<httplib::SSLClient*>(cli.get()))
          classify_tls_failure(err == httplib::Error::SSLServerVerification,
                               tls->get_openssl_verify_result(), res);
        else
          classify_tls_failure(false, 0, res);
        break;
      case httplib::Error::Write:
        res.reason = "write_error";
        res.upstream_reached = true;
        break;
      default:
        // The request went out and the connection died before a status line
        // (a reset, or the server closed it).
        res.reason = "reset";
        res.upstream_reached = true;
        break;
    }
  } else if (body_too_big) {
    res.kind = outcome::result_invalid;
    res.reason = "body_too_large";
  } else if (answer_too_big) {
    res.kind = outcome::source_rejected;
    res.reason = reason_response_too_large;
  } else if (!sent) {
    res.kind = outcome::transient;
    res.reason = "body_cut";
  } else if (status >= 200 && status < 300 && embeddings) {
    res.kind = outcome::ok;
    res.reason = "ok";
    res.content = std::move(body);
    reusable = true;
  } else if (status >= 200 && status < 300) {
    decode_chat_completion(body, res);
    if (res.content.size() + res.reasoning_content.size() > answer_cap) {
      res.content.clear();
      res.reasoning_content.clear();
      res.kind = outcome::source_rejected;
      res.reason = reason_response_too_large;
    }
    reusable = true;
  } else {
    classify_http_error(status, body, res);
    if (status >= 300 && status < 400) // never followed (SPEC §12)
      res.error_message = scrub("redirect to " + location.substr(0, 500));
    reusable = true;
  }
  if (status != 0)
    res.http_status = status;
  if (has_retry_after || has_retry_after_ms) {
    auto ra = parse_retry_after(has_retry_after ? &retry_after : nullptr,
                                has_retry_after_ms ? &retry_after_ms : nullptr,
                                std::chrono::system_clock::now());
    if (ra.non_finite)
      warn_non_finite(src);
    if (ra.seconds && *ra.seconds > max_duration_s) {
      // Far future (year 9999, 1e11 s): capped here at 30 days, and at the
      // scope's BREAKER__MAX_COOLDOWN_S by the gateway.
      warn_capped(src, *ra.seconds);
      ra.seconds = max_duration_s;
    }
    if (ra.seconds)
      res.retry_after_s = *ra.seconds;
  }
  if (reusable && fired == timeout_kind::none)
    give_back(src, std::move(cli));
  caf::anon_send(st->sink, atom::done_v, st->tag, std::move(res));
}

// -- handle -----------------------------------------------------------------------

namespace {

class httplib_call_handle : public call_handle {
public:
  explicit httplib_call_handle(std::weak_ptr<call_state> st)
    : st_(std::move(st)) {
    // nop
  }

  void cancel() override {
    if (auto st = st_.lock())
      st->stop(timeout_kind::none);
  }

private:
  std::weak_ptr<call_state> st_;
};

} // namespace

// -- transport ----------------------------------------------------------------------

httplib_transport::httplib_transport() : httplib_transport(options{}) {
  // nop
}

httplib_transport::httplib_transport(options opts)
  : impl_(std::make_shared<impl>(opts)) {
  impl_->start_watchdog();
}

httplib_transport::~httplib_transport() {
  impl_->stop_watchdog();
  // Cancel every call still queued or running, so that joining the I/O
  // threads (the pool's destructor) does not wait for any upstream.
  std::vector<std::shared_ptr<call_state>> live;
  {
    std::lock_guard<std::mutex> guard{impl_->live_mtx};
    impl_->closing = true;
    for (auto& [ptr, weak] : impl_->live)
      if (auto st = weak.lock())
        live.push_back(std::move(st));
  }
  for (auto& st : live)
    st->stop(timeout_kind::none);
  live.clear();
  // From here on a cancel from another thread finds no transport.
  {
    std::lock_guard<std::mutex> guard{impl_->link->mtx};
    impl_->link->self = nullptr;
  }
  // Destroys the pool first (waiting for the I/O threads), then the rest.
  impl_.reset();
}

std::shared_ptr<call_handle>
httplib_transport::start(upstream_call call, caf::actor sink, uint64_t tag) {
  // Not make_shared: the watchdog's weak references must not keep the
  // state's memory alive after the call.
  std::shared_ptr<call_state> st{new call_state};
  st->call = std::move(call);
  st->sink = std::move(sink);
  st->tag = tag;
  st->owner = impl_->link;
  {
    std::lock_guard<std::mutex> guard{impl_->live_mtx};
    if (impl_->closing)
      st->cancelled.store(true);
    impl_->live.emplace(st.get(), st);
  }
  impl_->started.fetch_add(1, std::memory_order_relaxed);
  auto self = impl_.get();
  impl_->pool.submit([self, st] { self->run(st); });
  return std::make_shared<httplib_call_handle>(st);
}

transport_stats httplib_transport::stats() const {
  transport_stats out;
  out.started = impl_->started.load();
  out.finished = impl_->finished.load();
  out.cancelled = impl_->cancelled.load();
  out.connections_opened = impl_->opened.load();
  out.connections_reused = impl_->reused.load();
  out.io_threads = impl_->pool.threads();
  {
    std::lock_guard<std::mutex> guard{impl_->watch_mtx};
    out.watched = impl_->watched.size();
  }
  return out;
}

transport_ptr make_httplib_transport() {
  return std::make_shared<httplib_transport>();
}

} // namespace pgw
