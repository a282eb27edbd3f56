// `pgw-actor demo`: the embedded default. Starts the upstream simulator in
// this process with a healthy, a flaky (503 half of the time), a slow and a
// recovering source (down for its first two seconds), runs calls through one
// gateway and prints what happened to each: failover, and the recovering
// source isolated by its breaker and let back in through a probe. Needs no
// configuration and reads none but PGW_TELEMETRY_DB (and PGW_LOG,
// PGW_SCHEDULER_THREADS, which every command reads).

#include "commands.hpp"

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"
#include "apps/cli/status_publish.hpp"

#include <csignal>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace pgw::cli {

namespace {

volatile std::sig_atomic_t stop_serving = 0;

void on_stop(int) {
  stop_serving = 1;
}

} // namespace

int demo_main(const std::vector<std::string>& args) {
  int calls = 24;
  bool serve_status = false;
  std::string publish = "127.0.0.1:0";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--calls" && i + 1 < args.size()) {
      auto n = parse_number(args[++i]);
      if (!n || *n < 1 || *n > 100000) {
        std::fprintf(stderr, "pgw-actor demo: --calls must be in [1, 100000]\n");
        return exit_usage;
      }
      calls = static_cast<int>(*n);
    } else if (args[i] == "--serve-status") {
      serve_status = true;
    } else if (args[i] == "--publish" && i + 1 < args.size()) {
      publish = args[++i];
      serve_status = true;
    } else {
      std::fprintf(stderr, "usage: pgw-actor demo [--calls N] "
                           "[--serve-status] [--publish HOST:PORT]\n");
      return exit_usage;
    }
  }
  // A quarter of real time: the slow source's 2 s first token takes 0.5 s.
  sim::options sim_opts;
  sim_opts.seed = 7;
  sim_opts.time_scale = 0.25;
  sim_opts.scenario_json = R"({"models": {
    "demo-healthy": {"tokens": 12, "latency": {"dist": "fixed", "ms": 120}},
    "demo-flaky":   {"tokens": 12, "latency": {"dist": "fixed", "ms": 80},
                     "faults": [{"p": 0.5, "status": 503}]},
    "demo-slow":    {"tokens": 12, "ttft_ms": 2000, "token_ms": 10},
    "demo-recovering": {"tokens": 12, "latency": {"dist": "fixed", "ms": 120},
                        "outage": {"first_ms": 8000, "status": 503}}
  }})";
  sim::server upstream{sim_opts};
  auto base = fmt::format("http://127.0.0.1:{}/v1", upstream.port());
  env_map env{
    {"DEMO__GENERIC__HEALTHY__BASE_URL", base},
    {"DEMO__GENERIC__HEALTHY__MODEL", "demo-healthy"},
    {"DEMO__GENERIC__FLAKY__BASE_URL", base},
    {"DEMO__GENERIC__FLAKY__MODEL", "demo-flaky"},
    {"DEMO__GENERIC__SLOW__BASE_URL", base},
    {"DEMO__GENERIC__SLOW__MODEL", "demo-slow"},
    {"DEMO__GENERIC__RECOVERING__BASE_URL", base},
    {"DEMO__GENERIC__RECOVERING__MODEL", "demo-recovering"},
    {"DEMO__BREAKER__THRESHOLD", "2"},
    {"DEMO__BREAKER__COOLDOWN_S", "0.5"},
    {"DEMO__SELECTOR", "round_robin"},
    {"DEMO__MAX_ATTEMPTS", "3"},
    {"DEMO__BACKOFF_BASE_S", "0.05"},
    {"DEMO__BACKOFF_MAX_S", "0.2"},
    {"DEMO__STREAM", "true"},
  };
  // The telemetry file (below) is the one setting taken from outside.
  if (const char* db = std::getenv("PGW_TELEMETRY_DB"))
    env["PGW_TELEMETRY_DB"] = db;
  auto cfg = load_settings(env);
  if (!cfg) {
    std::fprintf(stderr, "pgw-actor demo: %s\n", describe(cfg.error()).c_str());
    return exit_usage;
  }
  system_config sys_cfg{serve_status};
  caf::actor_system sys{sys_cfg};
  // SPEC §3: soak and demo write ./pgw-telemetry.sqlite unless
  // PGW_TELEMETRY_DB says otherwise.
  node_options gw_opts;
  gw_opts.default_telemetry_db = default_telemetry_db;
  auto gw = spawn_gateway(sys, *cfg, "DEMO", gw_opts);
  if (!gw) {
    std::fprintf(stderr, "pgw-actor demo: %s\n", describe(gw.error()).c_str());
    return exit_other;
  }
  client cl{sys, *gw};
  std::printf("pgw demo: simulator on %s with four sources: healthy "
              "(answers after 30 ms), flaky (503 half of the time), slow "
              "(first token after 500 ms) and recovering (503 for its first "
              "2 s, then healthy); selector round_robin, MAX_ATTEMPTS 3, "
              "breaker threshold 2 and cooldown 0.5 s, streaming.\n\n",
              base.c_str());
  std::printf("%-5s %-8s %-11s %-9s %-10s %-34s %s\n", "call", "outcome",
              "source", "attempts", "latency", "answer", "recovering's breaker");
  auto breaker_of = [&](const std::string& name) {
    std::string out = "?";
    if (auto st = cl.status())
      for (auto& s : st->sources)
        if (s.name == name)
          out = fmt::format("{} (opens {}, probes {})", s.breaker.state,
                            s.breaker.opens, s.breaker.probes);
    return out;
  };
  int ok = 0;
  for (int i = 1; i <= calls; ++i) {
    chat_request req;
    req.messages.push_back({"user", fmt::format("demo question {}", i), {}});
    auto res = cl.chat(std::move(req));
    if (res) {
      ++ok;
      auto answer = res->content.substr(0, 28) + "...";
      std::printf("%-5d %-8s %-11s %-9d %7.0f ms  %-34s %s\n", i, "ok",
                  res->source.c_str(), res->stats.attempts,
                  res->stats.total_latency_ms, answer.c_str(),
                  breaker_of("recovering").c_str());
    } else {
      auto detail = detail_of(res.error());
      std::string where;
      if (detail)
        for (auto& [src, reason] : detail->per_source)
          where += src + "=" + reason + " ";
      std::printf("%-5d %-8s %s %s\n", i, "failed",
                  describe(res.error()).c_str(), where.c_str());
    }
  }
  int64_t flaky_failures = 0;
  breaker_status recovering;
  if (auto st = cl.status()) {
    std::printf("\nper source: attempts / ok / failed, breaker\n");
    for (auto& s : st->sources) {
      std::printf("  %-11s %3lld / %3lld / %3lld   %s, opened %llu time(s), "
                  "%llu probe(s)\n",
                  s.name.c_str(), static_cast<long long>(s.attempts),
                  static_cast<long long>(s.ok),
                  static_cast<long long>(s.failed), s.breaker.state.c_str(),
                  static_cast<unsigned long long>(s.breaker.opens),
                  static_cast<unsigned long long>(s.breaker.probes));
      if (s.name == "flaky")
        flaky_failures = s.failed;
      if (s.name == "recovering")
        recovering = s.breaker;
    }
  }
  std::printf("\n%d of %d calls answered; the flaky source failed %lld "
              "time(s), each time the call went on to another source.\n",
              ok, calls, static_cast<long long>(flaky_failures));
  // Say only what happened: a short run may end before the probe.
  if (recovering.opens == 0)
    std::printf("The recovering source's breaker never opened in this run "
                "(too few calls reached it while it was down).\n");
  else if (recovering.state == "closed")
    std::printf("The recovering source's breaker opened %llu time(s) while "
                "it was down (calls went elsewhere meanwhile) and let it "
                "back in through a probe: it is closed now.\n",
                static_cast<unsigned long long>(recovering.opens));
  else
    std::printf("The recovering source's breaker opened %llu time(s) while "
                "it was down (calls went elsewhere meanwhile); it is %s now: "
                "the run ended before a probe let it back in (more --calls "
                "show it).\n",
                static_cast<unsigned long long>(recovering.opens),
                recovering.state.c_str());
  if (serve_status) {
    auto port = publish_status(sys, *gw, publish);
    if (!port) {
      std::fprintf(stderr, "pgw-actor demo: cannot publish on %s: %s\n",
                   publish.c_str(), sys.render(port.error()).c_str());
    } else {
      std::printf("status published on %s:%u (SIGINT or SIGTERM stops)\n",
                  publish.substr(0, publish.rfind(':')).c_str(), *port);
      std::fflush(stdout);
      std::signal(SIGINT, on_stop);
      std::signal(SIGTERM, on_stop);
      while (!stop_serving)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return ok == calls ? exit_ok : exit_other;
}

} // namespace pgw::cli
