// Structured output against a real simulator, with the gateway's check
// runner held by the test: an answer is checked on the runner, never inside
// the attempt actor, so a slow check holds no scheduler thread (another
// call is answered meanwhile), an attempt stopped while its answer is
// checked settles the answer's usage and answers its call once, and a cache
// hit's check runs there too, as does compiling a schema the process has
// not compiled yet.

#include "actors/check_runner.hpp"
#include "actors/client.hpp"
#include "actors/structured_schema.hpp"
#include "apps/node/node_builder.hpp"
#include "config/loader.hpp"
#include "fixtures/eventually.hpp"
#include "fixtures/real_time_config.hpp"
#include "fixtures/sim_process.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>

#include <unistd.h>

using namespace pgw;
using namespace pgw::test;

namespace {

/// Keeps every check until the test runs it (on the test's thread).
class held_runner final : public check_runner {
public:
  void submit(std::function<void()> task) override {
    std::lock_guard<std::mutex> guard{mtx_};
    tasks_.push_back(std::move(task));
  }

  size_t held() {
    std::lock_guard<std::mutex> guard{mtx_};
    return tasks_.size();
  }

  void run_held() {
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      tasks.swap(tasks_);
    }
    for (auto& task : tasks)
      task();
  }

private:
  std::mutex mtx_;
  std::deque<std::function<void()>> tasks_;
};

const char* person_schema
  = R"({"type":"object","properties":{"name":{"type":"string"},)"
    R"("age":{"type":"integer"}},"required":["name","age"]})";

/// The simulator's scenario: a model that answers a person as JSON.
std::string write_scenario() {
  auto path = (std::filesystem::temp_directory_path()
               / ("pgw-structured-offload-" + std::to_string(::getpid())
                  + ".json"))
                .string();
  std::ofstream{path} << R"({"models": {"person": {"content": )"
                         R"("{\"name\": \"Ada\", \"age\": 36}"}}})";
  return path;
}

struct offload_fixture {
  std::string scenario_path = write_scenario();
  sim_process sim{{"--scenario", scenario_path}};
  std::shared_ptr<held_runner> runner = std::make_shared<held_runner>();
  real_time_config sys_cfg{1}; // one scheduler thread, as the CLI's
  caf::actor_system sys{sys_cfg};
  gateway_actor gw;

  offload_fixture() {
    env_map env{
      {"LLM__GENERIC__A__BASE_URL", sim.base_url()},
      {"LLM__GENERIC__A__MODEL", "person"},
      {"LLM__GENERIC__A__EST_TOKENS", "777"},
      {"LLM__GENERIC__A__TPM", "100000"},
      {"LLM__STREAM", "false"},
      {"PGW_CACHE_BACKEND", "memory"},
      {"LLM__CACHE__ENABLED", "true"},
      {"PLAIN__GENERIC__B__BASE_URL", sim.base_url()},
      {"PLAIN__GENERIC__B__MODEL", "ok"},
    };
    auto cfg = load_settings(env);
    REQUIRE(cfg);
    node_options node;
    node.structured_checks = runner;
    auto made = spawn_gateway(sys, *cfg, "LLM", node);
    REQUIRE(made);
    gw = *made;
    auto plain = spawn_gateway(sys, *cfg, "PLAIN", node);
    REQUIRE(plain);
    plain_gw = *plain;
    // Compiled before the calls (the process keeps it): only the answers'
    // checks go to the runner, but in the test of compiling.
    REQUIRE(compile_schema(person_schema));
  }

  ~offload_fixture() {
    caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(plain_gw, caf::exit_reason::user_shutdown);
    std::filesystem::remove(scenario_path);
  }

  gateway_actor plain_gw;

  static chat_request person_request() {
    chat_request req;
    req.messages.push_back({"user", "who?", {}});
    req.schema = person_schema;
    return req;
  }
};

bool ready(std::future<caf::expected<chat_response>>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

} // namespace

