// `pgw-actor bench cache`: what a response-cache hit costs through the
// gateway, with the memory cache and with a Redis cache, next to a call
// straight to a zero-delay simulator, a call through a gateway without a
// cache, a miss through a gateway with the memory cache (each request new:
// lookup + upstream + store) and a Redis PING, all in one run. Without
// --redis URL it starts a throwaway redis-server on a free loopback port.

#include "apps/harness/bench.hpp"
#include "apps/harness/bench_options.hpp"
#include "apps/cli/cli.hpp"

#include "actors/client.hpp"
#include "apps/harness/redis_server.hpp"
#include "apps/node/node_builder.hpp"
#include "backends/redis/client.hpp"
#include "config/support/io_pool.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <future>

#include <unistd.h>

namespace pgw::cli {

namespace {

constexpr const char* cache_usage = R"(usage: pgw-actor bench cache [options]

  --calls N        sequential calls per measurement (default 2000)
  --redis URL      an existing Redis (default: start redis-server on a free
                   loopback port for the run)

Goals: memory hit p50 <= 20 us added over the gateway's call path (the
hit's p50 minus the gateway's own share of an uncached call: gateway p50 -
direct p50); Redis hit p50 <= 3 x Redis PING p50.
)";

void print(const char* label, sample_set& s) {
  std::printf("%-34s p50 %8.1f us  p99 %8.1f us  errors %d\n", label,
              s.pct(0.5), s.pct(0.99), s.errors);
}

/// `calls` sequential calls through a gateway of the BENCH scope made from
/// `env` (one warm-up run first). `fresh`: every call asks something new
/// (a miss); else every call asks the same (hits after the first).
sample_set through_gateway(const env_map& env, const chat_request& base,
                           int calls, bool fresh, bool expect_hit) {
  sample_set failed;
  failed.errors = calls;
  auto cfg = load_settings(env);
  if (!cfg) {
    std::fprintf(stderr, "bench cache: %s\n", describe(cfg.error()).c_str());
    return failed;
  }
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "BENCH");
  if (!gw) {
    std::fprintf(stderr, "bench cache: %s\n", describe(gw.error()).c_str());
    return failed;
  }
  client cl{sys, *gw};
  std::atomic<int> n{0};
  auto caller = [&] {
    return [&] {
      auto req = base;
      if (fresh)
        req.messages[0].content += fmt::format(" #{}", n++);
      auto r = cl.chat(req);
      return r && r->stats.cache_hit == expect_hit;
    };
  };
  cl.chat(base); // a hit run: stores the answer
  run(std::min(calls, 200), 1, caller);
  auto out = run(calls, 1, caller);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return out;
}

} // namespace

int bench_cache(const std::vector<std::string>& args) {
  int calls = 2000;
  std::string url;
  if (auto code = parse_bench_options(
        args, "cache", cache_usage,
        {whole_option("--calls", calls, 1, 1e7),
         text_option("--redis", url)}))
    return *code;
  std::unique_ptr<harness::redis_server> own;
  if (url.empty()) {
    own = harness::redis_server::try_start("bench cache");
    if (!own) {
      std::fprintf(stderr, "bench cache: cannot start redis-server\n");
      return exit_other;
    }
    url = own->url();
  }
  auto redis = make_redis_client(url, 1);
  if (!redis) {
    std::fprintf(stderr, "bench cache: %s\n", describe(redis.error()).c_str());
    return exit_usage;
  }
  if (!(*redis)->command({"PING"})) {
    std::fprintf(stderr, "bench cache: Redis at %s does not answer\n",
                 (*redis)->endpoint().c_str());
    return exit_other;
  }
  auto zero = make_zero_bench();
  if (!zero)
    return exit_other;
  std::printf("pgw bench cache: %d sequential calls per measurement, Redis "
              "at %s, %u hardware threads\n\n",
              calls, (*redis)->endpoint().c_str(),
              std::thread::hardware_concurrency());

  auto direct_caller = [&] {
    auto cli = std::make_shared<httplib::Client>(zero->origin);
    cli->set_keep_alive(true);
    cli->set_tcp_nodelay(true);
    return [cli, &zero] {
      auto res = cli->Post("/v1/chat/completions", zero->body,
                           "application/json");
      return res && res->status == 200;
    };
  };
  run(std::min(calls, 200), 1, direct_caller);
  auto direct = run(calls, 1, direct_caller);
  auto uncached = through_gateway(zero->env, zero->req, calls, false, false);
  auto memory_env = zero->env;
  memory_env["PGW_CACHE_BACKEND"] = "memory";
  memory_env["BENCH__CACHE__ENABLED"] = "true";
  auto memory_miss = through_gateway(memory_env, zero->req, calls, true,
                                     false);
  auto memory_hit = through_gateway(memory_env, zero->req, calls, false, true);
  auto redis_env = memory_env;
  redis_env["PGW_CACHE_BACKEND"] = "redis";
  redis_env["REDIS_URL"] = url;
  redis_env["PGW_CACHE_NAMESPACE"] = fmt::format("pgw-bench-{}", ::getpid());
  auto redis_hit = through_gateway(redis_env, zero->req, calls, false, true);
  auto c = *redis;
  auto ping_one = [c] {
    return [c] { return static_cast<bool>(c->command({"PING"})); };
  };
  run(std::min(calls, 200), 1, ping_one);
  auto ping = run(calls, 1, ping_one);
  // What the cache actor's Redis read costs before any actor is involved: a
  // GET handed to an I/O thread and its result handed back (two thread
  // hand-offs, as the cache's offload does).
  io_pool pool;
  auto handed_one = [c, &pool] {
    return [c, &pool] {
      auto done = std::make_shared<std::promise<bool>>();
      auto got = done->get_future();
      pool.submit([c, done] {
        done->set_value(static_cast<bool>(c->command({"GET", "pgw-bench"})));
      });
      return got.get();
    };
  };
  run(std::min(calls, 200), 1, handed_one);
  auto handed = run(calls, 1, handed_one);

  print("direct to the simulator", direct);
  print("gateway, no cache", uncached);
  print("gateway, memory cache, miss", memory_miss);
  print("gateway, memory cache, hit", memory_hit);
  print("gateway, Redis cache, hit", redis_hit);
  print("Redis PING", ping);
  print("Redis GET via an I/O thread", handed);
  auto call_path = uncached.pct(0.5) - direct.pct(0.5);
  auto added = memory_hit.pct(0.5) - call_path;
  std::printf("\nmemory hit p50 - gateway call path p50 (%.1f us) = %.1f us "
              "(goal <= 20 us): %s\n",
              call_path, added, added <= 20 ? "met" : "NOT met");
  std::printf("memory miss p50 - no-cache p50 = %.1f us (what lookup + "
              "store add to a miss)\n",
              memory_miss.pct(0.5) - uncached.pct(0.5));
  auto ratio = ping.pct(0.5) > 0 ? redis_hit.pct(0.5) / ping.pct(0.5) : 0.0;
  std::printf("Redis hit p50 / PING p50 = %.2f (goal <= 3): %s\n", ratio,
              ratio <= 3 ? "met" : "NOT met");
  std::printf("Redis hit p50 - memory hit p50 = %.1f us (the read: GET via "
              "an I/O thread p50 %.1f us)\n",
              redis_hit.pct(0.5) - memory_hit.pct(0.5), handed.pct(0.5));
  auto errors = direct.errors + uncached.errors + memory_miss.errors
                + memory_hit.errors + redis_hit.errors + ping.errors
                + handed.errors;
  return errors == 0 ? exit_ok : exit_other;
}

} // namespace pgw::cli
