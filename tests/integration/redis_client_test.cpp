// The Redis client (backends/redis/client.hpp) against real redis-server
// processes: REDIS_URL, AUTH and SELECT, scripts after SCRIPT FLUSH, a
// server that dies, restarts or hangs, and the reconnect backoff.

#include "backends/redis/breaker.hpp"
#include "backends/redis/client.hpp"
#include "backends/redis/limiter.hpp"
#include "config/support/log.hpp"
#include "fixtures/redis_process.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

double seconds_since(steady::time_point start) {
  return std::chrono::duration<double>(steady::now() - start).count();
}

redis_client_ptr client_for(const std::string& url, size_t pool_size = 4) {
  auto c = make_redis_client(url, pool_size);
  REQUIRE_MESSAGE(c, describe(c.error()));
  return *c;
}

redis_client_ptr client_for(const redis_process& server,
                            redis_client_options opts) {
  auto ep = parse_redis_url(server.url());
  REQUIRE(ep);
  return make_redis_client(*ep, opts);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The error of `x`, or none when it holds a value.
template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

bool is_unavailable(const caf::error& err) {
  return code_of(err) == error_code::governance_unavailable;
}

limiter_limits small_limits() {
  limiter_limits l;
  l.source = "src";
  l.window_s = 1;
  l.lease_s = 5;
  l.rpm = 100;
  l.max_concurrency = 10;
  return l;
}

breaker_settings small_breaker() {
  breaker_settings s;
  s.source = "src";
  s.threshold = 3;
  s.cooldown_s = 0.2;
  s.window_s = 1;
  s.max_cooldown_s = 0.5;
  s.probe_lease_s = 1;
  return s;
}

int64_t script_exists(redis_client& c, const std::string& sha) {
  auto r = c.command({"SCRIPT", "EXISTS", sha});
  REQUIRE_MESSAGE(r, describe(r.error()));
  REQUIRE(r->type == redis_reply::kind::array);
  REQUIRE(r->elements.size() == 1);
  return r->elements[0].integer;
}

/// Calls `fn` until it returns true or `timeout` passes; returns whether
/// it did.
template <class F>
bool eventually(F fn, std::chrono::milliseconds timeout) {
  auto until = steady::now() + timeout;
  while (steady::now() < until) {
    if (fn())
      return true;
    std::this_thread::sleep_for(10ms);
  }
  return fn();
}

/// Thaws a frozen server whatever happens in the case.
struct thaw_guard {
  redis_process& server;
  ~thaw_guard() {
    server.thaw();
  }
};

} // namespace

TEST_SUITE_BEGIN("redis");

// -- REDIS_URL ----------------------------------------------------------------

TEST_CASE("redis: REDIS_URL gives host, port, password and database") {
  auto ep = parse_redis_url("redis://:pw@redis.internal:6380/15");
  REQUIRE(ep);
  CHECK(ep->host == "redis.internal");
  CHECK(ep->port == 6380);
  CHECK(ep->password == "pw");
  CHECK(ep->db == 15);
  CHECK(ep->describe() == "redis.internal:6380/15");
  ep = parse_redis_url("redis://127.0.0.1:6379");
  REQUIRE(ep);
  CHECK(ep->password.empty());
  CHECK(ep->db == 0);
  ep = parse_redis_url("redis://h");
  REQUIRE(ep);
  CHECK(ep->port == 6379);
  ep = parse_redis_url("redis://[::1]:1/2");
  REQUIRE(ep);
  CHECK(ep->host == "::1");
  CHECK(ep->port == 1);
  CHECK(ep->describe() == "[::1]:1/2");
  // A password may hold '@' and ':'; the last '@' ends it.
  ep = parse_redis_url("redis://:p@ss:w0rd@h:1/0");
  REQUIRE(ep);
  CHECK(ep->password == "p@ss:w0rd");
  CHECK(ep->host == "h");
  CHECK(ep->user.empty());
  // An ACL user, and credentials percent-encoded ('/', '?', '#').
  ep = parse_redis_url("redis://default:p%2Fw%3Fx%23y%25@h:1/0");
  REQUIRE(ep);
  CHECK(ep->user == "default");
  CHECK(ep->password == "p/w?x#y%");
  CHECK(ep->host == "h");
}

