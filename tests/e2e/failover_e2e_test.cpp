// Failover conduct and honest errors (issue 12) as a user meets them:
// `pgw-actor chat` against the simulator, a primary and a fallback with the
// `priority` selector. Time bounds are loose (a loaded 2-core machine); the
// request counts come from the simulator's own log.

#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>

using namespace pgw::test;
namespace json = boost::json;

namespace {

struct failover_fixture {
  sim_process sim{{"--seed", "12"}};
  /// A primary (PRIORITY 0) serving `primary`, a fallback (1) serving `ok`.
  std::vector<std::string> env(const std::string& primary) {
    auto url = sim.base_url();
    return {"LLM__SELECTOR=priority",
            "LLM__GENERIC__A__BASE_URL=" + url,
            "LLM__GENERIC__A__MODEL=" + primary,
            "LLM__GENERIC__A__PRIORITY=0",
            "LLM__GENERIC__B__BASE_URL=" + url,
            "LLM__GENERIC__B__MODEL=ok",
            "LLM__GENERIC__B__PRIORITY=1"};
  }

  /// Only source a, serving `model`, plus `extra`.
  std::vector<std::string> only_a(const std::string& model,
                                  std::vector<std::string> extra = {}) {
    extra.push_back("LLM__GENERIC__A__BASE_URL=" + sim.base_url());
    extra.push_back("LLM__GENERIC__A__MODEL=" + model);
    return extra;
  }

  struct timed {
    run_result run;
    double seconds = 0;
  };

  timed chat(std::vector<std::string> args, std::vector<std::string> env) {
    args.insert(args.begin(), {PGW_ACTOR_BIN, "chat"});
    auto t0 = std::chrono::steady_clock::now();
    timed out;
    out.run = run_program(args, env);
    out.seconds = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    return out;
  }

