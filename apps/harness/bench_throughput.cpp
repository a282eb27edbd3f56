// `pgw-actor bench throughput`: logical calls per second through one node.
// The same non-streaming request goes to a zero-delay in-process simulator
// for S seconds from C callers three ways, in one run: straight over
// keep-alive connections (the baseline), through a gateway with the memory
// limiter and breaker, and through a gateway with the Redis ones (a
// redis-server of our own on a free port unless --redis URL). The load
// generator, the simulator and the gateway share this machine's cores.

#include "apps/harness/bench.hpp"
#include "apps/harness/bench_options.hpp"
#include "apps/cli/cli.hpp"

#include "actors/client.hpp"
#include "apps/harness/redis_server.hpp"
#include "apps/node/node_builder.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"
#include "backends/redis/client.hpp"
#include "transport/chat_codec.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

namespace pgw::cli {

namespace {

constexpr const char* throughput_usage = R"(usage: pgw-actor bench throughput [options]

  --seconds S      measured seconds per mode (default 5; each mode also
                   warms up for 1 s)
  --concurrency C  callers in parallel (default 32)
  --redis URL      an existing Redis for the Redis mode (default: start
                   redis-server on a free loopback port for the run)
)";

/// The number after `field` in an INFO reply (`name:value` or, inside a
/// line, `key=value`), -1 when it is not there.
double info_field(const std::string& info, const char* field) {
  auto at = info.find(field);
  if (at == std::string::npos)
    return -1;
  return std::strtod(info.c_str() + at + std::strlen(field), nullptr);
}

/// Script calls (EVAL and EVALSHA) Redis has served so far (INFO
/// commandstats): our round trips; -1 unknown. Redis' total command count
/// would also count the commands run inside the scripts.
int64_t redis_commands(redis_client& c) {
  auto r = c.command({"INFO", "commandstats"});
  if (!r)
    return -1;
  double total = 0; // a command never called has no line
  for (const char* field : {"cmdstat_eval:calls=", "cmdstat_evalsha:calls="})
    total += std::max(info_field(r->str, field), 0.0);
  return static_cast<int64_t>(total);
}

/// redis-server's CPU time so far (INFO cpu: used_cpu_user + used_cpu_sys),
/// in microseconds; -1 unknown.
double redis_cpu_us(redis_client& c) {
  auto r = c.command({"INFO", "cpu"});
  if (!r)
    return -1;
  auto user = info_field(r->str, "used_cpu_user:");
  auto sys = info_field(r->str, "used_cpu_sys:");
  return user < 0 || sys < 0 ? -1 : (user + sys) * 1e6;
}

} // namespace

