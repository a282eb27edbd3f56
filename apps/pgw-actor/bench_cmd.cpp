// `pgw-actor bench overhead`: what the gateway adds to a call. The same
// non-streaming request goes N times straight to a zero-delay simulator over
// a keep-alive connection (the baseline) and N times through a gateway, first
// one at a time, then from C concurrent callers; both in one run.

#include "bench.hpp"
#include "cli.hpp"

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"
#include "transport/chat_codec.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace pgw::cli {

namespace {

void report(const char* label, sample_set& direct, sample_set& via) {
  auto d50 = direct.pct(0.5), d99 = direct.pct(0.99);
  auto g50 = via.pct(0.5), g99 = via.pct(0.99);
  std::printf("%s\n", label);
  std::printf("  direct   p50 %8.1f us  p99 %8.1f us  %9.0f calls/s  "
              "errors %d\n",
              d50, d99, direct.rate(), direct.errors);
  std::printf("  gateway  p50 %8.1f us  p99 %8.1f us  %9.0f calls/s  "
              "errors %d\n",
              g50, g99, via.rate(), via.errors);
  std::printf("  added    p50 %8.1f us  p99 %8.1f us  throughput ratio "
              "gateway/direct %.2f\n",
              g50 - d50, g99 - d99,
              direct.rate() > 0 ? via.rate() / direct.rate() : 0.0);
}

} // namespace

std::optional<zero_bench> make_zero_bench() {
  zero_bench out;
  sim::options sim_opts;
  sim_opts.scenario_json = R"({"models": {"bench-zero": {"tokens": 8}}})";
  sim_opts.log_limit = 0;
  out.upstream = std::make_unique<sim::server>(sim_opts);
  out.origin = fmt::format("http://127.0.0.1:{}", out.upstream->port());
  out.env = env_map{
    {"BENCH__GENERIC__ZERO__BASE_URL", out.origin + "/v1"},
    {"BENCH__GENERIC__ZERO__MODEL", "bench-zero"},
    {"BENCH__STREAM", "false"},
  };
  auto cfg = load_settings(out.env);
  if (!cfg) {
    std::fprintf(stderr, "bench: %s\n", describe(cfg.error()).c_str());
    return std::nullopt;
  }
  out.cfg = std::move(*cfg);
  out.req.messages.push_back({"user", "How far is the moon?", {}});
  auto body = build_chat_body(out.req, out.cfg.scopes.at("BENCH").sources[0],
                              false);
  if (!body) {
    std::fprintf(stderr, "bench: %s\n", describe(body.error()).c_str());
    return std::nullopt;
  }
  out.body = std::move(*body);
  return out;
}

int bench_main(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "hedge")
    return bench_hedge(args);
  if (!args.empty() && args[0] == "admission")
    return bench_admission(args);
  if (!args.empty() && args[0] == "throughput")
    return bench_throughput(args);
  if (!args.empty() && args[0] == "inflight")
    return bench_inflight(args);
  if (!args.empty() && args[0] == "cache")
    return bench_cache(args);
  if (args.empty() || args[0] != "overhead") {
    std::fprintf(stderr, "usage: pgw-actor bench "
                         "overhead|throughput|inflight|hedge|admission|cache "
                         "[options] (--help for each)\n");
    return exit_usage;
  }
  int calls = 2000;
  int concurrency = 64;
  for (size_t i = 1; i < args.size(); ++i) {
    auto num = [&]() -> int {
      if (i + 1 >= args.size())
        return -1;
      auto x = parse_number(args[++i]);
      return x && *x >= 1 && *x <= 1e7 ? static_cast<int>(*x) : -1;
    };
    if (args[i] == "--calls")
      calls = num();
    else if (args[i] == "--concurrency")
      concurrency = num();
    else
      calls = -1;
    if (calls < 1 || concurrency < 1) {
      std::fprintf(stderr, "pgw-actor bench overhead: bad option %s\n",
                   args[i].c_str());
      return exit_usage;
    }
  }
  auto zero = make_zero_bench();
  if (!zero)
    return exit_other;
  const auto& origin = zero->origin;
  const auto* cfg = &zero->cfg;
  const auto& req = zero->req;
  const auto* body = &zero->body;

  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "BENCH");
  if (!gw)
    return exit_other;
  client cl{sys, *gw};

  auto direct_caller = [&] {
    auto cli = std::make_shared<httplib::Client>(origin);
    cli->set_keep_alive(true);
    cli->set_tcp_nodelay(true);
    return [cli, &body] {
      auto res = cli->Post("/v1/chat/completions", *body, "application/json");
      return res && res->status == 200;
    };
  };
  auto gateway_caller = [&] {
    return [&cl, &req] { return static_cast<bool>(cl.chat(req)); };
  };

  std::printf("pgw bench overhead: %d calls per mode, concurrency %d, "
              "%u hardware threads (simulator, gateway and callers share "
              "them)\n\n",
              calls, concurrency, std::thread::hardware_concurrency());
  // Warm up connections, threads and caches.
  run(std::min(calls, 500), 1, direct_caller);
  run(std::min(calls, 500), 1, gateway_caller);
  auto d1 = run(calls, 1, direct_caller);
  auto g1 = run(calls, 1, gateway_caller);
  report("sequential (1 caller)", d1, g1);
  run(std::min(calls, 500), concurrency, direct_caller);
  run(std::min(calls, 500), concurrency, gateway_caller);
  auto dc = run(calls, concurrency, direct_caller);
  auto gc = run(calls, concurrency, gateway_caller);
  report(fmt::format("concurrent ({} callers)", concurrency).c_str(), dc, gc);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return d1.errors + g1.errors + dc.errors + gc.errors == 0 ? exit_ok
                                                            : exit_other;
}

} // namespace pgw::cli
