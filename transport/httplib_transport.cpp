#include "transport/httplib_transport.hpp"

#include "config/limits.hpp"
#include "config/support/io_pool.hpp"
#include "config/support/sigpipe_guard.hpp"
#include "transport/classify.hpp"
#include "transport/httplib_errors.hpp"
#include "transport/socket_bytes.hpp"
#include "transport/upstream_exchange.hpp"

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
#include <sys/socket.h>
#include <unistd.h>
#include <thread>
#include <unordered_map>

namespace pgw {

namespace {

/// A head whose body length two parsers could read two ways (RFC 9112
/// §6.3): Content-Length given twice with different values, or with
/// Transfer-Encoding. cpp-httplib 0.11 takes one reading silently; refused
/// as Beast refuses it (the same words). Empty when the framing is clear.
std::string ambiguous_framing(const httplib::Response& r) {
  auto lengths = r.headers.equal_range("Content-Length");
  for (auto i = lengths.first; i != lengths.second; ++i)
    if (i->second != lengths.first->second)
      return broken_framing(std::string(bad_content_length)
                            + " (two different values)");
  if (lengths.first != lengths.second && r.has_header("Transfer-Encoding"))
    return broken_framing(bad_transfer_encoding);
  return {};
}

using steady = std::chrono::steady_clock;

double ms_between(steady::time_point from, steady::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

steady::duration seconds(double s) {
  return saturating_duration<steady::duration>(s);
}

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

/// A new client for `host`:`port`. Over TLS, OpenSSL writes with write(2),
/// not MSG_NOSIGNAL: destroying a client sends the close_notify of
/// SSL_shutdown on whichever thread drops it last (the pool sweep, a call,
/// a cancel, the transport's destructor on the caller's thread), so that
/// write runs under a sigpipe_guard wherever it happens.
template <class Client>
std::shared_ptr<pooled_client> make_client(const std::string& host, int port) {
  return {new slotted<Client>(host, port), [](pooled_client* cli) {
            sigpipe_guard no_sigpipe;
            delete cli;
          }};
}

fd_slot& slot_of(pooled_client& cli) {
  return dynamic_cast<fd_slot&>(cli);
}

/// What the client has read of its socket (not what waits in the kernel).
uint64_t bytes_read(int fd) {
  return tcp_bytes_consumed(fd);
}

/// cpp-httplib keeps what it read of a head the connection ended inside
/// (the status line, the fields so far): when that already went over the
/// header bounds, `reader` refuses the head as beast does, counting while
/// it reads (headers_too_large), instead of the connection's end (reset).
void refuse_partial_head(const httplib::Response& partial,
                         response_reader& reader) {
  response_reader count{reader.call()};
  for (auto& [name, value] : partial.headers) {
    if (!count.on_field(name, value)) {
      reader.on_status(partial.status);
      reader.refuse_head(count.bad_head());
      return;
    }
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

struct httplib_transport::impl : transport_counters {
  options opts;
  std::shared_ptr<owner_link> link = std::make_shared<owner_link>();

  // -- calls that have not finished, so closing can cancel them --
  std::mutex live_mtx;
  std::unordered_map<call_state*, std::weak_ptr<call_state>> live;
  bool closing = false;


  // -- connection pool, per source --
  struct idle_client {
    std::shared_ptr<pooled_client> cli;
    steady::time_point since; ///< when it went back to the pool
  };
  std::mutex pool_mtx;
  std::unordered_map<std::string, std::vector<idle_client>> idle_conns;

  transport_warnings warn;

  // -- watchdog --
  // Calls by their next deadline. A call is in it while it runs: moved when
  // its deadline moves earlier (first token), removed when it finishes, so
  // the set holds the calls in flight and nothing more.
  using watch_key = std::pair<steady::time_point, call_state*>;
  std::mutex watch_mtx;
  std::condition_variable watch_cv;
  std::map<watch_key, std::weak_ptr<call_state>> watched;
  bool watch_stop = false;
  /// What the watchdog waits for: `max()` while it sleeps with nothing to
  /// watch, its head's deadline while it waits for that, `min()` while it
  /// works (it reads the map again before its next wait). A new deadline
  /// wakes it only when earlier than this (guarded by `watch_mtx`).
  steady::time_point watch_wait_until = steady::time_point::min();
  std::atomic<uint64_t> watch_wakes{0};
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
  /// phase has the bytes the client has read of its socket checked (TCP_INFO
  /// received less SIOCINQ unread: a body the kernel already holds while a
  /// slow thread parses a small head does not count); beyond 64 KiB (plus
  /// room for a TLS handshake and the client's read buffer) the call is
  /// stopped and fails `malformed_response`. Memory stays bounded by what
  /// the client reads in 20 ms.
  ///
  /// The same thread closes idle pooled connections (see sweep_idle).
  void guard_loop() {
    constexpr auto period = std::chrono::milliseconds{20};
    constexpr uint64_t allowance = max_header_bytes + 16 * 1024;
    auto sweep_period = std::min<steady::duration>(std::chrono::seconds{1},
                                                   opts.idle_timeout / 2);
    auto next_sweep = steady::now() + sweep_period;
    std::vector<std::shared_ptr<call_state>> heads;
    std::unique_lock<std::mutex> guard{watch_mtx};
    while (!watch_stop) {
      guard_cv.wait_for(guard, period);
      if (watch_stop)
        break;
      guard.unlock();
      if (auto now = steady::now(); now >= next_sweep) {
        sweep_idle(now);
        next_sweep = now + sweep_period;
      }
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
        auto got = bytes_read(slot_of(*cli).fd.load());
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
    watched.emplace(watch_key{when, st.get()}, st);
    if (when < watch_wait_until) {
      // Only this wait is cut short: the loop sets its next one itself.
      watch_wait_until = steady::time_point::min();
      watch_wakes.fetch_add(1, std::memory_order_relaxed);
      watch_cv.notify_one();
    }
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
        watch_wait_until = steady::time_point::max();
        watch_cv.wait(guard);
        watch_wait_until = steady::time_point::min();
        continue;
      }
      auto head = watched.begin();
      auto when = head->first.first;
      if (when > steady::now()) {
        watch_wait_until = when;
        watch_cv.wait_until(guard, when);
        watch_wait_until = steady::time_point::min();
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

  /// True when pooled `c` must not carry another request: idle for
  /// idle_timeout, or its socket has something pending (EOF, a reset, a
  /// stray byte the next call would read as its answer).
  bool idle_spent(const idle_client& c, steady::time_point now) const {
    return now - c.since >= opts.idle_timeout
           || (c.cli->is_socket_open() != 0
               && !idle_socket_usable(c.cli->socket()));
  }

  /// Closes the pooled connections that are spent (see idle_spent): none
  /// sits in CLOSE_WAIT after the upstream closed it, none outlives
  /// idle_timeout by more than a sweep period.
  void sweep_idle(steady::time_point now) {
    std::vector<std::shared_ptr<pooled_client>> spent;
    {
      std::lock_guard<std::mutex> guard{pool_mtx};
      for (auto& [key, list] : idle_conns) {
        auto kept = list.begin();
        for (auto& c : list) {
          if (idle_spent(c, now))
            spent.push_back(std::move(c.cli));
          else
            *kept++ = std::move(c);
        }
        list.erase(kept, list.end());
      }
    }
    closed_idle.fetch_add(spent.size(), std::memory_order_relaxed);
    // Their clients close the sockets here, outside the lock.
  }

  /// A connection for `src`: an idle one when `reused` is given and the
  /// pool has one (`*reused` says so), else a new one.
  std::shared_ptr<pooled_client> acquire(const source_config& src,
                                         const upstream_target& target,
                                         bool* reused_out) {
    if (reused_out != nullptr) {
      std::shared_ptr<pooled_client> spent; // closes after the lock
      std::lock_guard<std::mutex> guard{pool_mtx};
      auto& idle = idle_conns[pool_key(src)];
      if (!idle.empty()) {
        auto c = std::move(idle.back());
        idle.pop_back();
        if (!idle_spent(c, steady::now())) {
          reused.fetch_add(1, std::memory_order_relaxed);
          *reused_out = true;
          return std::move(c.cli);
        }
        closed_idle.fetch_add(1, std::memory_order_relaxed);
        spent = std::move(c.cli);
      }
    }
    std::shared_ptr<pooled_client> cli;
    if (target.tls)
      cli = make_client<httplib::SSLClient>(target.host, target.port);
    else
      cli = make_client<httplib::ClientImpl>(target.host, target.port);
    cli->set_keep_alive(true);
    cli->set_tcp_nodelay(true);
    cli->set_follow_location(false);
    // The response reader decodes an encoding the source asked for (as
    // with beast: the answer cap bounds the decoded bytes, and a body that
    // does not decode is malformed_response, not a cut).
    cli->set_decompress(false);
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
      idle.push_back({std::move(cli), steady::now()});
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
    self->pool.submit([cli] {
      sigpipe_guard no_sigpipe; // stop() sends a TLS close_notify
      cli->stop();
    });
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
  // A pooled connection the upstream closed (or wrote to) while it was idle
  // is left before the request goes out (acquire checks it).
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
    st->head_base.store(bytes_read(slot.fd.load()));
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
  req.path = request_path(target, st->call.kind);
  req.body = st->call.body;
  for (auto& [k, v] : request_headers(st->call, target))
    req.set_header(k, v);

  response_reader reader{st->call};
  reader.relay_to(st->sink, st->tag); // sends the first token and deltas

  req.response_handler = [&](const httplib::Response& r) {
    st->in_head.store(false);
    reader.on_status(r.status);
    res.upstream_reached = true;
    if (r.status >= 100 && r.status < 200) {
      // cpp-httplib 0.11 skips only a 100 Continue and takes any other 1xx
      // for the answer (waiting for a body that never comes): refused at
      // once, the connection closed with its client.
      reader.refuse_head(
        r.status == 101
          ? std::string(unexpected_switching_protocols)
          : "an interim " + std::to_string(r.status)
              + " response, which the httplib transport cannot skip; use "
                "PGW_TRANSPORT=beast");
      return false;
    }
    if (auto what = ambiguous_framing(r); !what.empty()) {
      reader.refuse_head(std::move(what)); // malformed_response
      return false;
    }
    for (auto& kv : r.headers)
      if (!reader.on_field(kv.first, kv.second))
        return false;
    if (!reader.on_header_end())
      return false;
    st->touch();
    return !st->cancelled.load();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (st->cancelled.load())
      return false;
    auto step = reader.on_body(data, n);
    if (step.progress) // not bytes alone: pings and empty deltas
      st->touch();
    if (step.first_token && !st->first_token.exchange(true)) {
      res.ttft_ms = ms_between(st->started, steady::now());
      // The idle deadline may come before the one being watched; later
      // moves only push it back, which the watchdog handles lazily.
      watch(st, st->deadline().first);
    }
    if (step.done) {
      st->done_at.store(steady::now().time_since_epoch().count());
      watch(st, st->deadline().first);
    }
    if (step.finished) {
      st->finish_at.store(steady::now().time_since_epoch().count());
      watch(st, st->deadline().first);
    }
    return step.keep_reading;
  };

  st->started = steady::now();
  st->touch();
  watch(st, st->deadline().first);
  httplib::Response resp;
  auto err = httplib::Error::Success;
  auto stale_window = was_reused ? stale_failure_window(cli->socket())
                                 : std::chrono::milliseconds{0};
  auto send_started = steady::now();
  // Over TLS the request, its body and the close_notify after a failure are
  // written with write(2): a peer that reset the connection must not end
  // the process with SIGPIPE.
  sigpipe_guard no_sigpipe;
  // Whoever stops the call may have decided first that its request never
  // leaves (it settles 0; the cancel is on its way). httplib connects
  // inside send: from the connect on, the request counts as sent.
  bool go = !st->call.gate || st->call.gate->pass();
  if (!go)
    cancelled.fetch_add(1, std::memory_order_relaxed);
  bool sent = go && cli->send(req, resp, err);
  // A reused keep-alive connection the upstream closed while it was idle
  // fails before any response byte: retried once on a fresh connection,
  // transparently (no breaker, no retry budget). Only a failed write, or a
  // read that failed within `stale_window` of the send, shows that; a later
  // failure may follow a request the upstream took (it fails the attempt,
  // counted as any other).
  bool at_once = err == httplib::Error::Write
                 || (err == httplib::Error::Read
                     && steady::now() - send_started <= stale_window);
  if (!sent && was_reused && reader.status() == 0 && !st->cancelled.load()
      && at_once) {
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
  if (cancelled_by_caller || !go)
    return; // the attempt is gone; it settles on its own (SPEC §8)
  res.latency_ms = ms_between(st->started, ended);

  if (!sent && reader.status() == 0 && resp.status > 0)
    refuse_partial_head(resp, reader);
  auto failure = [&](attempt_result& r) {
    classify_httplib_error(err, *cli, target.host, warn, r);
  };
  bool reusable = reader.complete(res, fired, sent, httplib_connected(err),
                                  warn, failure);
  // cpp-httplib gives the handshake CONNECT_TIMEOUT_S of its own: a
  // handshake failure that came no sooner ran out of it.
  if (err == httplib::Error::SSLConnection && res.reason == "tls_handshake"
      && ended - send_started >= seconds(src.connect_timeout_s)) {
    res.error_message = handshake_timeout_message(src);
    res.timed_out = true;
  }
  if (reusable)
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
  auto out = impl_->snapshot();
  out.watchdog_wakes = impl_->watch_wakes.load();
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