int bench_throughput(const std::vector<std::string>& args) {
  double seconds = 5;
  int concurrency = 32;
  std::string url;
  if (auto code = parse_bench_options(
        args, "throughput", throughput_usage,
        {number_option("--seconds", seconds,
                       [](double x) { return x > 0 && x <= 3600; }),
         whole_option("--concurrency", concurrency, 1, 4096),
         text_option("--redis", url)}))
    return *code;
  std::unique_ptr<harness::redis_server> own;
  if (url.empty()) {
    own = harness::redis_server::try_start("bench throughput");
    if (!own) {
      std::fprintf(stderr, "bench throughput: cannot start redis-server "
                           "(install it, or pass --redis URL)\n");
      return exit_other;
    }
    url = own->url();
  }
  auto redis = make_redis_client(url, 1);
  if (!redis) {
    std::fprintf(stderr, "bench throughput: %s\n",
                 describe(redis.error()).c_str());
    return exit_usage;
  }

  auto zero = make_zero_bench();
  if (!zero)
    return exit_other;
  const auto& env = zero->env;
  const auto& req = zero->req;

  std::printf("pgw bench throughput: %g s per mode after 1 s of warm-up, "
              "%d callers, %u hardware threads shared by the callers, the "
              "simulator (a thread per connection) and the gateway; Redis "
              "at %s\n",
              seconds, concurrency, std::thread::hardware_concurrency(),
              (*redis)->endpoint().c_str());
  print_allocator();
  std::fflush(stdout);

  auto direct_caller = [&] { return zero->direct_caller(); };
  run_for(1, concurrency, direct_caller);
  auto direct = run_for(seconds, concurrency, direct_caller);

  double redis_cpu = -1; // redis-server's CPU over the Redis mode's run
  auto through_gateway = [&](const env_map& e, int64_t* redis_cmds) {
    auto c = load_settings(e);
    rate_result out;
    if (!c) {
      std::fprintf(stderr, "bench: %s\n", describe(c.error()).c_str());
      out.errors = 1;
      return out;
    }
    system_config sys_cfg;
    caf::actor_system sys{sys_cfg};
    auto gw = spawn_gateway(sys, *c, "BENCH");
    if (!gw) {
      std::fprintf(stderr, "bench: %s\n", describe(gw.error()).c_str());
      out.errors = 1;
      return out;
    }
    client cl{sys, *gw};
    auto caller = [&] {
      return [&cl, &req] { return static_cast<bool>(cl.chat(req)); };
    };
    run_for(1, concurrency, caller);
    auto before = redis_cmds ? redis_commands(**redis) : 0;
    auto cpu_before = redis_cmds ? redis_cpu_us(**redis) : -1;
    out = run_for(seconds, concurrency, caller);
    if (redis_cmds) {
      auto after = redis_commands(**redis);
      *redis_cmds = before >= 0 && after >= 0 ? after - before : -1;
      auto cpu_after = redis_cpu_us(**redis);
      if (cpu_before >= 0 && cpu_after >= 0)
        redis_cpu = cpu_after - cpu_before;
    }
    caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
    return out;
  };
  auto memory = through_gateway(env, nullptr);
  auto redis_env = env;
  redis_env["PGW_LIMITER_BACKEND"] = "redis";
  redis_env["PGW_BREAKER_BACKEND"] = "redis";
  redis_env["REDIS_URL"] = url;
  redis_env["PGW_CACHE_NAMESPACE"] = fmt::format("pgw-bench-{}", ::getpid());
  int64_t cmds = -1;
  auto with_redis = through_gateway(redis_env, &cmds);

  auto line = [](const char* label, const rate_result& r,
                 const rate_result& base) {
    std::printf("%-28s %9.0f calls/s  %8lld calls  errors %lld  ratio to "
                "direct %.2f  CPU %6.1f us/call\n",
                label, r.rate(), static_cast<long long>(r.calls),
                static_cast<long long>(r.errors),
                base.rate() > 0 ? r.rate() / base.rate() : 0.0,
                r.cpu_us_per_call);
  };
  line("direct (keep-alive)", direct, direct);
  line("gateway, memory backends", memory, direct);
  line("gateway, Redis backends", with_redis, direct);
  if (cmds >= 0 && with_redis.calls > 0)
    std::printf("  Redis round trips per call in the Redis mode: %.2f (limiter "
                "and breaker script calls)\n",
                static_cast<double>(cmds) / with_redis.calls);
  if (redis_cpu >= 0 && with_redis.calls > 0)
    std::printf("  redis-server CPU per call in the Redis mode: %.1f us (INFO "
                "cpu; on the same vCPUs as this process)\n",
                redis_cpu / with_redis.calls);
  std::printf("  CPU per call is this process's (user + system, getrusage) "
              "over the measured seconds: the callers, the simulator and "
              "the gateway\n");
  // The gateway's own share, estimated as if the callers and the simulator
  // cost what they cost in the direct mode (they may cost a little more
  // when they wait longer). It reads across machines where the ratios do
  // not: a faster direct path lowers every ratio.
  if (direct.calls > 0 && memory.calls > 0 && with_redis.calls > 0)
    std::printf("  the gateway's own CPU per call (a mode's minus the direct "
                "mode's): memory %.1f us, Redis %.1f us in this process\n",
                memory.cpu_us_per_call - direct.cpu_us_per_call,
                with_redis.cpu_us_per_call - direct.cpu_us_per_call);
  auto ratio = direct.rate() > 0 ? memory.rate() / direct.rate() : 0.0;
  std::printf("\ngoal >= 5000 calls/s through one node, memory backends: "
              "%.0f calls/s: %s\n",
              memory.rate(), memory.rate() >= 5000 ? "met" : "NOT met");
  std::printf("goal gateway/direct ratio >= 0.5 (memory backends): %.2f: "
              "%s\n",
              ratio, ratio >= 0.5 ? "met" : "NOT met");
  return direct.errors + memory.errors + with_redis.errors == 0 ? exit_ok
                                                                : exit_other;
}

} // namespace pgw::cli
