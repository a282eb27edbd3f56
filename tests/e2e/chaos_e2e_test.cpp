// Chaos drills: a real `pgw-actor soak` process under load while a part it
// depends on is killed — Redis, the upstream simulator — or its telemetry
// disk fills up. Each drill is bounded in time, and after each the soak's own
// invariants must hold: nothing in flight, every permit settled and released
// once, one answer per call. (The fourth drill, a gateway process SIGKILLed
// mid-call giving its capacity back to the other nodes, is
// `fleet: a node killed mid-call …` in fleet_e2e_test.cpp.)

#include "fixtures/chaos.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace pgw::test;
using namespace pgw::test::chaos;
namespace json = boost::json;

namespace {

void invariants_hold(const json::object& report) {
  for (auto& [name, holds] : report.at("invariants").as_object()) {
    CAPTURE(std::string(name));
    CHECK(holds.as_bool());
  }
}

int64_t ok_calls(const json::object& report) {
  return report.at("ok").as_int64();
}

/// Error codes the report holds, other than those in `allowed`.
std::vector<std::string> other_errors(const json::object& report,
                                      const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  for (auto& [code, n] : report.at("errors").as_object()) {
    bool ok = false;
    for (auto& a : allowed)
      ok = ok || code == a;
    if (!ok && n.as_int64() > 0)
      out.push_back(std::string(code));
  }
  return out;
}

/// A soak printing its progress every 20 ms, so a drill can act on it.
std::vector<std::string> soak_argv(int calls, int concurrency,
                                   const std::string& report) {
  return {PGW_ACTOR_BIN,   "soak",
          "--calls",       std::to_string(calls),
          "--concurrency", std::to_string(concurrency),
          "--progress",    "0.02",
          "--json-report", report};
}

} // namespace

TEST_CASE("chaos: Redis killed and restarted mid-run: fail closed, recover, every permit settled") {
  temp_dir dir;
  redis_process redis;
  restartable_sim sim;
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
    "LLM__GENERIC__A__MODEL=ok",
    "LLM__GENERIC__A__RPM=100000",
    "LLM__GENERIC__A__TPM=100000000",
    "LLM__GENERIC__A__MAX_CONCURRENCY=64",
    "LLM__STREAM=false",
    "PGW_LIMITER_BACKEND=redis",
    "PGW_BREAKER_BACKEND=redis",
    "REDIS_URL=" + redis.url(),
    "PGW_CACHE_NAMESPACE=chaos",
    "PGW_TELEMETRY_DB=off",
    // No call may outlive this, whatever Redis does meanwhile.
    "LLM__CALL_DEADLINE_S=20",
  };
  auto report_path = dir.file("report.json");
  bg_process soak{soak_argv(12000, 16, report_path), env};
  int64_t done_at_kill = 0;
  REQUIRE(wait_progress(soak, 300, 30s, &done_at_kill));
  redis.kill();
  // Calls fail closed at once while Redis is away: restart it once some
  // have (the soak's progress shows them), with most of the run to come and
  // before the Redis client's reconnect backoff has grown far (it doubles
  // from 50 ms to 2 s while Redis stays away; failing calls are fast, so a
  // late restart lets the rest of the run fail before the reconnect).
  REQUIRE(wait_progress(soak, done_at_kill + 300, 30s));
  redis.restart();
  auto rc = soak.wait_for(120s);
  INFO(soak.err());
  // Where the run was when it ended (or hung): its last progress lines.
  auto& out = soak.out();
  INFO(out.substr(out.size() > 600 ? out.size() - 600 : 0));
  REQUIRE(rc.has_value()); // nothing hung
  auto report = soak_report(report_path);
  INFO(json::serialize(report));
  invariants_hold(report);
  CHECK(*rc == 0);
  // Failed closed while Redis was away: never admitted blindly...
  CHECK(report_errors(report, "governance_unavailable") > 0);
  CHECK(other_errors(report, {"governance_unavailable"}).empty());
  // ... and recovered without a restart: calls before and after succeeded.
  CHECK(ok_calls(report) >= 300);
  CHECK(ok_calls(report) + report_errors(report, "governance_unavailable")
        == 12000);
  // Calls succeeded after the restart: more than could have before the kill
  // (the progress line's count plus one 20 ms progress interval of calls,
  // far below 500). How many failed while Redis was away depends on how fast
  // the machine restarts it, so the floor is not a share of the run.
  INFO("done at the kill: " << done_at_kill);
  CHECK(ok_calls(report) >= done_at_kill + 500);
}