  /// Models of the requests the simulator saw, in arrival order.
  std::vector<std::string> models() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    std::vector<std::string> out;
    auto doc = json::parse(res->body);
    for (auto& e : doc.at("requests").as_array())
      out.emplace_back(e.at("model").as_string());
    return out;
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE_FIXTURE(failover_fixture, "a primary that always answers 429 without Retry-After: one request, then the fallback in < 2 s") {
  auto r = chat({"--json", "hi"}, env("throttled"));
  INFO(r.run.err);
  REQUIRE(r.run.exit_code == 0);
  CHECK(json::parse(r.run.out).at("source").as_string() == "b");
  CHECK(models() == std::vector<std::string>{"throttled", "ok"});
  CHECK(r.seconds < 2.0);
}

TEST_CASE_FIXTURE(failover_fixture, "a silent primary (TIMEOUT_S 1): one request, then the fallback") {
  auto e = env("hang");
  e.push_back("LLM__GENERIC__A__TIMEOUT_S=1");
  e.push_back("LLM__BACKOFF_BASE_S=0.01");
  auto r = chat({"--json", "hi"}, e);
  INFO(r.run.err);
  REQUIRE(r.run.exit_code == 0);
  CHECK(json::parse(r.run.out).at("source").as_string() == "b");
  CHECK(models() == std::vector<std::string>{"hang", "ok"});
  CHECK(r.seconds < 1.0 + 2.0);
}

TEST_CASE_FIXTURE(failover_fixture, "a stalled primary stream (STREAM_IDLE_TIMEOUT_S 1): one request, then the fallback") {
  auto e = env("stall");
  e.push_back("LLM__GENERIC__A__STREAM_IDLE_TIMEOUT_S=1");
  e.push_back("LLM__BACKOFF_BASE_S=0.01");
  auto r = chat({"--json", "--stream", "hi"}, e);
  INFO(r.run.err);
  REQUIRE(r.run.exit_code == 0);
  CHECK(json::parse(r.run.out).at("source").as_string() == "b");
  CHECK(models() == std::vector<std::string>{"stall", "ok"});
}

TEST_CASE_FIXTURE(failover_fixture, "a wrong API key: the error names 401 and the upstream's message") {
  auto e = only_a("unauth");
  auto r = chat({"--json", "hi"}, e);
  CHECK(r.run.exit_code == 4);
  auto err = json::parse(r.run.out).at("error").as_object();
  CHECK(has(std::string(err.at("message").as_string()),
            "every source is unusable: a: unauthorized (401 \"simulated "
            "401\")"));
  auto& a = err.at("per_source").at("a").as_object();
  CHECK(a.at("reason").as_string() == "unauthorized");
  CHECK(a.at("status").as_int64() == 401);
  CHECK(a.at("message").as_string() == "simulated 401");
  CHECK(models().size() == 1);
  // Plain output: the cause, one line per source.
  auto plain = chat({"hi"}, e);
  CHECK(plain.run.exit_code == 4);
  CHECK(has(plain.run.err, "pgw-actor: retry_exhausted: every source is "
                           "unusable\n  a: unauthorized (401 \"simulated "
                           "401\")\n"));
}

TEST_CASE_FIXTURE(failover_fixture, "plain errors list every source, PGW_LOG=debug logs each attempt") {
  auto e = only_a("down", {"LLM__GENERIC__B__BASE_URL=http://127.0.0.1:1/v1",
                           "LLM__GENERIC__B__MODEL=ok",
                           "LLM__SELECTOR=round_robin", "LLM__MAX_ATTEMPTS=2",
                           "LLM__BACKOFF_BASE_S=0.01", "PGW_LOG=debug"});
  auto r = chat({"hi"}, e);
  CHECK(r.run.exit_code == 4);
  CHECK(has(r.run.err, "\n  a: http_503 (503 \"simulated 503\")\n"));
  CHECK(has(r.run.err, "\n  b: connect_error\n"));
  CHECK(has(r.run.err, "#1 starts on LLM/a"));
  CHECK(has(r.run.err, "#1 on LLM/a ended transient (http_503), status 503"));
  CHECK(has(r.run.err, "#2 on LLM/b ended transient (connect_error), status 0"));
}

TEST_CASE_FIXTURE(failover_fixture, "a deadline error lists the source in flight") {
  auto e = only_a("hang");
  auto r = chat({"--json", "--deadline", "0.5", "hi"}, e);
  CHECK(r.run.exit_code == 5);
  auto err = json::parse(r.run.out).at("error").as_object();
  auto& a = err.at("per_source").at("a").as_object();
  CHECK(a.at("reason").as_string() == "in_flight");
  CHECK(has(std::string(a.at("detail").as_string()), "no first token"));
  CHECK(has(std::string(err.at("message").as_string()),
            "the call deadline passed: a: in flight 0."));
}

TEST_CASE_FIXTURE(failover_fixture, "PGW_LOG=info logs 429 cooldowns and breaker transitions") {
  auto e = env("throttled");
  e.push_back("PGW_LOG=info");
  auto r = chat({"hi"}, e);
  CHECK(r.run.exit_code == 0);
  CHECK(has(r.run.err, "gateway: source LLM/a cools down for 1.0 s after 429 #1"));
  auto down = only_a("down", {"LLM__BREAKER__THRESHOLD=1",
                              "LLM__MAX_ATTEMPTS=1", "PGW_LOG=info"});
  auto d = chat({"hi"}, down);
  CHECK(d.run.exit_code == 4);
  CHECK(has(d.run.err, "breaker: source a closed -> open (epoch 1"));
}

TEST_CASE("every subcommand answers --help with exit 0, --version names the libraries") {
  for (auto args : std::vector<std::vector<std::string>>{
         {"--help"}, {"chat", "--help"}, {"config", "--help"},
         {"config", "check", "--help"}, {"demo", "--help"},
         {"status", "--help"}, {"bench", "--help"},
         {"bench", "overhead", "--help"}, {"bench", "hedge", "--help"},
         {"soak", "--help"}, {"telemetry", "--help"}}) {
    args.insert(args.begin(), PGW_ACTOR_BIN);
    auto r = run_program(args);
    CAPTURE(args[1]);
    CHECK(r.exit_code == 0);
    CHECK(has(r.out, "usage"));
  }
  // Each benchmark answers --help with its own options, not bench's list.
  for (std::string name : {"overhead", "throughput", "inflight", "hedge",
                           "admission", "cache", "serve"}) {
    auto r = run_program({PGW_ACTOR_BIN, "bench", name, "--help"});
    CAPTURE(name);
    CHECK(r.exit_code == 0);
    CHECK(has(r.out, "usage: pgw-actor bench " + name + " [options]"));
  }
  // The top-level help names every benchmark and every scenario file.
  auto help = run_program({PGW_ACTOR_BIN, "--help"}).out;
  CHECK(has(help, "bench cache"));
  CHECK(has(help, "bench serve"));
  for (auto& entry : std::filesystem::directory_iterator(
         std::string{PGW_SOURCE_DIR} + "/config/scenarios"))
    if (entry.path().extension() == ".json") {
      auto name = entry.path().stem().string();
      CAPTURE(name);
      bool listed = has(help, name + ",") || has(help, name + ")");
      CHECK(listed);
    }
  auto v = run_program({PGW_ACTOR_BIN, "--version"});
  CHECK(v.exit_code == 0);
  CHECK(has(v.out, "pgw-actor 0.1"));
  CHECK(has(v.out, "CAF 0.17.6"));
  CHECK(has(v.out, "cpp-httplib 0.11.4"));
  CHECK(has(v.out, "OpenSSL 3."));
  // The malloc the build chose (PGW_ALLOCATOR) is the one the process runs
  // on: found at run time, so a link order that left glibc's malloc first
  // fails here.
  if (std::string{PGW_ALLOCATOR_USED} == "tcmalloc")
    CHECK(has(v.out, "malloc tcmalloc 2."));
  else
    CHECK(has(v.out, "malloc system"));
}

TEST_CASE("config check with nothing configured is an error pointing at config/.env.example") {
  auto r = run_program({PGW_ACTOR_BIN, "config", "check"});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "no scope configured"));
  CHECK(has(r.err, "config/.env.example"));
}
