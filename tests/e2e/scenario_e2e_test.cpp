// The fault scenarios of config/scenarios/ end to end: `pgw-actor soak
// --scenario FILE` starts the simulator in-process, runs the load and checks
// the file's expectations; each test asserts the exit code and a few figures
// of the JSON report. The fleet scenario takes over a minute (a real RPM
// window) and is covered by fleet_e2e_test.cpp; here only its file is
// validated.

#include "fixtures/process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace pgw::test;
namespace json = boost::json;

namespace {

std::string scenario_path(const std::string& name) {
  return std::string{PGW_SOURCE_DIR} + "/config/scenarios/" + name + ".json";
}

struct scenario_run {
  run_result r;
  json::object doc;
};

/// Runs a scenario with `extra` arguments; the JSON report is parsed when
/// written.
scenario_run run_scenario(const std::string& name,
                          std::vector<std::string> extra = {}) {
  auto report = "/tmp/pgw-scenario-" + name + "-" + std::to_string(::getpid())
                + ".json";
  std::vector<std::string> argv{PGW_ACTOR_BIN, "soak", "--scenario",
                                scenario_path(name), "--json-report", report};
  argv.insert(argv.end(), extra.begin(), extra.end());
  scenario_run out;
  out.r = run_program(argv);
  std::ifstream in{report};
  std::stringstream text;
  text << in.rdbuf();
  std::remove(report.c_str());
  if (!text.str().empty())
    out.doc = json::parse(text.str()).as_object();
  return out;
}

/// The check named `name` in the report's scenario section.
bool check_ok(const json::object& doc, const std::string& name) {
  for (auto& c : doc.at("scenario").at("checks").as_array())
    if (c.at("name").as_string() == name)
      return c.at("ok").as_bool();
  FAIL("no check " << name);
  return false;
}

void all_invariants_hold(const json::object& doc) {
  for (auto& [name, holds] : doc.at("invariants").as_object()) {
    CAPTURE(std::string(name));
    CHECK(holds.as_bool());
  }
}

int64_t attempts_of(const json::object& doc, const std::string& source) {
  int64_t n = 0;
  for (auto& [outcome, k] :
       doc.at("attempts_by_source").at(source).as_object())
    n += k.as_int64();
  return n;
}

} // namespace

TEST_CASE("scenario half-dead: success >= 99.5 %, the half-dead source under 10 % of attempts") {
  auto s = run_scenario("half-dead");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  CHECK(s.r.out.find("scenario half-dead: PASSED") != std::string::npos);
  auto& doc = s.doc;
  CHECK(doc.at("success_rate").to_number<double>() >= 0.995);
  CHECK(attempts_of(doc, "half") < doc.at("attempts").as_int64() / 10);
  CHECK(doc.at("rate_limited").as_int64() > 0);
  CHECK(check_ok(doc, "retry_after_honoured"));
  all_invariants_hold(doc);
}

TEST_CASE("scenario hang-tail and hang-tail-hedged: hedging cuts the tail the hangs make") {
  auto off = run_scenario("hang-tail");
  INFO(off.r.out);
  INFO(off.r.err);
  REQUIRE(off.r.exit_code == 0);
  auto on = run_scenario("hang-tail-hedged");
  INFO(on.r.out);
  INFO(on.r.err);
  REQUIRE(on.r.exit_code == 0);
  auto p = [](const json::object& doc, const char* q) {
    return doc.at("latency_ms").at(q).to_number<double>();
  };
  MESSAGE("p95 " << p(off.doc, "p95") << " -> " << p(on.doc, "p95")
                 << " ms, p99 " << p(off.doc, "p99") << " -> "
                 << p(on.doc, "p99") << " ms");
  CHECK(off.doc.at("hedges").as_int64() == 0);
  CHECK(on.doc.at("hedges").as_int64() > 0);
  // 13 % of requests hang 0.9 s: without hedging p95 is a hang, with
  // hedging it is the hedge delay plus a normal answer.
  CHECK(p(off.doc, "p95") > 800);
  CHECK(p(on.doc, "p95") < 150);
  CHECK(p(on.doc, "p95") < p(off.doc, "p95") / 4);
  // Cost is printed (the file prices its models).
  CHECK(on.doc.at("cost_usd").is_number());
  all_invariants_hold(on.doc);
}

