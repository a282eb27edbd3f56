// A fleet: three gateway processes (three `pgw-actor soak` runs at once)
// share one Redis and one simulated source with RPM, TPM and
// MAX_CONCURRENCY. The simulator's log proves the limits held across the
// processes. A real 60 s window: this test takes a little over a minute.

#include "fixtures/process.hpp"
#include "fixtures/redis_process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <chrono>
#include <csignal>
#include <future>
#include <unistd.h>

using namespace pgw::test;
namespace json = boost::json;

TEST_CASE("fleet: three processes share RPM, TPM and MAX_CONCURRENCY through Redis") {
  const int rpm = 15, tpm = 300, est = 20, max_concurrency = 2;
  redis_process redis;
  auto scenario = "/tmp/pgw-fleet-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f{scenario};
    f << R"({"models": {"fleet": {"tokens": 10,
            "latency": {"dist": "fixed", "ms": 300}}}})";
  }
  sim_process sim{{"--scenario", scenario}};
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
    "LLM__GENERIC__A__MODEL=fleet",
    "LLM__GENERIC__A__RPM=" + std::to_string(rpm),
    "LLM__GENERIC__A__TPM=" + std::to_string(tpm),
    "LLM__GENERIC__A__EST_TOKENS=" + std::to_string(est),
    "LLM__GENERIC__A__MAX_CONCURRENCY=" + std::to_string(max_concurrency),
    "LLM__STREAM=false",
    "LLM__ON_QUOTA_FULL=wait",
    "PGW_LIMITER_BACKEND=redis",
    "PGW_BREAKER_BACKEND=redis",
    "REDIS_URL=" + redis.url(),
    "PGW_TELEMETRY_DB=off",
  };
  const int per_node = 8, nodes = 3;
  std::vector<std::future<run_result>> runs;
  for (int i = 0; i < nodes; ++i)
    runs.push_back(std::async(std::launch::async, [&] {
      return run_program({PGW_ACTOR_BIN, "soak", "--calls",
                          std::to_string(per_node), "--concurrency", "3"},
                         env);
    }));
  for (auto& r : runs) {
    auto res = r.get();
    INFO(res.out);
    INFO(res.err);
    CHECK(res.exit_code == 0);
    CHECK(res.out.find("success   " + std::to_string(per_node) + " / "
                       + std::to_string(per_node))
          != std::string::npos);
  }
  std::remove(scenario.c_str());
  httplib::Client cli{"127.0.0.1", sim.port()};
  auto res = cli.Get("/_sim/log");
  REQUIRE(res);
  auto log = json::parse(res->body).at("requests").as_array();
  REQUIRE(log.size() == per_node * nodes);
  struct req {
    double arrived, ended;
    int64_t tokens;
  };
  std::vector<req> reqs;
  for (auto& e : log)
    reqs.push_back({e.at("arrived_ms").to_number<double>(),
                    e.at("ended_ms").to_number<double>(),
                    e.at("prompt_tokens").as_int64()
                      + e.at("tokens_sent").as_int64()});
  std::sort(reqs.begin(), reqs.end(),
            [](const req& a, const req& b) { return a.arrived < b.arrived; });
  // Admission happens a few milliseconds before arrival: windows of 59.5 s
  // of arrivals stay inside one 60 s window of admissions.
  const double window_ms = 59500;
  int max_in_window = 0;
  int64_t max_tokens = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    int n = 0;
    int64_t tokens = 0;
    for (size_t j = i; j < reqs.size(); ++j)
      if (reqs[j].arrived < reqs[i].arrived + window_ms) {
        ++n;
        tokens += reqs[j].tokens;
      }
    max_in_window = std::max(max_in_window, n);
    max_tokens = std::max(max_tokens, tokens);
  }
  // Concurrency: the largest number of overlapping requests.
  std::vector<std::pair<double, int>> events;
  for (auto& r : reqs) {
    events.emplace_back(r.arrived, +1);
    events.emplace_back(r.ended, -1);
  }
  std::sort(events.begin(), events.end());
  int live = 0, max_live = 0;
  for (auto& [at, d] : events)
    max_live = std::max(max_live, live += d);
  MESSAGE("requests in a window: " << max_in_window << " (RPM " << rpm
                                   << "), tokens in a window: " << max_tokens
                                   << " (TPM " << tpm << "), concurrency: "
                                   << max_live << " (MAX " << max_concurrency
                                   << "), last arrival at "
                                   << reqs.back().arrived / 1000 << " s");
  CHECK(max_in_window <= rpm);
  CHECK(max_tokens <= tpm);
  CHECK(max_live <= max_concurrency);
  // The limit was actually reached: later calls waited for the window.
  CHECK(max_in_window == rpm);
  CHECK(reqs.back().arrived > 60000);
}

TEST_CASE("fleet: a node killed mid-call gives its concurrency back after TIMEOUT_S plus the margin") {
  redis_process redis;
  auto scenario = "/tmp/pgw-fleet-kill-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f{scenario};
    // The first request hangs (held by the node that will be killed), the
    // next ones answer.
    f << R"({"models": {"held": {"tokens": 5,
            "script": [{"hang_ms": 600000}, {}]}}})";
  }
  sim_process sim{{"--scenario", scenario}};
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
    "LLM__GENERIC__A__MODEL=held",
    "LLM__GENERIC__A__MAX_CONCURRENCY=1",
    "LLM__GENERIC__A__TIMEOUT_S=2", // lease: TIMEOUT_S + 10 s
    "LLM__STREAM=false",
    "LLM__ON_QUOTA_FULL=wait",
    "PGW_LIMITER_BACKEND=redis",
    "PGW_BREAKER_BACKEND=redis",
    "REDIS_URL=" + redis.url(),
  };
  // Node 1 takes the only slot and hangs in its call.
  child_process node1{{PGW_ACTOR_BIN, "chat", "hi"}, env};
  httplib::Client cli{"127.0.0.1", sim.port()};
  for (int i = 0; i < 500; ++i) {
    auto res = cli.Get("/_sim/log");
    if (res && json::parse(res->body).at("requests").as_array().size() == 1)
      break;
    ::usleep(10000);
  }
  auto killed_at = std::chrono::steady_clock::now();
  node1.signal(SIGKILL);
  node1.wait();
  // Node 2 waits for the slot, which comes back when the dead node's lease
  // runs out.
  auto r = run_program({PGW_ACTOR_BIN, "chat", "--json", "hi"}, env);
  auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - killed_at)
                  .count();
  INFO(r.err);
  CHECK(r.exit_code == 0);
  MESSAGE("node 2 got the dead node's slot after " << waited << " s");
  CHECK(waited > 8.0);   // not before the lease ran out ...
  CHECK(waited < 12.0 + 3.0); // ... and soon after it did (lease 12 s)
  std::remove(scenario.c_str());
}
