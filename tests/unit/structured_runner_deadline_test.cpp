// A structured call whose work waits on the check runner before the call
// begins — its schema compiled, or a stored answer checked — still ends at
// its deadline (gateway + call_supervisor on the test coordinator, fake
// transport, virtual time, a runner that runs its tasks only when told).

#include "actors/cache.hpp"
#include "actors/check_runner.hpp"
#include "backends/cache.hpp"
#include "fixtures/actor_fixture.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <deque>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

/// Keeps every task until the test runs it, as a runner busy with other
/// checks would.
struct held_runner : check_runner {
  std::deque<std::function<void()>> tasks;

  void submit(std::function<void()> task) override {
    tasks.push_back(std::move(task));
  }
};

chat_request structured(const std::string& tag, double deadline_s);

struct runner_fixture : actor_fixture {
  std::shared_ptr<held_runner> runner = std::make_shared<held_runner>();
  cache_actor cache_ref;

  ~runner_fixture() {
    if (cache_ref)
      caf::anon_send_exit(cache_ref, caf::exit_reason::user_shutdown);
    release_all();
  }

  gateway_actor spawn_cached_gateway() {
    cache_ref = sys.spawn(pgw::cache, std::shared_ptr<cache_backend>(
                                        make_memory_cache({})),
                          "memory", nullptr, nullptr);
    gateway_options opts;
    opts.cache = cache_ref;
    opts.check_runner = runner;
    auto sc = test_scope({"a"});
    sc.cache.enabled = true;
    return spawn_gateway(sc, 42, opts);
  }

  /// Runs the held tasks (and what they send) until none is left.
  void release_all() {
    sched.run();
    while (!runner->tasks.empty()) {
      auto task = std::move(runner->tasks.front());
      runner->tasks.pop_front();
      task();
      sched.run();
    }
  }

  /// Runs a call (deadline 3 s) whose one task the runner holds: it ends
  /// at the deadline, and the task run late changes nothing.
  void ends_at_deadline(gateway_actor gw, chat_request req) {
    auto t0 = now();
    auto out = call(gw, std::move(req));
    REQUIRE(out->answers == 1);
    auto c = code_of(out->error);
    REQUIRE(c);
    CHECK(*c == error_code::call_deadline_exceeded);
    CHECK(seconds_between(t0, now()) == doctest::Approx(3).epsilon(0.01));
    CHECK(runner->tasks.size() == 1);
    release_all();
    settle();
    CHECK(out->answers == 1);
    check_balanced(status(gw));
  }

  /// A cached gateway holding the answer of the call `structured(tag, 3)`,
  /// asked upstream once.
  gateway_actor gateway_with_stored(const std::string& tag) {
    auto gw = spawn_cached_gateway();
    fake->script("a", {fake_step::ok(R"({"n": 7})").after(100ms)});
    auto stored = call_checked(gw, structured(tag, 3));
    REQUIRE_MESSAGE(stored->response, describe(stored->error));
    CHECK(fake->count("a") == 1);
    return gw;
  }

  /// A call whose checks the runner runs as they come.
  std::shared_ptr<call_outcome> call_checked(gateway_actor gw,
                                             chat_request req) {
    auto out = start_call(gw, std::move(req));
    release_all();
    while (out->answers == 0 && sched.trigger_timeout())
      release_all();
    return out;
  }
};

/// A schema no other test compiles (compiled schemas are kept per process).
chat_request structured(const std::string& tag, double deadline_s) {
  auto req = hello("n?");
  req.schema = R"({"type":"object","description":")" + tag
               + R"(","properties":{"n":{"type":"integer"}},"required":["n"]})";
  req.deadline_s = deadline_s;
  return req;
}

} // namespace

TEST_CASE_FIXTURE(runner_fixture, "structured: a call whose schema waits for "
                                  "the check runner ends at its deadline") {
  gateway_options opts;
  opts.check_runner = runner;
  auto gw = spawn_gateway(test_scope({"a"}), 42, opts);
  ends_at_deadline(gw, structured("runner-compile", 3));
  // The compile finished late: still no upstream call.
  CHECK(fake->calls().empty());
}

TEST_CASE_FIXTURE(runner_fixture, "structured: a cache hit whose check waits "
                                  "for the check runner ends at its deadline") {
  auto gw = gateway_with_stored("runner-hit");
  // The same call again: a hit, whose check the runner holds.
  ends_at_deadline(gw, structured("runner-hit", 3));
  CHECK(fake->count("a") == 1);
}

TEST_CASE_FIXTURE(runner_fixture, "structured: a cache hit checked on the "
                                  "runner in time is served") {
  auto gw = gateway_with_stored("runner-hit-in-time");
  auto out = call_checked(gw, structured("runner-hit-in-time", 3));
  REQUIRE_MESSAGE(out->response, describe(out->error));
  CHECK(out->response->stats.cache_hit);
  CHECK(out->response->parsed == R"({"n":7})");
  CHECK(fake->count("a") == 1);
}