TEST_CASE("redis: a malformed REDIS_URL is refused without showing the "
          "password") {
  struct bad_url {
    const char* url;
    const char* problem;
  };
  for (auto [url, problem] : {
         bad_url{"http://h:6379", "must start with redis://"},
         bad_url{"redis://:pw-SECRET@h:0/1", "has an invalid port"},
         bad_url{"redis://:pw-SECRET@:6379", "has no host"},
         bad_url{"redis://:pw-SECRET@h:6379/x", "invalid database number"},
         bad_url{"redis://:pw-SECRET@h:6379/", "invalid database number"},
         bad_url{"redis://user-SECRET@h:6379", "user:password@"},
         bad_url{"redis://:pw-SECRET/x@h:6379/0", "must be percent-encoded"},
         bad_url{"redis://:pw-SECRET?x@h:6379", "must be percent-encoded"},
         bad_url{"redis://:pw-SECRET%2@h:6379", "invalid percent-encoding"},
         bad_url{"redis://:pw-SECRET@h h:6379", "invalid host"},
       }) {
    CAPTURE(url);
    auto ep = parse_redis_url(url);
    REQUIRE_FALSE(ep);
    CHECK(code_of(ep.error()) == error_code::invalid_config);
    auto text = describe(ep.error());
    CAPTURE(text);
    CHECK(contains(text, problem));
    CHECK_FALSE(contains(text, "SECRET"));
    auto c = make_redis_client(url);
    CHECK_FALSE(c);
  }
}

// -- scripts ------------------------------------------------------------------

TEST_CASE("redis: a script is reloaded transparently after SCRIPT FLUSH") {
  redis_process server;
  auto client = client_for(server.url());
  auto lim = make_redis_limiter(client, "pgw:t:flush", small_limits());
  auto br = make_redis_breaker(client, "pgw:t:flush", small_breaker());
  const auto lim_sha = sha1_hex(detail::embedded_lua("limiter.lua"));
  const auto br_sha = sha1_hex(detail::embedded_lua("breaker.lua"));
  REQUIRE_FALSE(detail::embedded_lua("limiter.lua").empty());
  REQUIRE_FALSE(detail::embedded_lua("breaker.lua").empty());
  // The first call finds no script either (a fresh server): EVAL loads it.
  auto r = lim->try_acquire(1, 0);
  REQUIRE_MESSAGE(r, describe(r.error()));
  CHECK(r->granted);
  REQUIRE(br->enter(0));
  CHECK(client->stats().script_reloads == 2);
  // The SHA1 computed here is the one Redis knows.
  CHECK(script_exists(*client, lim_sha) == 1);
  CHECK(script_exists(*client, br_sha) == 1);
  auto commands = client->stats().commands;
  REQUIRE(lim->try_acquire(1, 0));
  CHECK(client->stats().commands == commands + 1); // EVALSHA only
  // Flushed: the next calls still work and load them again.
  REQUIRE(client->command({"SCRIPT", "FLUSH"}));
  CHECK(script_exists(*client, lim_sha) == 0);
  CHECK(script_exists(*client, br_sha) == 0);
  r = lim->try_acquire(1, 0);
  REQUIRE_MESSAGE(r, describe(r.error()));
  CHECK(r->granted);
  auto st = lim->status(0);
  REQUIRE(st);
  CHECK(st->acquired == 3); // the keys survived the flush
  auto bst = br->status(0);
  REQUIRE_MESSAGE(bst, describe(bst.error()));
  CHECK(bst->state == "closed");
  CHECK(script_exists(*client, lim_sha) == 1);
  CHECK(script_exists(*client, br_sha) == 1);
  CHECK(client->stats().script_reloads == 4);
  CHECK(client->stats().failures == 0);
}

