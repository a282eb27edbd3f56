// `pgw-actor bench overhead`: what the gateway adds to a call. The same
// non-streaming request goes straight to a zero-delay simulator over a
// keep-alive connection (the baseline) and through a gateway: one at a time
// in pairs (each call timed both ways, the added latency per pair), then in
// blocks of one kind for the CPU time per call (getrusage), then from C
// concurrent callers; unpinned, then with every thread of the process
// pinned to one vCPU; all in one run.

#include "apps/harness/bench.hpp"
#include "apps/harness/bench_options.hpp"
#include "apps/cli/cli.hpp"

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
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <sched.h>
#include <sys/resource.h>

namespace pgw::cli {

namespace {

constexpr const char* overhead_usage = R"(usage: pgw-actor bench overhead [options]

  --calls N        calls per block (default 2000; each block also warms up)
  --concurrency C  callers of the concurrent blocks (default 64)
  --pin WHERE      both (default): an unpinned run, then one with every
                   thread of this process (gateway, callers, simulator)
                   pinned to one vCPU, as `taskset -a` would; none: the
                   unpinned run only; only: the pinned run only
  --cpu N          the vCPU of the pinned run (default: the last one allowed)

Latency is paired: each call is sent straight to the simulator and through
the gateway, one after the other (alternating which goes first), and the
added latency is the per-call difference. CPU time per call is getrusage
of the whole process (simulator, callers and, through the gateway, the
gateway) over a block of calls of one kind.
)";

/// Per-call cost of a block of calls of one kind, from getrusage(SELF).
struct block_cost {
  sample_set samples;
  double cpu_us = 0; ///< user + system CPU per call, whole process
  double csw = 0;    ///< voluntary + involuntary context switches per call
};

template <class MakeCaller>
block_cost measure(int calls, int threads, MakeCaller make_caller) {
  auto before = usage_now();
  block_cost out;
  out.samples = run(calls, threads, make_caller);
  auto after = usage_now();
  auto n = static_cast<double>(std::max<size_t>(1, out.samples.us.size()));
  out.cpu_us = (after.cpu_us - before.cpu_us) / n;
  out.csw = static_cast<double>(after.csw - before.csw) / n;
  return out;
}

/// The figures of one placement (unpinned or pinned).
struct placement_result {
  double added_p50 = 0;
  double gateway_cpu = 0; ///< CPU per call through the gateway, concurrent
  int errors = 0;
};

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

template <class MakeDirect, class MakeGateway>
placement_result run_placement(const std::string& label, int calls,
                               int concurrency, MakeDirect make_direct,
                               MakeGateway make_gateway) {
  placement_result res;
  std::printf("%s\n", label.c_str());
  // Warm up connections, threads and caches.
  auto warm = std::min(calls, 500);
  run(warm, 1, make_direct);
  run(warm, 1, make_gateway);
  // -- sequential: paired latency, then a block of each kind for CPU --
  {
    auto direct = make_direct();
    auto gateway = make_gateway();
    sample_set d, g, diff;
    run_paired(calls, direct, gateway, d, g, diff);
    auto dc = measure(calls, 1, make_direct);
    auto gc = measure(calls, 1, make_gateway);
    std::printf("  sequential (1 caller), %d paired calls\n", calls);
    print_paired(4, "gateway", d, g, diff);
    std::printf("    CPU      direct %6.1f us/call  gateway %6.1f us/call  "
                "added %6.1f us/call  (getrusage, whole process)\n",
                dc.cpu_us, gc.cpu_us, gc.cpu_us - dc.cpu_us);
    std::printf("    switches direct %6.1f /call     gateway %6.1f /call\n",
                dc.csw, gc.csw);
    std::printf("    rate     direct %8.0f calls/s  gateway %8.0f calls/s  "
                "ratio gateway/direct %.2f\n",
                dc.samples.rate(), gc.samples.rate(),
                ratio(gc.samples.rate(), dc.samples.rate()));
    res.added_p50 = diff.pct(0.5);
    res.errors += d.errors + g.errors + dc.samples.errors
                  + gc.samples.errors;
  }
  // -- concurrent: a block of each kind (queueing: no paired difference) --
  {
    run(warm, concurrency, make_direct);
    run(warm, concurrency, make_gateway);
    auto dc = measure(calls, concurrency, make_direct);
    auto gc = measure(calls, concurrency, make_gateway);
    std::printf("  concurrent (%d callers)\n", concurrency);
    std::printf("    direct   p50 %8.1f us  p99 %8.1f us  %8.0f calls/s  "
                "CPU %6.1f us/call  errors %d\n",
                dc.samples.pct(0.5), dc.samples.pct(0.99), dc.samples.rate(),
                dc.cpu_us, dc.samples.errors);
    std::printf("    gateway  p50 %8.1f us  p99 %8.1f us  %8.0f calls/s  "
                "CPU %6.1f us/call  errors %d\n",
                gc.samples.pct(0.5), gc.samples.pct(0.99), gc.samples.rate(),
                gc.cpu_us, gc.samples.errors);
    std::printf("    ratio gateway/direct %.2f\n",
                ratio(gc.samples.rate(), dc.samples.rate()));
    res.gateway_cpu = gc.cpu_us;
    res.errors += dc.samples.errors + gc.samples.errors;
  }
  std::printf("\n");
  std::fflush(stdout);
  return res;
}

} // namespace

