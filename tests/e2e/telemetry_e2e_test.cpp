// Telemetry end to end: a soak writes its SQLite database, the report reads
// it back; an unwritable database never fails a call.

#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

using namespace pgw::test;
namespace json = boost::json;

namespace {

std::vector<std::string> half_dead_env(const sim_process& sim,
                                       const std::string& db) {
  std::vector<std::string> env{"PGW_TELEMETRY_DB=" + db, "LLM__STREAM=false"};
  auto add = [&](const std::string& name, const std::string& model) {
    env.push_back("LLM__GENERIC__" + name + "__BASE_URL=" + sim.base_url());
    env.push_back("LLM__GENERIC__" + name + "__MODEL=" + model);
  };
  add("HALF", "half-dead");
  add("HEALTHY1", "healthy");
  add("HEALTHY2", "healthy");
  return env;
}

json::object report_json(const run_result& r) {
  auto v = json::parse(r.out);
  return v.as_object();
}

/// `telemetry report --json` of `db`, which holds one scope: that scope.
json::object report_of_one_scope(const std::string& db) {
  auto rep = run_program({PGW_ACTOR_BIN, "telemetry", "report", "--db", db,
                          "--json"});
  INFO(rep.err);
  REQUIRE(rep.exit_code == 0);
  auto doc = report_json(rep);
  auto& scopes = doc.at("scopes").as_array();
  REQUIRE(scopes.size() == 1);
  return scopes[0].as_object();
}

} // namespace

TEST_CASE("telemetry: a soak's database holds one row per attempt and the report reads it") {
  sim_process sim{{"--scenario",
                   std::string{PGW_SOURCE_DIR} + "/config/soak/half-dead.json",
                   "--seed", "9"}};
  auto db = "/tmp/pgw-telemetry-e2e-" + std::to_string(::getpid()) + ".sqlite";
  std::remove(db.c_str());
  auto report_path = db + ".json";
  auto soak = run_program({PGW_ACTOR_BIN, "soak", "--calls", "300",
                           "--concurrency", "8", "--json-report", report_path},
                          half_dead_env(sim, db));
  INFO(soak.out);
  REQUIRE(soak.exit_code == 0);
  std::ifstream in{report_path};
  std::stringstream text;
  text << in.rdbuf();
  auto soak_report = json::parse(text.str()).as_object();
  auto attempts = soak_report.at("attempts").as_int64();
  auto scope = report_of_one_scope(db);
  auto& total = scope.at("total").as_object();
  // One call row per call, one attempt row per attempt.
  CHECK(total.at("calls").as_int64() == 300);
  CHECK(total.at("attempts").as_int64() == attempts);
  CHECK(total.at("ok_calls").as_int64()
        == soak_report.at("ok").as_int64());
  // The per-source outcome counts agree with the gateway's own.
  for (auto& s : scope.at("sources").as_array()) {
    auto name = std::string(s.at("source").as_string());
    CAPTURE(name);
    auto& mine = s.at("attempts_by_outcome").as_object();
    auto& theirs = soak_report.at("attempts_by_source").at(name).as_object();
    for (auto& [outcome, n] : theirs)
      CHECK(mine.at(outcome).as_int64() == n.as_int64());
  }
  auto svg = db + ".svg";
  auto with_svg = run_program({PGW_ACTOR_BIN, "telemetry", "report", "--db",
                               db, "--svg", svg});
  CHECK(with_svg.exit_code == 0);
  std::ifstream svg_in{svg};
  std::stringstream svg_text;
  svg_text << svg_in.rdbuf();
  CHECK(svg_text.str().find("<svg") != std::string::npos);
  for (auto p : {db, db + "-wal", db + "-shm", report_path, svg})
    std::remove(p.c_str());
}

TEST_CASE("telemetry: an unwritable database does not fail a single call") {
  sim_process sim{{"--scenario",
                   std::string{PGW_SOURCE_DIR} + "/config/soak/half-dead.json"}};
  auto soak = run_program({PGW_ACTOR_BIN, "soak", "--calls", "200",
                           "--concurrency", "8"},
                          half_dead_env(sim, "/dev/null/cannot.sqlite"));
  INFO(soak.out);
  INFO(soak.err);
  CHECK(soak.exit_code == 0);
  CHECK(soak.out.find("success   200 / 200") != std::string::npos);
  // The problem is reported (a warning), not silent.
  CHECK(soak.err.find("telemetry") != std::string::npos);
}

TEST_CASE("telemetry: demo writes to the file PGW_TELEMETRY_DB names, not "
          "./pgw-telemetry.sqlite") {
  char tmpl[] = "/tmp/pgw-demo-telemetry-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  // demo in `dir`, where the default file would go.
  auto demo_in_dir = [&dir](int calls, const std::string& db) {
    auto r = run_program({"/bin/sh", "-c", "cd \"$1\" && exec \"$0\" demo --calls $2",
                          PGW_ACTOR_BIN, dir, std::to_string(calls)},
                         {"PGW_TELEMETRY_DB=" + db});
    INFO(r.out << r.err);
    CHECK(r.out.find("of " + std::to_string(calls) + " calls answered")
          != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir + "/pgw-telemetry.sqlite"));
  };
  auto db = dir + "/named.sqlite";
  demo_in_dir(4, db);
  REQUIRE(std::filesystem::exists(db));
  CHECK(report_of_one_scope(db).at("total").at("calls").as_int64() == 4);
  demo_in_dir(1, "off"); // no file at all
  std::filesystem::remove_all(dir);
}