TEST_CASE("redis: eval runs any script and reports a script error as "
          "governance_unavailable") {
  redis_process server;
  auto client = client_for(server.url());
  redis_script echo{"return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}"};
  CHECK(echo.sha1() == sha1_hex(echo.text()));
  CHECK(echo.sha1().size() == 40);
  auto r = client->eval(echo, {"k"}, {"v", "41"});
  REQUIRE_MESSAGE(r, describe(r.error()));
  REQUIRE(r->elements.size() == 3);
  CHECK(r->elements[0].str == "k");
  CHECK(r->elements[1].str == "v");
  CHECK(r->elements[2].integer == 42);
  redis_script broken{"return redis.call('NOSUCHCOMMAND')"};
  auto bad = client->eval(broken, {}, {});
  REQUIRE_FALSE(bad);
  CHECK(is_unavailable(bad.error()));
  // An error reply leaves the connection usable.
  CHECK(client->command({"PING"}));
  CHECK(client->stats().connects == 1);
}

// -- server failures ----------------------------------------------------------

TEST_CASE("redis: an unreachable server fails each call at once") {
  auto port = free_loopback_port(); // nobody listens there
  auto start = steady::now();
  auto client
    = client_for("redis://:pw-UNREACHABLE@127.0.0.1:" + std::to_string(port));
  auto lim = make_redis_limiter(client, "pgw:t:none", small_limits());
  CHECK(seconds_since(start) < 0.1); // lazily connected
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    auto t0 = steady::now();
    auto r = lim->try_acquire(1, 0);
    CHECK(seconds_since(t0) < 0.2);
    REQUIRE_FALSE(r);
    CHECK(is_unavailable(r.error()));
    auto text = describe(r.error());
    CAPTURE(text);
    CHECK(contains(text, "127.0.0.1:" + std::to_string(port) + "/0"));
    CHECK_FALSE(contains(text, "UNREACHABLE"));
  }
}

TEST_CASE("redis: when the server is killed every operation fails promptly "
          "with governance_unavailable") {
  redis_process server;
  auto client = client_for(server.url());
  auto lim = make_redis_limiter(client, "pgw:t:kill", small_limits());
  auto br = make_redis_breaker(client, "pgw:t:kill", small_breaker());
  auto p = lim->try_acquire(1, 0);
  REQUIRE(p);
  REQUIRE(p->granted);
  auto e = br->enter(0);
  REQUIRE(e);
  server.kill();
  auto id = p->granted_permit.id;
  std::vector<std::pair<const char*, std::function<caf::error()>>> calls{
    {"try_acquire", [&] { return error_of(lim->try_acquire(1, 0)); }},
    {"settle", [&] { return error_of(lim->settle(id, 1, 0)); }},
    {"release", [&] { return error_of(lim->release(id, 0)); }},
    {"limiter status", [&] { return error_of(lim->status(0)); }},
    {"enter", [&] { return error_of(br->enter(0)); }},
    {"record",
     [&] { return br->record(e->epoch, breaker_feed::failure, 0); }},
    {"release_probe", [&] { return br->release_probe(e->epoch, 0); }},
    {"breaker status", [&] { return error_of(br->status(0)); }},
  };
  for (auto& [name, call] : calls) {
    CAPTURE(name);
    auto t0 = steady::now();
    auto err = call();
    CHECK(seconds_since(t0) < 0.25);
    REQUIRE(err);
    CHECK(is_unavailable(err));
  }
  // A caller hammering a dead server: every call answers at once, and the
  // backoff keeps the connection attempts few.
  auto before = client->stats();
  auto t0 = steady::now();
  int failures = 0;
  for (int i = 0; i < 300; ++i)
    if (!lim->try_acquire(1, 0))
      ++failures;
  CHECK(failures == 300);
  CHECK(seconds_since(t0) < 1.0);
  auto after = client->stats();
  CHECK(after.down);
  CHECK(after.connect_failures - before.connect_failures <= 6);
  CHECK(after.fast_failures - before.fast_failures >= 290);
}