process_usage usage_now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) * 1e6
           + static_cast<double>(tv.tv_usec);
  };
  return {us(ru.ru_utime) + us(ru.ru_stime), ru.ru_nvcsw + ru.ru_nivcsw};
}

int set_affinity_all(const cpu_set_t& cpus) {
  int moved = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    auto tid = std::atoi(it->path().filename().c_str());
    if (tid > 0 && ::sched_setaffinity(tid, sizeof cpus, &cpus) == 0)
      ++moved;
  }
  return moved;
}

std::function<bool()> zero_bench::direct_caller() const {
  auto cli = std::make_shared<httplib::Client>(origin);
  cli->set_keep_alive(true);
  cli->set_tcp_nodelay(true);
  return [cli, this] {
    auto res = cli->Post("/v1/chat/completions", body, "application/json");
    return res && res->status == 200;
  };
}

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

int bench_overhead(const std::vector<std::string>& args) {
  int calls = 2000;
  int concurrency = 64;
  std::string pin = "both";
  int cpu = -1;
  if (auto code = parse_bench_options(
        args, "overhead", overhead_usage,
        {whole_option("--calls", calls, 1, 1e7),
         whole_option("--concurrency", concurrency, 1, 4096),
         text_option("--pin", pin, {"both", "none", "only"}),
         whole_option("--cpu", cpu, 0, CPU_SETSIZE - 1)}))
    return *code;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    std::fprintf(stderr, "bench overhead: cannot read the CPU affinity\n");
    return exit_other;
  }
  if (cpu < 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed))
        cpu = c;
  if (pin != "none" && !CPU_ISSET(cpu, &allowed)) {
    std::fprintf(stderr, "bench overhead: vCPU %d is not one this process "
                         "may run on\n", cpu);
    return exit_usage;
  }
  auto zero = make_zero_bench();
  if (!zero)
    return exit_other;
  const auto* cfg = &zero->cfg;
  const auto& req = zero->req;

  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "BENCH");
  if (!gw)
    return exit_other;
  client cl{sys, *gw};

  auto direct_caller = [&] { return zero->direct_caller(); };
  auto gateway_caller = [&] {
    return [&cl, &req] { return static_cast<bool>(cl.chat(req)); };
  };

  std::printf("pgw bench overhead: %d calls per block, concurrency %d, %d "
              "vCPUs allowed (simulator, gateway and callers share them, "
              "one process)\n",
              calls, concurrency, CPU_COUNT(&allowed));
  print_allocator();
  int errors = 0;
  std::optional<placement_result> unpinned, pinned;
  if (pin != "only") {
    unpinned = run_placement("unpinned", calls, concurrency, direct_caller,
                             gateway_caller);
    errors += unpinned->errors;
  }
  if (pin != "none") {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    auto moved = set_affinity_all(one);
    pinned = run_placement(
      fmt::format("pinned: all {} threads of this process on vCPU {}", moved,
                  cpu),
      calls, concurrency, direct_caller, gateway_caller);
    set_affinity_all(allowed);
    errors += pinned->errors;
  }
  auto goal = [](const char* what, double value, double limit) {
    std::printf("goal %s <= %.0f us: %.1f us: %s\n", what, limit, value,
                value <= limit ? "met" : "NOT met");
  };
  if (pinned)
    goal("added p50, pinned to one vCPU", pinned->added_p50, 50);
  if (unpinned)
    goal("added p50, unpinned", unpinned->added_p50, 100);
  if (unpinned)
    goal("CPU per call through the gateway (concurrent, unpinned; the "
         "whole process)",
         unpinned->gateway_cpu, 112);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return errors == 0 ? exit_ok : exit_other;
}

} // namespace pgw::cli
