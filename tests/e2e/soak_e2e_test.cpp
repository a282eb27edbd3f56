// Governance end to end: the soak driver against a half-dead source, and the
// circuit_open answer of `pgw-actor chat`.

#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace pgw::test;
namespace json = boost::json;

namespace {

std::vector<std::string> sources_env(const sim_process& sim) {
  std::vector<std::string> env;
  auto add = [&](const std::string& name, const std::string& model) {
    env.push_back("LLM__GENERIC__" + name + "__BASE_URL=" + sim.base_url());
    env.push_back("LLM__GENERIC__" + name + "__MODEL=" + model);
  };
  add("HALF", "half-dead");
  add("STORM", "storm");
  add("HEALTHY1", "healthy");
  add("HEALTHY2", "healthy");
  env.push_back("LLM__STREAM=false");
  return env;
}

/// The --json-report file at `path`, removed once read.
json::object take_report(const std::string& path) {
  std::ifstream in{path};
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return json::parse(text.str()).as_object();
}

} // namespace

TEST_CASE("soak: a half-dead source is isolated and success stays above 99.5 %") {
  sim_process sim{{"--scenario",
                   std::string{PGW_SOURCE_DIR} + "/config/soak/half-dead.json",
                   "--seed", "5"}};
  auto report = "/tmp/pgw-soak-" + std::to_string(::getpid()) + ".json";
  auto r = run_program({PGW_ACTOR_BIN, "soak", "--calls", "2000",
                        "--concurrency", "32", "--json-report", report},
                       sources_env(sim));
  INFO(r.out);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  auto doc = take_report(report);
  CHECK(doc.at("calls").as_int64() == 2000);
  CHECK(doc.at("success_rate").to_number<double>() >= 0.995);
  for (auto& [name, holds] : doc.at("invariants").as_object()) {
    CAPTURE(std::string(name));
    CHECK(holds.as_bool());
  }
  auto attempts = doc.at("attempts").as_int64();
  int64_t half = 0;
  for (auto& [outcome, n] : doc.at("attempts_by_source").at("half").as_object())
    half += n.as_int64();
  MESSAGE("half-dead source: " << half << " of " << attempts << " attempts");
  CHECK(half < attempts / 10);
  // Its breaker is what isolated it.
  CHECK(doc.at("breakers").at("half").at("opens").as_int64() >= 1);
  // The 429 storm was seen and cost no call.
  CHECK(doc.at("rate_limited").as_int64() > 0);
}

TEST_CASE("every circuit open with ON_CIRCUIT_OPEN=fail: chat exits 4 with circuit_open") {
  sim_process sim;
  auto r = run_program({PGW_ACTOR_BIN, "chat", "--json", "hi"},
                       {"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                        "LLM__GENERIC__A__MODEL=down",
                        "LLM__BREAKER__THRESHOLD=1",
                        "LLM__ON_CIRCUIT_OPEN=fail"});
  INFO(r.err);
  CHECK(r.exit_code == 4);
  auto err = json::parse(r.out).at("error").as_object();
  CHECK(err.at("code").as_string() == "circuit_open");
  REQUIRE(err.at("retry_after_s").is_number());
  CHECK(err.at("retry_after_s").to_number<double>() > 0);
  auto& a = err.at("per_source").at("a").as_object();
  CHECK(a.at("reason").as_string() == "circuit_open");
  // It says why the circuit opened.
  CHECK(a.at("detail").as_string() == "circuit open, opened after http_503");
  CHECK(std::string(err.at("message").as_string()).find(
          "a: circuit open, opened after http_503")
        != std::string::npos);
}