TEST_CASE("redis: a restarted server is found again by the same client") {
  redis_process server;
  redis_client_options opts;
  opts.max_backoff = 500ms;
  auto client = client_for(server, opts);
  auto lim = make_redis_limiter(client, "pgw:t:restart", small_limits());
  auto br = make_redis_breaker(client, "pgw:t:restart", small_breaker());
  // Several pooled connections, all of them about to go stale.
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 20; ++i)
          CHECK(lim->status(0));
      });
    for (auto& t : threads)
      t.join();
  }
  REQUIRE(lim->try_acquire(1, 0));
  server.kill();
  CHECK_FALSE(lim->try_acquire(1, 0));
  CHECK_FALSE(lim->try_acquire(1, 0));
  server.restart();
  auto t0 = steady::now();
  CHECK(eventually([&] { return static_cast<bool>(lim->status(0)); }, 3s));
  CHECK(seconds_since(t0) < 0.6); // at most one backoff step late
  // The server lost its data (no persistence) and its scripts.
  auto st = lim->status(0);
  REQUIRE(st);
  CHECK(st->acquired == 0);
  // Every stale pooled connection was replaced: no call fails now, from
  // any number of threads.
  std::atomic<int> failed{0};
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 20; ++i) {
          if (!lim->try_acquire(1, 0))
            ++failed;
          if (!br->enter(0))
            ++failed;
        }
      });
    for (auto& t : threads)
      t.join();
  }
  CHECK(failed == 0);
  st = lim->status(0);
  REQUIRE(st);
  CHECK(st->acquired + st->refused_concurrency == 80); // all of them ran
  CHECK_FALSE(client->stats().down);
}

TEST_CASE("redis: a server that stops answering times out after "
          "command_timeout and is found again when it answers") {
  redis_process server;
  redis_client_options opts;
  opts.command_timeout = 300ms;
  opts.connect_timeout = 300ms;
  opts.max_backoff = 200ms;
  auto client = client_for(server, opts);
  REQUIRE(client->command({"PING"}));
  server.freeze();
  thaw_guard guard{server};
  auto t0 = steady::now();
  auto r = client->command({"PING"});
  auto took = seconds_since(t0);
  REQUIRE_FALSE(r);
  CHECK(is_unavailable(r.error()));
  CHECK(contains(describe(r.error()), "timed out"));
  // Bounds are loose on purpose (sanitizer builds on a loaded 2-vCPU
  // machine): without the timeout a frozen server would hang the call for
  // ever, so any finite bound a few times command_timeout still fails then.
  CHECK(took >= 0.25);
  CHECK(took < 3.0);
  // Reconnecting to a frozen server: the handshake times out too, and the
  // backoff makes the next calls fail without waiting.
  t0 = steady::now();
  CHECK_FALSE(client->command({"PING"}));
  CHECK(seconds_since(t0) < 3.0);
  t0 = steady::now();
  CHECK_FALSE(client->command({"PING"}));
  CHECK(seconds_since(t0) < 0.25); // well under one command_timeout
  server.thaw();
  CHECK(eventually([&] { return static_cast<bool>(client->command({"PING"})); },
                   3s));
}

// -- AUTH and SELECT ----------------------------------------------------------

