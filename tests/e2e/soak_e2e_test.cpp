// Governance end to end: the soak driver against a half-dead source, and the
// circuit_open answer of `pgw-actor chat`.

#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

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
  std::ifstream in{report};
  std::stringstream text;
  text << in.rdbuf();
  std::remove(report.c_str());
  auto doc = json::parse(text.str()).as_object();
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