TEST_CASE("soak: the report's telemetry counts are final, every queued row "
          "written or dropped") {
  // They were taken while the writer still held rows: 50 calls into a
  // database that is a directory reported 0 dropped (the rows were dropped
  // at shutdown, after the report), a healthy run fewer written than queued.
  sim_process sim;
  auto dir = "/tmp/pgw-soak-telemetry-" + std::to_string(::getpid());
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  auto report = dir + "/report.json";
  auto telemetry_of = [&](const std::string& db, const char* calls) {
    auto r = run_program({PGW_ACTOR_BIN, "soak", "--calls", calls,
                          "--concurrency", "4", "--json-report", report},
                         {"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                          "LLM__GENERIC__A__MODEL=ok", "LLM__STREAM=false",
                          "PGW_TELEMETRY_DB=" + db});
    INFO(r.out);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    auto doc = take_report(report).at("telemetry").as_object();
    // An attempt row and a call row per call.
    CHECK(doc.at("queued").as_int64() == 2 * std::stoll(calls));
    return doc;
  };
  auto unwritable = telemetry_of(dir, "50");
  CHECK(unwritable.at("written").as_int64() == 0);
  CHECK(unwritable.at("dropped").as_int64() == 100);
  CHECK(unwritable.at("errors").as_int64() >= 1);
  CHECK_FALSE(unwritable.at("healthy").as_bool());
  auto healthy = telemetry_of(dir + "/t.sqlite", "1100");
  CHECK(healthy.at("written").as_int64() == 2200);
  CHECK(healthy.at("dropped").as_int64() == 0);
  std::string cmd = "rm -rf '" + dir + "'";
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("soak: --calls 1000000000 with --seconds 1 starts, stops after a "
          "second and keeps nothing per call") {
  // The soak allocated a record per call before the first one started: a
  // billion calls died with bad_alloc.
  sim_process sim;
  auto report = "/tmp/pgw-soak-huge-" + std::to_string(::getpid()) + ".json";
  auto r = run_program({PGW_ACTOR_BIN, "soak", "--calls", "1000000000",
                        "--concurrency", "4", "--seconds", "1",
                        "--json-report", report},
                       {"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                        "LLM__GENERIC__A__MODEL=ok", "LLM__STREAM=false",
                        "PGW_TELEMETRY_DB=off"});
  INFO(r.out);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("stopped   after --seconds 1:") != std::string::npos);
  auto doc = take_report(report);
  auto calls = doc.at("calls").as_int64();
  CHECK(calls > 0);
  CHECK(calls < 1000000000);
  CHECK(doc.at("calls_asked").as_int64() == 1000000000);
  CHECK(doc.at("ok").as_int64() == calls);
  for (auto& [name, holds] : doc.at("invariants").as_object()) {
    CAPTURE(std::string(name));
    CHECK(holds.as_bool());
  }
  // The soak process stayed small (a gateway and four callers).
  rusage ru{};
  REQUIRE(::getrusage(RUSAGE_CHILDREN, &ru) == 0);
  CHECK(ru.ru_maxrss < 512 * 1024); // KiB
}

TEST_CASE("soak: --seconds is checked and is for a plain soak only") {
  auto r = run_program({PGW_ACTOR_BIN, "soak", "--seconds", "0"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--seconds must be seconds") != std::string::npos);
  r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", "half-dead",
                   "--seconds", "1"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--seconds is for a plain soak only")
        != std::string::npos);
}

TEST_CASE("soak: a --json-report path that cannot be written is exit 2 "
          "before the run, and the report counts expired leases") {
  sim_process sim;
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                               "LLM__GENERIC__A__MODEL=ok",
                               "LLM__STREAM=false", "PGW_TELEMETRY_DB=off"};
  auto dir = "/tmp/pgw-soak-report-" + std::to_string(::getpid());
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  for (auto& bad : {dir + "/missing/r.json", dir}) {
    CAPTURE(bad);
    auto r = run_program({PGW_ACTOR_BIN, "soak", "--calls", "200",
                          "--concurrency", "4", "--json-report", bad},
                         env);
    INFO(r.out);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--json-report " + bad + " cannot be written")
          != std::string::npos);
    CHECK(r.out.find("pgw soak report") == std::string::npos); // no run
  }
  // The same before a scenario.
  auto r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", "half-dead",
                        "--json-report", dir + "/missing/r.json"});
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("scenario half-dead") == std::string::npos);
  // A writable path gets the report, which says how many leases expired.
  auto report = dir + "/r.json";
  r = run_program({PGW_ACTOR_BIN, "soak", "--calls", "20", "--concurrency",
                   "2", "--json-report", report},
                  env);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  auto doc = take_report(report);
  REQUIRE(doc.contains("leases_expired"));
  CHECK(doc.at("leases_expired").to_number<int64_t>() == 0);
  std::string cmd = "rm -rf '" + dir + "'";
  CHECK(std::system(cmd.c_str()) == 0);
}