TEST_CASE("redis: a password in REDIS_URL authenticates and never appears "
          "in an error") {
  const std::string password = "pw:S3CRET@x";
  redis_process server{{"--requirepass", password}};
  SUBCASE("the right password") {
    auto client = client_for(server.url(0, password));
    auto lim = make_redis_limiter(client, "pgw:t:auth", small_limits());
    auto r = lim->try_acquire(1, 0);
    REQUIRE_MESSAGE(r, describe(r.error()));
    CHECK(r->granted);
  }
  SUBCASE("the right password for the ACL user default") {
    auto url = "redis://default:" + password + "@127.0.0.1:"
               + std::to_string(server.port()) + "/0";
    auto client = client_for(url);
    auto r = client->command({"PING"});
    REQUIRE_MESSAGE(r, describe(r.error()));
    CHECK(r->str == "PONG");
  }
  SUBCASE("a one-character password is not searched for in messages") {
    // Scrubbing it replaced every '1' of the address.
    auto client = client_for("redis://:1@127.0.0.1:"
                             + std::to_string(server.port()) + "/0");
    auto r = client->command({"PING"});
    REQUIRE_FALSE(r);
    CHECK(contains(describe(r.error()), "127.0.0.1:"));
  }
  SUBCASE("no password") {
    auto client = client_for(server.url());
    auto r = client->command({"PING"});
    REQUIRE_FALSE(r);
    CHECK(is_unavailable(r.error()));
    CHECK(contains(describe(r.error()), "NOAUTH"));
  }
  SUBCASE("a wrong password, in errors and in the log") {
    std::vector<std::string> lines;
    std::mutex lines_mtx;
    log::set_sink([&](log::level, const std::string& line) {
      std::lock_guard<std::mutex> guard{lines_mtx};
      lines.push_back(line);
    });
    struct restore_log {
      log::level level = log::current_level();
      ~restore_log() {
        log::set_sink({});
        log::set_level(level);
      }
    } restore;
    log::set_level(log::level::warn);
    auto client = client_for(server.url(0, "pw-WRONG-S3CRET"));
    auto lim = make_redis_limiter(client, "pgw:t:auth", small_limits());
    auto r = lim->try_acquire(1, 0);
    REQUIRE_FALSE(r);
    CHECK(is_unavailable(r.error()));
    auto text = describe(r.error());
    CAPTURE(text);
    CHECK(contains(text, "AUTH failed"));
    CHECK(contains(text, "WRONGPASS"));
    CHECK_FALSE(contains(text, "S3CRET"));
    std::lock_guard<std::mutex> guard{lines_mtx};
    REQUIRE(lines.size() == 1); // the outage, once
    CHECK(contains(lines[0], "AUTH failed"));
    CHECK_FALSE(contains(lines[0], "S3CRET"));
  }
  SUBCASE("the right password, server gone") {
    auto client = client_for(server.url(0, password));
    REQUIRE(client->command({"PING"}));
    server.kill();
    for (int i = 0; i < 3; ++i) {
      auto r = client->command({"PING"});
      REQUIRE_FALSE(r);
      auto text = describe(r.error());
      CAPTURE(text);
      CHECK_FALSE(contains(text, "S3CRET"));
    }
  }
}

TEST_CASE("redis: the database number of REDIS_URL is selected") {
  redis_process server;
  auto db0 = client_for(server.url(0));
  auto db5 = client_for(server.url(5));
  auto info = db5->command({"CLIENT", "INFO"});
  REQUIRE_MESSAGE(info, describe(info.error()));
  CHECK(contains(info->str, " db=5 "));
  auto lim = make_redis_limiter(db5, "pgw:t:db", small_limits());
  REQUIRE(lim->try_acquire(1, 0));
  auto size = [](redis_client& c) {
    auto r = c.command({"DBSIZE"});
    REQUIRE(r);
    return r->integer;
  };
  CHECK(size(*db5) > 0);
  CHECK(size(*db0) == 0);
  auto other = make_redis_limiter(db0, "pgw:t:db", small_limits());
  auto st = other->status(0);
  REQUIRE(st);
  CHECK(st->acquired == 0);
  st = lim->status(0);
  REQUIRE(st);
  CHECK(st->acquired == 1);
}

TEST_SUITE_END();
