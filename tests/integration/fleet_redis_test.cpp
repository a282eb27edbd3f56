// Redis governance through a real gateway: fail closed while Redis is down,
// recover without a restart, settle admitted calls once Redis is back.

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "backends/redis/client.hpp"
#include "config/loader.hpp"
#include "fixtures/real_time_config.hpp"
#include "fixtures/redis_process.hpp"
#include "fixtures/sim_process.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

using namespace pgw;
using namespace pgw::test;

namespace {

chat_request hi() {
  chat_request req;
  req.messages.push_back({"user", "hi", {}});
  return req;
}

/// One source on `sim` ("ok" answers), its limiter and breaker in `redis`.
env_map governed_env(const sim_process& sim, const redis_process& redis) {
  return {
    {"LLM__GENERIC__A__BASE_URL", sim.base_url()},
    {"LLM__GENERIC__A__MODEL", "ok"},
    {"LLM__GENERIC__A__RPM", "1000"},
    {"LLM__STREAM", "false"},
    {"PGW_LIMITER_BACKEND", "redis"},
    {"PGW_BREAKER_BACKEND", "redis"},
    {"REDIS_URL", redis.url()},
  };
}

/// `field` of the limiter's shared counters (the one source's), as Redis
/// holds them; read with plain commands, which are not script calls.
/// "settled" and "released" include "both" (permits one settle_release
/// settled and released: limiter.lua counts them once).
int64_t limiter_counter(redis_client& c, const std::string& field) {
  auto keys = c.command({"KEYS", "*:lim:stats"});
  REQUIRE(keys);
  if (keys->elements.size() != 1)
    return 0;
  auto read = [&](const std::string& name) -> int64_t {
    auto v = c.command({"HGET", keys->elements[0].str, name});
    REQUIRE(v);
    return v->is_nil() ? 0 : std::stoll(v->str);
  };
  auto n = read(field);
  if (field == "settled" || field == "released")
    n += read("both");
  return n;
}

/// Script calls (EVAL and EVALSHA) Redis served since its last RESETSTAT.
int64_t script_calls(redis_client& c) {
  auto r = c.command({"INFO", "commandstats"});
  REQUIRE(r);
  int64_t total = 0;
  for (const char* name : {"cmdstat_eval:", "cmdstat_evalsha:"}) {
    auto pos = r->str.find(name);
    if (pos != std::string::npos)
      total += std::stoll(r->str.substr(r->str.find("calls=", pos) + 6));
  }
  return total;
}

/// Waits (up to 5 s) until Redis counts `n` released permits.
void wait_released(redis_client& c, int64_t n) {
  for (int i = 0; i < 250 && limiter_counter(c, "released") < n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(limiter_counter(c, "released") == n);
}

} // namespace

TEST_CASE("redis governance: a call costs two script calls, breaker and "
          "limiter together (issue 17)") {
  redis_process redis;
  sim_process sim;
  auto cfg = load_settings(governed_env(sim, redis));
  REQUIRE(cfg);
  real_time_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "LLM");
  REQUIRE(gw);
  client cl{sys, *gw};
  auto direct = make_redis_client(redis.url());
  REQUIRE(direct);
  auto& rc = **direct;
  REQUIRE(cl.chat(hi())); // loads the scripts
  wait_released(rc, 1);
  REQUIRE(rc.command({"CONFIG", "RESETSTAT"}));
  constexpr int calls = 5;
  for (int i = 0; i < calls; ++i)
    REQUIRE(cl.chat(hi()));
  // The end of each attempt is sent without waiting: it lands after the
  // answer. Settle, release and the breaker's record are one script.
  wait_released(rc, 1 + calls);
  CHECK(script_calls(rc) == 2 * calls);
  auto st = cl.status();
  REQUIRE(st);
  auto& src = st->sources[0];
  CHECK(src.limiter.acquired == 1 + calls);
  CHECK(src.limiter.settled == 1 + calls);
  CHECK(src.breaker.state == "closed");
  CHECK(src.breaker.window_attempts == 1 + calls);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
}

TEST_CASE("redis governance: fail closed while Redis is down, recover without a restart") {
  redis_process redis;
  sim_process sim;
  auto env = governed_env(sim, redis);
  env["PGW_CACHE_NAMESPACE"] = "fleet-test";
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  real_time_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "LLM");
  REQUIRE(gw);
  client cl{sys, *gw};
  REQUIRE(cl.chat(hi()));
  redis.kill();
  auto t0 = std::chrono::steady_clock::now();
  auto down = cl.chat(hi());
  auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                            - t0)
                .count();
  REQUIRE_FALSE(down);
  CHECK(code_of(down.error()) == error_code::governance_unavailable);
  CHECK(took < 2.0); // fail closed, promptly: never admitted blindly
  // Status still answers during the outage, and says what it cannot read.
  auto during = cl.status();
  REQUIRE(during);
  auto& src = during->sources[0];
  CHECK(src.limiter.unavailable.find("governance_unavailable")
        != std::string::npos);
  CHECK(src.limiter.rpm_limit == caf::optional<int64_t>{1000});
  CHECK(src.breaker.state == "unknown");
  CHECK_FALSE(src.breaker.unavailable.empty());
  redis.restart();
  // The same process recovers (after the client's reconnect backoff).
  caf::expected<chat_response> back{caf::error{}};
  for (int i = 0; i < 50; ++i) {
    back = cl.chat(hi());
    if (back)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(back);
  auto after = cl.status();
  REQUIRE(after);
  CHECK(after->sources[0].limiter.unavailable.empty());
  CHECK(after->sources[0].breaker.unavailable.empty());
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
}