TEST_CASE("scenario outage-flap: served by the backups during the outage, back on the primary through one probe") {
  auto s = run_scenario("outage-flap");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  auto& doc = s.doc;
  CHECK(doc.at("success_rate").to_number<double>() == 1.0);
  auto& b = doc.at("breakers").at("primary").as_object();
  CHECK(b.at("state").as_string() == "closed");
  CHECK(b.at("opens").as_int64() >= 2);
  CHECK(b.at("probes").as_int64() - b.at("probe_failures").as_int64() == 1);
  CHECK(check_ok(doc, "share_after"));
  CHECK(check_ok(doc, "success_rate_until"));
  // The backups answered during the outage.
  auto& by = doc.at("scenario").at("answers_by_source").as_object();
  CHECK(by.at("backup1").as_int64() + by.at("backup2").as_int64() > 0);
  all_invariants_hold(doc);
}

TEST_CASE("scenario stream-faults: no truncated answer is returned as a success") {
  auto s = run_scenario("stream-faults");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  auto& doc = s.doc;
  auto& sc = doc.at("scenario").as_object();
  CHECK(sc.at("answers_truncated").as_int64() == 0);
  CHECK(sc.at("answers_checked").as_int64() == doc.at("ok").as_int64());
  CHECK(doc.at("ok").as_int64() == doc.at("calls").as_int64());
  // The faults did happen, many times each.
  CHECK(attempts_of(doc, "cut") > 50);
  CHECK(attempts_of(doc, "stall") > 50);
  all_invariants_hold(doc);
}

TEST_CASE("scenario rate-limited: the simulator never saw more than the limits, and they were reached") {
  auto s = run_scenario("rate-limited");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  auto& doc = s.doc;
  CHECK(doc.at("success_rate").to_number<double>() == 1.0);
  auto& sim = doc.at("scenario").at("sim_by_source").as_object();
  CHECK(sim.at("a").at("window_requests").as_int64() == 20);
  CHECK(sim.at("a").at("peak_concurrency").as_int64() == 2);
  CHECK(sim.at("b").at("window_tokens").as_int64() <= 400);
  CHECK(check_ok(doc, "retry_after_honoured"));
  CHECK(doc.at("rate_limited").as_int64() > 0);
  all_invariants_hold(doc);
}

TEST_CASE("a scenario whose expectation fails exits 1 and names it") {
  // half-dead with round robin and its breaker lifted: the half-dead source
  // keeps its share of the attempts.
  auto s = run_scenario("half-dead", {"--calls", "400", "--set",
                                      "LLM__SELECTOR=round_robin", "--set",
                                      "LLM__BREAKER__THRESHOLD=100000",
                                      "--set",
                                      "LLM__BREAKER__MIN_CALLS=100000"});
  INFO(s.r.out);
  INFO(s.r.err);
  CHECK(s.r.exit_code == 1);
  CHECK(s.r.out.find("FAILED  max_share.half") != std::string::npos);
  CHECK(s.r.out.find("scenario half-dead: FAILED: ") != std::string::npos);
  CHECK_FALSE(check_ok(s.doc, "max_share.half"));
  CHECK_FALSE(s.doc.at("scenario").at("passed").as_bool());
}

TEST_CASE("scenario names resolve beside the sources, unknown names and bad files exit 2") {
  auto r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", "no-such-one"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no scenario 'no-such-one'") != std::string::npos);
  CHECK(r.err.find("config/scenarios/no-such-one.json") != std::string::npos);

  auto bad = "/tmp/pgw-bad-scenario-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f{bad};
    f << R"({"sim": {"models": {}}, "env": {}, "load": {"calls": 1},
             "expect": {"success_rate_mni": 1}})";
  }
  r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", bad});
  std::remove(bad.c_str());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expect.success_rate_mni: unknown expectation")
        != std::string::npos);

  // The fleet file is found by name and parsed, and its configuration is
  // validated before anything starts (an invalid --set stops it).
  r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", "fleet", "--set",
                   "LLM__GENERIC__A__RPM=0"});
  CHECK(r.exit_code == 2); // RPM 0 is invalid: the file was found and parsed
  CHECK(r.err.find("LLM__GENERIC__A__RPM") != std::string::npos);

  // --scope and --env-file belong to plain soak.
  r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", "half-dead",
                   "--env-file", "/dev/null"});
  CHECK(r.exit_code == 2);
}