TEST_CASE("structured check on the check runner: another call is answered while an answer is checked") {
  offload_fixture fx;
  client structured{fx.sys, fx.gw};
  client plain{fx.sys, fx.plain_gw};
  auto call = structured.chat_async(offload_fixture::person_request());
  // The answer came in and its check went to the runner, not into the
  // attempt actor (the old code checks it there: nothing is ever held).
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  // The only scheduler thread is free: a call on another gateway of the
  // same actor system is answered while the check is held.
  chat_request hello;
  hello.messages.push_back({"user", "hi", {}});
  auto other = plain.chat(hello);
  REQUIRE(other);
  CHECK(!other->content.empty());
  CHECK(!ready(call));
  fx.runner->run_held();
  REQUIRE(eventually([&] { return ready(call); }));
  auto res = call.get();
  REQUIRE(res);
  CHECK(res->parsed == R"({"name":"Ada","age":36})");
  CHECK(res->stats.attempts == 1);
  auto st = structured.status();
  REQUIRE(st);
  REQUIRE(st->sources.size() == 1);
  auto& lim = st->sources[0].limiter;
  CHECK(lim.in_flight == 0);
  CHECK(lim.settled == 1);
  CHECK(lim.released == 1);
  CHECK(lim.tpm_used == res->usage.total_tokens);
}

TEST_CASE("structured check on the check runner: a call whose deadline passes during the check fails once and settles the answer's usage") {
  offload_fixture fx;
  client structured{fx.sys, fx.gw};
  auto req = offload_fixture::person_request();
  req.deadline_s = 0.3;
  auto call = structured.chat_async(std::move(req));
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  // The deadline stops the attempt while its answer is checked.
  REQUIRE(eventually([&] { return ready(call); }));
  auto res = call.get();
  REQUIRE(!res);
  CHECK(code_of(res.error()) == error_code::call_deadline_exceeded);
  // The late check finds its attempt gone: nothing is answered twice, and
  // the permit was settled with the answer's usage (the sim reports it),
  // not the 777 estimate.
  fx.runner->run_held();
  auto st = structured.status();
  REQUIRE(st);
  auto& src = st->sources[0];
  CHECK(src.limiter.in_flight == 0);
  CHECK(src.limiter.settled == 1);
  CHECK(src.limiter.released == 1);
  CHECK(src.limiter.tpm_used > 0);
  CHECK(src.limiter.tpm_used != 777);
  CHECK(src.outcomes.at("cancelled") == 1);
}

TEST_CASE("structured check on the check runner: a cache hit is checked there too") {
  offload_fixture fx;
  client structured{fx.sys, fx.gw};
  auto first = structured.chat_async(offload_fixture::person_request());
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  fx.runner->run_held();
  auto stored = first.get();
  REQUIRE(stored);
  CHECK(!stored->stats.cache_hit);
  // The same call again: the stored answer is checked against the schema
  // again (an entry may be stale), on the runner.
  auto again = structured.chat_async(offload_fixture::person_request());
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  CHECK(!ready(again));
  fx.runner->run_held();
  auto hit = again.get();
  REQUIRE(hit);
  CHECK(hit->stats.cache_hit);
  CHECK(hit->parsed == R"({"name":"Ada","age":36})");
  auto st = structured.status();
  REQUIRE(st);
  CHECK(st->sources[0].limiter.acquired == 1); // the hit asked no source
}

TEST_CASE("structured check on the check runner: a schema not compiled yet is compiled there") {
  offload_fixture fx;
  client structured{fx.sys, fx.gw};
  client plain{fx.sys, fx.plain_gw};
  auto req = offload_fixture::person_request();
  req.schema = R"({"$comment":"compiled on the runner by )"
               + std::to_string(::getpid())
               + R"(","type":"object","required":["name","age"]})";
  auto call = structured.chat_async(req);
  // First the schema's compilation (the old code compiles it inside the
  // supervisor: the first task held is the answer's check, and the schema
  // is compiled already).
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  CHECK(compiled_schema_of(req.schema) == nullptr);
  chat_request hello;
  hello.messages.push_back({"user", "hi", {}});
  REQUIRE(plain.chat(hello));
  CHECK(!ready(call));
  fx.runner->run_held();
  // Then the answer's check.
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  CHECK(compiled_schema_of(req.schema) != nullptr);
  fx.runner->run_held();
  REQUIRE(eventually([&] { return ready(call); }));
  auto res = call.get();
  REQUIRE(res);
  CHECK(res->parsed == R"({"name":"Ada","age":36})");
  // An invalid schema is refused from the runner too, before any source
  // is asked.
  auto bad = offload_fixture::person_request();
  bad.schema = R"({"type":"objekt"})";
  auto refused = structured.chat_async(bad);
  REQUIRE(eventually([&] { return fx.runner->held() == 1; }));
  fx.runner->run_held();
  REQUIRE(eventually([&] { return ready(refused); }));
  auto err = refused.get();
  REQUIRE(!err);
  CHECK(code_of(err.error()) == error_code::invalid_request);
  auto st = structured.status();
  REQUIRE(st);
  CHECK(st->sources[0].limiter.acquired == 1);
}