TEST_CASE("redis governance: a call admitted before Redis went down settles once it is back") {
  redis_process redis;
  sim_process sim;
  env_map env{
    {"LLM__GENERIC__A__BASE_URL", sim.base_url()},
    {"LLM__GENERIC__A__MODEL", "slow"}, // first token after 2 s
    {"LLM__GENERIC__A__TPM", "100000"},
    {"LLM__GENERIC__A__EST_TOKENS", "777"},
    {"LLM__STREAM", "true"},
    {"PGW_LIMITER_BACKEND", "redis"},
    {"REDIS_URL", redis.url()},
  };
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  real_time_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "LLM");
  REQUIRE(gw);
  client cl{sys, *gw};
  auto pending = cl.chat_async(hi());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // The call is in flight, its permit lives in Redis: Redis stops
  // answering (frozen: unreachable, its data kept).
  redis.freeze();
  auto res = pending.get();
  CHECK(res); // the answer does not depend on Redis once admitted
  // Long enough for the first settle to time out (the client's command
  // timeout is 1 s): it is retried.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  redis.thaw();
  // Once Redis is back, the retried settle and release go through.
  caf::expected<gateway_status> st{caf::error{}};
  bool settled = false;
  for (int i = 0; i < 100 && !settled; ++i) {
    st = cl.status();
    if (st) {
      auto& lim = st->sources[0].limiter;
      settled = lim.acquired == 1 && lim.settled == 1 && lim.released == 1
                && lim.in_flight == 0;
    }
    if (!settled)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(settled);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
}

TEST_CASE("redis governance: failures seen by one node open the circuit for all nodes") {
  redis_process redis;
  sim_process sim;
  env_map env{
    {"LLM__GENERIC__A__BASE_URL", sim.base_url()},
    {"LLM__GENERIC__A__MODEL", "down"},
    {"LLM__STREAM", "false"},
    {"LLM__BREAKER__THRESHOLD", "2"},
    {"LLM__MAX_ATTEMPTS", "2"},
    {"LLM__ON_CIRCUIT_OPEN", "fail"},
    {"PGW_BREAKER_BACKEND", "redis"},
    {"REDIS_URL", redis.url()},
  };
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  real_time_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  // Two nodes: two gateways with their own breaker actors, one Redis.
  auto node1 = spawn_gateway(sys, *cfg, "LLM");
  auto node2 = spawn_gateway(sys, *cfg, "LLM");
  REQUIRE(node1);
  REQUIRE(node2);
  client c1{sys, *node1}, c2{sys, *node2};
  auto first = c1.chat(hi());
  REQUIRE_FALSE(first);
  CHECK(code_of(first.error()) == error_code::retry_exhausted);
  // The breaker records the last failure after the call is answered; wait
  // until Redis holds it (seen through node 1) before node 2 calls.
  bool open = false;
  for (int i = 0; i < 100 && !open; ++i) {
    auto st1 = c1.status();
    REQUIRE(st1);
    open = st1->sources[0].breaker.state == "open";
    if (!open)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(open);
  // Node 2 never sent anything to the source and still finds it open.
  auto second = c2.chat(hi());
  REQUIRE_FALSE(second);
  CHECK(code_of(second.error()) == error_code::circuit_open);
  auto st2 = c2.status();
  REQUIRE(st2);
  CHECK(st2->sources[0].breaker.state == "open");
  CHECK(st2->sources[0].attempts == 0);
  caf::anon_send_exit(*node1, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(*node2, caf::exit_reason::user_shutdown);
}

TEST_CASE("redis governance: a gateway shut down with calls running settles "
          "and releases their permits before its limiters go") {
  redis_process redis;
  sim_process sim;
  auto env = governed_env(sim, redis);
  env["LLM__GENERIC__A__MODEL"] = "hang";
  env["LLM__GENERIC__A__MAX_CONCURRENCY"] = "8";
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  auto direct = make_redis_client(redis.url());
  REQUIRE(direct);
  auto& rc = **direct;
  constexpr int calls = 3;
  {
    real_time_config sys_cfg;
    caf::actor_system sys{sys_cfg};
    auto gw = spawn_gateway(sys, *cfg, "LLM");
    REQUIRE(gw);
    client cl{sys, *gw};
    std::vector<std::future<caf::expected<chat_response>>> pending;
    for (int i = 0; i < calls; ++i)
      pending.push_back(cl.chat_async(hi()));
    for (int i = 0; i < 250 && limiter_counter(rc, "acquired") < calls; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(limiter_counter(rc, "acquired") == calls);
    caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
    for (auto& p : pending) {
      auto res = p.get();
      REQUIRE_FALSE(res);
      CHECK(describe(res.error()).find("cancelled") != std::string::npos);
    }
  } // the actor system is gone: whatever was queued has been sent or lost
  // Every permit was given back at once, not left to its lease's expiry.
  CHECK(limiter_counter(rc, "released") == calls);
  auto leases = rc.command({"KEYS", "*:lim:lease"});
  REQUIRE(leases);
  for (auto& key : leases->elements) {
    auto n = rc.command({"ZCOUNT", key.str, "-inf", "(+inf"}); // no marker
    REQUIRE(n);
    CHECK(n->integer == 0);
  }
}