TEST_CASE("scenario structured: >= 99.5 % schema-valid with re-asks, without them it fails") {
  auto s = run_scenario("structured");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  auto& doc = s.doc;
  auto& st = doc.at("scenario").at("structured").as_object();
  auto calls = doc.at("calls").as_int64();
  CHECK(st.at("schema_valid").as_int64() * 1000 >= calls * 995);
  CHECK(st.at("reasks").as_int64() > calls / 20); // 30 % of shaky's answers
  CHECK(st.at("repaired").as_int64() > 0);        // jsonmode's fenced JSON
  CHECK(doc.at("attempts_by_source").at("jsonmode").at("request_rejected")
          .as_int64() >= 1);
  all_invariants_hold(doc);
  auto none = run_scenario("structured", {"--set",
                                          "LLM__STRUCTURED__MAX_REASKS=0"});
  CHECK(none.r.exit_code == 1);
  CHECK_FALSE(check_ok(none.doc, "schema_valid_min"));
}

TEST_CASE("scenarios persistent-429 and silent-primary: one primary request per call at most, answers from the fallback") {
  for (auto name : {"persistent-429", "silent-primary"}) {
    CAPTURE(name);
    auto s = run_scenario(name);
    INFO(s.r.out);
    INFO(s.r.err);
    REQUIRE(s.r.exit_code == 0);
    CHECK(s.r.out.find(std::string("scenario ") + name + ": PASSED")
          != std::string::npos);
    CHECK(check_ok(s.doc, "upstream_requests_per_call_max"));
    CHECK(check_ok(s.doc, "p99_ms_max"));
    CHECK(attempts_of(s.doc, "a") < s.doc.at("attempts").as_int64() / 10);
    all_invariants_hold(s.doc);
  }
}

TEST_CASE("scenario stream-faults with --calls 200: its action counts scale with the calls") {
  auto s = run_scenario("stream-faults", {"--calls", "200"});
  INFO(s.r.out);
  REQUIRE(s.r.exit_code == 0);
  CHECK(s.r.out.find("scaled to 200 calls") != std::string::npos);
  CHECK(check_ok(s.doc, "sim_actions_min.cut"));
}

TEST_CASE("scenario embed-flap: 10,000 inputs through a flapping source that takes 100, every vector in input order") {
  auto s = run_scenario("embed-flap");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  auto& doc = s.doc;
  CHECK(doc.at("success_rate").to_number<double>() == 1.0);
  CHECK(check_ok(doc, "embeddings_in_order"));
  CHECK(s.r.out.find("10000 vectors of 10 ok calls") != std::string::npos);
  // 100 sub-batches of 100 answered; the flapping source's 503s retried.
  auto& sim = doc.at("scenario").at("sim_by_source").as_object();
  CHECK(sim.at("small").at("requests").as_int64()
          + sim.at("big").at("requests").as_int64()
        > 100);
  CHECK(attempts_of(doc, "small") > 10);
  CHECK(attempts_of(doc, "big") > 10);
  all_invariants_hold(doc);
}

TEST_CASE("scenario ocr-serial: 20 parallel OCR calls on a concurrency-1 source, never two requests at once") {
  auto s = run_scenario("ocr-serial");
  INFO(s.r.out);
  INFO(s.r.err);
  REQUIRE(s.r.exit_code == 0);
  auto& doc = s.doc;
  CHECK(doc.at("success_rate").to_number<double>() == 1.0);
  auto& sim = doc.at("scenario").at("sim_by_source").as_object();
  CHECK(sim.at("m").at("requests").as_int64() == 20);
  CHECK(sim.at("m").at("peak_concurrency").as_int64() == 1);
  CHECK(check_ok(doc, "limits_respected.m"));
  all_invariants_hold(doc);
}

TEST_CASE("a scenario's load.operation is checked: unknown operations and inputs without embeddings exit 2") {
  auto path = "/tmp/pgw-scenario-op-" + std::to_string(::getpid()) + ".json";
  for (auto [load, words] :
       {std::pair{R"({"calls": 1, "operation": "vectors"})",
                  "load.operation: must be chat, embeddings, ocr_text"},
        std::pair{R"({"calls": 1, "inputs": 5})",
                  "load.inputs: only with \"operation\": \"embeddings\""}}) {
    std::ofstream{path} << R"({"sim": {"models": {}},
                               "env": {"LLM__GENERIC__A__BASE_URL": "${SIM}",
                               "LLM__GENERIC__A__MODEL": "ok"},
                               "load": )"
                        << load << "}";
    auto r = run_program({PGW_ACTOR_BIN, "soak", "--scenario", path});
    CAPTURE(std::string(load));
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(words) != std::string::npos);
  }
  std::remove(path.c_str());
}
