// Hedged requests (SPEC §9, seed 000 batch G) on the test coordinator:
// virtual time, scriptable fake transport, real memory limiter and breaker.

#include "fixtures/actor_fixture.hpp"

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

/// Two sources a (primary: lower PRIORITY) and b, hedging after 1 s.
scope_config hedged(std::vector<std::string> names = {"a", "b"}) {
  auto sc = test_scope(names, "priority");
  for (size_t i = 0; i < sc.sources.size(); ++i)
    sc.sources[i].priority = static_cast<int64_t>(i);
  sc.hedge.after_s = 1.0;
  return sc;
}

const fake_call& call_on(const std::vector<fake_call>& calls,
                         const std::string& source) {
  for (auto& c : calls)
    if (c.source == source)
      return c;
  FAIL("no call on " << source);
  return calls.front();
}

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "hedge: a hanging non-streaming primary is hedged and the fast leg wins") {
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::ok("from b").after(100ms)});
  auto gw = spawn_gateway(hedged());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  auto& r = *out->response;
  CHECK(r.source == "b");
  CHECK(r.content == "from b");
  CHECK(r.stats.hedges == 1);
  CHECK(r.stats.hedge_won);
  CHECK(r.stats.attempts == 2);
  // Generation time is the winner's transport call alone, not the wait.
  CHECK(r.stats.generation_ms == doctest::Approx(100));
  CHECK(r.stats.total_latency_ms == doctest::Approx(1100));
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(call_on(calls, "a").cancelled);
  CHECK_FALSE(call_on(calls, "b").cancelled);
  CHECK(seconds_between(calls[0].started, calls[1].started)
        == doctest::Approx(1.0));
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: streaming triggers only while the first token is missing") {
  auto sc = hedged();
  sc.stream = true;
  SUBCASE("a first token before AFTER_S disarms the hedge") {
    auto step = fake_step::ok("slow but generating").after(5s);
    step.token_after(500ms);
    fake->script("a", {step});
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "a");
    CHECK(out->response->stats.hedges == 0);
    CHECK(out->response->stats.attempts == 1);
    CHECK(fake->calls().size() == 1);
  }
  SUBCASE("no first token by AFTER_S: hedged") {
    auto step = fake_step::ok("late").after(5s);
    step.token_after(3s);
    fake->script("a", {step});
    fake->script("b", {fake_step::ok("quick").after(200ms).token_after(50ms)});
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
    CHECK(out->response->stats.hedges == 1);
  }
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: no candidate means no hedge, silently") {
  SUBCASE("the other source's quota is full") {
    auto sc = hedged();
    sc.sources[1].rpm = 1;
    // First call: a rejects it for itself, b serves it and uses b's RPM.
    fake->script("a", {fake_step::http(400, outcome::source_rejected),
                       fake_step::ok("a after 3 s").after(3s)});
    fake->script("b", {fake_step::ok()});
    auto gw = spawn_gateway(sc);
    REQUIRE(call(gw, hello())->response);
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "a");
    CHECK(out->response->stats.hedges == 0);
    CHECK(out->response->stats.attempts == 1);
    CHECK(fake->count("b") == 1);
    check_balanced(status(gw));
  }
  SUBCASE("a one-source scope") {
    fake->script("a", {fake_step::ok().after(3s)});
    auto gw = spawn_gateway(hedged({"a"}));
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->stats.hedges == 0);
    CHECK(fake->calls().size() == 1);
  }
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: the winner settles actual, the loser est, neither breaker nor health hears of the loser") {
  auto sc = hedged();
  for (auto& src : sc.sources) {
    src.tpm = 100000;
    src.est_tokens = 700;
  }
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::ok("b", 30, 12).after(100ms)});
  auto gw = spawn_gateway(sc);
  REQUIRE(call(gw, hello())->response);
  auto st = status(gw);
  CHECK(source(st, "a").limiter.tpm_used == 700);
  CHECK(source(st, "b").limiter.tpm_used == 42);
  auto& a = source(st, "a");
  CHECK(a.breaker.failure_count == 0);
  CHECK(a.breaker.window_attempts == 0);
  CHECK(a.ewma == doctest::Approx(1.0));
  // The loser is labelled hedge_cancelled, not cancelled.
  CHECK(a.outcomes.at("hedge_cancelled") == 1);
  CHECK(a.outcomes.count("cancelled") == 0);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: a loser stopped before its request left settles 0 (SPEC §8)") {
  auto sc = hedged();
  for (auto& src : sc.sources) {
    src.tpm = 100000;
    src.est_tokens = 700;
  }
  // Still connecting: nothing was generated, nothing is charged. Its
  // request out, no answer yet: the estimate.
  bool sent = true;
  SUBCASE("still connecting") {
    fake->script("a", {fake_step::connecting()});
    sent = false;
  }
  SUBCASE("its request out") {
    fake->script("a", {fake_step::never()});
  }
  fake->script("b", {fake_step::ok("b", 30, 12).after(100ms)});
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  auto& unreturned = out->response->stats.unreturned;
  if (sent) {
    REQUIRE(unreturned.count("a") == 1);
    CHECK(unreturned.at("a").estimated_tokens == 700);
  } else {
    CHECK(unreturned.count("a") == 0);
  }
  auto st = status(gw);
  CHECK(source(st, "a").limiter.tpm_used == (sent ? 700 : 0));
  CHECK(source(st, "b").limiter.tpm_used == 42);
  CHECK(source(st, "a").outcomes.at("hedge_cancelled") == 1);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: a primary that finishes first after the hedge started wins back") {
  fake->script("a", {fake_step::ok("a late").after(1500ms)});
  fake->script("b", {fake_step::never()});
  auto gw = spawn_gateway(hedged());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "a");
  CHECK(out->response->stats.hedges == 1);
  CHECK_FALSE(out->response->stats.hedge_won);
  CHECK(out->response->stats.attempts == 2);
  CHECK(out->response->stats.generation_ms == doctest::Approx(1500));
  CHECK(call_on(fake->calls(), "b").cancelled);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: a simultaneous finish goes to the primary") {
  // Both answer at t = 2 s: the primary after 2 s, the hedge (started at
  // 1 s) after 1 s.
  fake->script("a", {fake_step::ok("a").after(2s)});
  fake->script("b", {fake_step::ok("b").after(1s)});
  auto gw = spawn_gateway(hedged());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "a");
  CHECK_FALSE(out->response->stats.hedge_won);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: a failed leg waits for the other") {
  fake->script("a", {fake_step::http(503, outcome::transient).after(1500ms)});
  fake->script("b", {fake_step::ok("b").after(2s)});
  auto gw = spawn_gateway(hedged());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  CHECK(out->response->stats.attempts == 2);
  // b was not restarted: the round waited for its hedge leg.
  CHECK(fake->calls().size() == 2);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: both legs failing costs one budget unit") {
  fake->script("a", {fake_step::http(503, outcome::transient).after(2s)});
  fake->script("b", {fake_step::http(503, outcome::transient).after(2s)});
  auto sc = hedged();
  sc.max_attempts = 2;
  sc.breaker.threshold = 100;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::retry_exhausted);
  // Two rounds of two legs each.
  CHECK(fake->calls().size() == 4);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: both legs 429 cost no budget, 429 plus a failure costs one") {
  SUBCASE("both 429") {
    fake->script("a", {fake_step::rate_limited(0.5).after(1500ms)});
    fake->script("b", {fake_step::rate_limited(0.5).after(1s)});
    auto sc = hedged();
    sc.max_attempts = 1;
    sc.stall_window_s = 8;
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    REQUIRE(out->answers == 1);
    CHECK(code_of(out->error) == error_code::stalled);
    CHECK(fake->calls().size() > 2);
  }
  SUBCASE("429 and a 503") {
    fake->script("a", {fake_step::http(503, outcome::transient).after(1500ms)});
    fake->script("b", {fake_step::rate_limited(0.5).after(1s)});
    auto sc = hedged();
    sc.max_attempts = 1;
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    CHECK(code_of(out->error) == error_code::retry_exhausted);
    CHECK(fake->calls().size() == 2);
  }
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: the caller's cancel stops both legs") {
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::never()});
  auto gw = spawn_gateway(hedged());
  auto req = hello();
  req.call_id = "c1";
  auto out = start_call(gw, req);
  advance(2s);
  REQUIRE(fake->calls().size() == 2);
  sys.spawn([gw](caf::event_based_actor* self) {
    self->send(gw, atom::cancel_v, std::string{"c1"});
  });
  settle();
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::cancelled);
  for (auto& c : fake->calls())
    CHECK(c.cancelled);
  auto st = status(gw);
  CHECK(source(st, "a").outcomes.at("cancelled") == 1);
  CHECK(source(st, "b").outcomes.at("cancelled") == 1);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: the deadline cuts the whole hedged tree") {
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::never()});
  auto gw = spawn_gateway(hedged());
  auto req = hello();
  req.deadline_s = 3;
  auto t0 = now();
  auto out = call(gw, req);
  CHECK(code_of(out->error) == error_code::call_deadline_exceeded);
  CHECK(seconds_between(t0, now()) >= 3.0);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].cancelled);
  CHECK(calls[1].cancelled);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: off when HEDGE__AFTER_S is unset") {
  fake->script("a", {fake_step::ok().after(10s)});
  auto sc = hedged();
  sc.hedge.after_s.reset();
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->stats.hedges == 0);
  CHECK(fake->calls().size() == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: a delayed hedge message from an earlier round is ignored") {
  // Round 1's primary fails at 0.2 s; round 2's primary hangs. Round 1's
  // hedge timer (at 1 s) must not hedge round 2; round 2's own timer does.
  fake->script("a", {fake_step::http(503, outcome::transient).after(200ms),
                     fake_step::never()});
  fake->script("b", {fake_step::ok("b").after(100ms)});
  auto gw = spawn_gateway(hedged());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  auto calls = fake->calls();
  REQUIRE(calls.size() == 3);
  CHECK(calls[1].source == "a");
  CHECK(calls[2].source == "b");
  CHECK(seconds_between(calls[1].started, calls[2].started)
        == doctest::Approx(1.0));
  CHECK(out->response->stats.hedges == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: the transport's own clock never triggers a hedge") {
  // The transport claims its call took a million seconds (its clock jumped);
  // on the actor clock it answered after 0.5 s, before AFTER_S.
  auto step = fake_step::ok("a").after(500ms);
  step.result.latency_ms = 1e9;
  fake->script("a", {step});
  auto gw = spawn_gateway(hedged());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->stats.hedges == 0);
  CHECK(fake->calls().size() == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: an admission that arrives after the round ended is given back, settled 0") {
  // The primary answers exactly when the hedge timer fires: the hedge's
  // admission completes after the call was decided.
  auto sc = hedged();
  sc.sources[1].tpm = 100000;
  sc.sources[1].est_tokens = 500;
  fake->script("a", {fake_step::ok("a").after(1s)});
  auto gw = spawn_gateway(sc);
  auto out = start_call(gw, hello());
  // Both the hedge timer and the primary's answer come due at 1 s and are
  // delivered together: the hedge's admission is under way when the primary
  // wins.
  advance(1s);
  run_until_answered(out);
  REQUIRE(out->response);
  CHECK(out->response->source == "a");
  CHECK(out->response->stats.hedges == 0);
  CHECK(fake->count("b") == 0);
  auto b = source(status(gw), "b");
  CHECK(b.limiter.acquired == 1); // admission acquired a permit ...
  CHECK(b.limiter.tpm_used == 0); // ... and gave it back at 0
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: MAX_EXTRA 2 starts leg k at k x AFTER_S on a source the round has not used") {
  auto sc = hedged({"a", "b", "c"});
  sc.hedge.max_extra = 2;
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::never()});
  fake->script("c", {fake_step::ok("from c").after(100ms)});
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  auto& r = *out->response;
  CHECK(r.source == "c");
  CHECK(r.stats.hedges == 2);
  CHECK(r.stats.attempts == 3);
  CHECK(r.stats.total_latency_ms == doctest::Approx(2100));
  auto calls = fake->calls();
  REQUIRE(calls.size() == 3);
  CHECK(calls[1].source == "b");
  CHECK(calls[2].source == "c");
  CHECK(seconds_between(calls[0].started, calls[1].started)
        == doctest::Approx(1.0));
  CHECK(seconds_between(calls[0].started, calls[2].started)
        == doctest::Approx(2.0));
  CHECK(calls[0].cancelled);
  CHECK(calls[1].cancelled);
  auto st = status(gw);
  CHECK(source(st, "a").outcomes.at("hedge_cancelled") == 1);
  CHECK(source(st, "b").outcomes.at("hedge_cancelled") == 1);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: MAX_EXTRA 3 with only two other sources starts two extra legs, silently") {
  auto sc = hedged({"a", "b", "c"});
  sc.hedge.max_extra = 3;
  fake->script("a", {fake_step::ok("a at last").after(3500ms)});
  fake->script("b", {fake_step::never()});
  fake->script("c", {fake_step::never()});
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "a");
  CHECK(out->response->stats.hedges == 2);
  CHECK(fake->calls().size() == 3);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "hedge: a round's hedge timers are dropped when the call ends") {
  // Both extra legs' timers (1 s, 2 s) are armed at the gateway, like the
  // stall window: a primary that answers first leaves none behind, not
  // even in the actor clock.
  auto sc = hedged({"a", "b", "c"});
  sc.hedge.max_extra = 2;
  fake->script("a", {fake_step::ok("a").after(500ms)});
  auto gw = spawn_gateway(sc);
  auto out = start_call(gw, hello());
  CHECK(status(gw).timers_armed == 3); // stall window and two hedge timers
  run_until_answered(out);
  REQUIRE(out->response);
  CHECK(out->response->stats.hedges == 0);
  CHECK(status(gw).timers_armed == 0);
  // Left in the clock: the gateway's ticks only (for 1 s, and the earlier
  // one for the stall window), not the two hedge timers.
  CHECK(sched.clock().schedule().size() <= 2);
}