TEST_CASE("chaos: the simulator killed mid-stream and restarted: calls fail over or fail cleanly, none past its deadline") {
  temp_dir dir;
  auto scenario = dir.file("sim.json");
  {
    // Streams that take ~0.3 s: the kill always cuts some mid-stream.
    std::ofstream out{scenario};
    out << R"({"models": {"trickle-a": {"ttft_ms": 40, "token_ms": 10, "tokens": 25},
                          "trickle-b": {"ttft_ms": 40, "token_ms": 10, "tokens": 25}}})";
  }
  restartable_sim primary{{"--scenario", scenario}};
  restartable_sim backup{{"--scenario", scenario}};
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + primary.base_url(),
    "LLM__GENERIC__A__MODEL=trickle-a",
    "LLM__GENERIC__A__PRIORITY=0",
    "LLM__GENERIC__B__BASE_URL=" + backup.base_url(),
    "LLM__GENERIC__B__MODEL=trickle-b",
    "LLM__GENERIC__B__PRIORITY=1",
    "LLM__SELECTOR=priority",
    "LLM__STREAM=true",
    "LLM__MAX_ATTEMPTS=3",
    "LLM__CALL_DEADLINE_S=3",
    "LLM__BACKOFF_BASE_S=0.01",
    "LLM__BREAKER__COOLDOWN_S=0.5",
    "PGW_TELEMETRY_DB=off",
  };
  auto report_path = dir.file("report.json");
  bg_process soak{soak_argv(600, 16, report_path), env};
  REQUIRE(wait_progress(soak, 60, 30s));
  primary.kill(); // connections cut mid-stream, new ones refused
  // The outage lasts while the backup serves a share of the run (the
  // soak's progress shows it), not for a fixed time.
  REQUIRE(wait_progress(soak, 250, 30s));
  primary.restart();
  auto rc = soak.wait_for(120s);
  INFO(soak.err());
  REQUIRE(rc.has_value());
  auto report = soak_report(report_path);
  INFO(json::serialize(report));
  invariants_hold(report);
  CHECK(*rc == 0);
  // Cut streams and refused connections were retried on the backup.
  CHECK(report.at("success_rate").to_number<double>() >= 0.99);
  auto& attempts = report.at("attempts_by_source").as_object();
  CHECK(attempts.contains("b"));
  // Nothing waited past its deadline (3 s; slack for a loaded machine).
  CHECK(report.at("latency_ms").at("p999").to_number<double>() < 3500);
  // And the primary is used again once it is back.
  CHECK(sim_log(primary.port()).size() > 0);
}

TEST_CASE("chaos: the telemetry disk fills up: every call still succeeds, lost rows are counted") {
  temp_dir dir;
  restartable_sim sim;
  auto db = dir.file("telemetry.sqlite");
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
    "LLM__GENERIC__A__MODEL=ok",
    "LLM__STREAM=false",
    "PGW_TELEMETRY_DB=" + db,
  };
  auto report_path = dir.file("report.json");
  // Every file the soak writes is capped at 256 KiB: SQLite's database (and
  // its WAL, which also holds the schema migrations) hit the cap after a few
  // hundred rows and every later write fails with EFBIG, as on a full disk.
  // The report itself is written at the end, small enough to fit.
  bg_options opts;
  opts.max_file_size = 256 * 1024;
  opts.ignore_sigxfsz = true;
  bg_process soak{soak_argv(3000, 16, report_path), env, opts};
  auto rc = soak.wait_for(120s);
  INFO(soak.err());
  REQUIRE(rc.has_value());
  auto report = soak_report(report_path);
  INFO(json::serialize(report));
  invariants_hold(report);
  CHECK(*rc == 0);
  CHECK(ok_calls(report) == 3000);
  auto& tel = report.at("telemetry").as_object();
  CHECK(tel.at("dropped").to_number<int64_t>() > 0);
  // It worked until the disk filled.
  CHECK(tel.at("written").to_number<int64_t>() > 0);
}
