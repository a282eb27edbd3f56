// Deterministic tests of governance in the call path: admission through the
// per-source breaker and limiter actors, settlement of every permit, and the
// ON_CIRCUIT_OPEN / ON_QUOTA_FULL policies.

#include "fixtures/actor_fixture.hpp"

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

error_code code(const call_outcome& out) {
  auto c = code_of(out.error);
  REQUIRE(c);
  return *c;
}

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "every permit is settled and released on every path") {
  fake->script("a", {fake_step::ok(), fake_step::http(503, outcome::transient),
                     fake_step::rate_limited(1.0),
                     fake_step::http(400, outcome::request_rejected),
                     fake_step::never()});
  fake->script("b", {fake_step::http(400, outcome::source_rejected),
                     fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "round_robin");
  sc.max_attempts = 2;
  sc.call_deadline_s = 20;
  auto gw = spawn_gateway(sc);
  for (int i = 0; i < 8; ++i) {
    auto out = call(gw, hello());
    CHECK(out->answers == 1);
  }
  auto st = status(gw);
  check_balanced(st);
  CHECK(source(st, "a").limiter.acquired >= 5);
  CHECK(source(st, "b").limiter.acquired >= 2);
}

TEST_CASE_FIXTURE(actor_fixture, "permits settle by the SPEC 8 rule") {
  auto sc = test_scope({"a"});
  sc.sources[0].tpm = 100000;
  sc.sources[0].est_tokens = 1000;
  sc.max_attempts = 1;
  auto unreached = fake_step::transient("connect_error");
  unreached.result.upstream_reached = false;
  auto ok_no_usage = fake_step::ok();
  ok_no_usage.result.usage_reported = false;
  auto invalid_usage = fake_step::http(200, outcome::result_invalid);
  invalid_usage.result.usage_reported = true;
  invalid_usage.result.prompt_tokens = 5;
  invalid_usage.result.completion_tokens = 3;
  auto invalid_no_usage = fake_step::http(200, outcome::result_invalid);
  fake->script("a", {fake_step::ok("x", 30, 12), ok_no_usage,
                     fake_step::http(503, outcome::transient),
                     fake_step::http(400, outcome::request_rejected),
                     unreached, invalid_usage, invalid_no_usage,
                     fake_step::http(401, outcome::source_dead),
                     fake_step::never()});
  auto gw = spawn_gateway(sc);
  auto tpm = [&] { return source(status(gw), "a").limiter.tpm_used; };
  call(gw, hello());
  CHECK(tpm() == 42); // ok with usage: actual
  call(gw, hello());
  CHECK(tpm() == 42 + 1000); // ok without usage: est
  call(gw, hello());
  CHECK(tpm() == 42 + 2000); // transient after reaching upstream: est
  call(gw, hello());
  CHECK(tpm() == 42 + 2000); // request_rejected: 0
  call(gw, hello());
  CHECK(tpm() == 42 + 2000); // connect failure before sending: 0
  call(gw, hello());
  CHECK(tpm() == 42 + 2000 + 8); // result_invalid with usage: actual
  call(gw, hello());
  CHECK(tpm() == 42 + 3008); // result_invalid without usage: est
  call(gw, hello());
  CHECK(tpm() == 42 + 3008); // source_dead: 0
  // source_dead forced the breaker open.
  auto st = status(gw);
  CHECK(source(st, "a").breaker.state == "open");
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "an open circuit is skipped, the healthy source serves") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  fake->script("b", {fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.breaker.threshold = 2;
  sc.max_attempts = 3;
  auto gw = spawn_gateway(sc);
  for (int i = 0; i < 5; ++i) {
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
  }
  // a failed twice, its breaker opened, nobody was sent to it afterwards.
  CHECK(fake->count("a") == 2);
  auto st = status(gw);
  CHECK(source(st, "a").breaker.state == "open");
  CHECK(source(st, "a").breaker.opens == 1);
  CHECK(source(st, "a").breaker.epoch == 1);
  // Two attempts, and one permit asked for beside the entry that found the
  // circuit open (given back at once); after that the breaker is asked
  // first and refuses before the limiter is asked (issue 17).
  CHECK(source(st, "a").limiter.acquired == 3);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "every circuit open and ON_CIRCUIT_OPEN=fail: circuit_open with retry_after_s") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  auto sc = test_scope({"a"});
  sc.breaker.threshold = 1;
  sc.breaker.cooldown_s = 30;
  sc.on_circuit_open = refusal_policy::fail;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::circuit_open);
  auto d = detail_of(out->error);
  REQUIRE(d != nullptr);
  REQUIRE(d->retry_after_s);
  CHECK(*d->retry_after_s > 28);
  CHECK(*d->retry_after_s <= 30);
  CHECK(d->per_source.at("a") == "circuit_open");
  CHECK(fake->count("a") == 1);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "ON_CIRCUIT_OPEN=wait: the call waits for the probe, which closes the circuit") {
  fake->script("a", {fake_step::http(503, outcome::transient), fake_step::ok()});
  auto sc = test_scope({"a"});
  sc.breaker.threshold = 1;
  sc.breaker.cooldown_s = 5;
  sc.on_circuit_open = refusal_policy::wait;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->stats.attempts == 2);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(seconds_between(calls[0].started, calls[1].started) >= 5.0);
  auto st = status(gw);
  CHECK(source(st, "a").breaker.state == "closed");
  CHECK(source(st, "a").breaker.probes == 1);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "a failed probe re-opens with a doubled cooldown") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  auto sc = test_scope({"a"});
  sc.breaker.threshold = 1;
  sc.breaker.cooldown_s = 5;
  sc.on_circuit_open = refusal_policy::wait;
  sc.max_attempts = 2;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  CHECK(code(*out) == error_code::retry_exhausted);
  auto b = source(status(gw), "a").breaker;
  CHECK(b.state == "open");
  CHECK(b.reopen_streak == 1);
  CHECK(b.opens == 2);
  CHECK(b.probe_failures == 1);
  CHECK(b.open_for_s > 9.0);
  CHECK(b.open_for_s <= 10.0);
}

TEST_CASE_FIXTURE(actor_fixture, "a cancelled probe gives its lease back at once") {
  fake->script("a", {fake_step::http(503, outcome::transient),
                     fake_step::never(), fake_step::ok()});
  auto sc = test_scope({"a"});
  sc.breaker.threshold = 1;
  sc.breaker.cooldown_s = 5;
  sc.on_circuit_open = refusal_policy::wait;
  auto gw = spawn_gateway(sc);
  auto req = hello();
  req.deadline_s = 8; // fires while the probe hangs
  auto out = call(gw, req);
  CHECK(code(*out) == error_code::call_deadline_exceeded);
  auto b = source(status(gw), "a").breaker;
  CHECK(b.state == "half_open"); // the next caller may probe right away
  CHECK_FALSE(b.probe_in_flight);
  CHECK(b.open_for_s == 0);
  auto t0 = now();
  auto next = call(gw, hello());
  REQUIRE(next->response);
  CHECK(seconds_between(t0, fake->calls().back().started) < 0.5);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "429s never feed the breaker") {
  fake->script("a", {fake_step::rate_limited(0.5)});
  auto sc = test_scope({"a"});
  sc.breaker.threshold = 1;
  sc.stall_window_s = 10;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  CHECK(code(*out) == error_code::stalled);
  CHECK(fake->count("a") >= 5);
  auto b = source(status(gw), "a").breaker;
  CHECK(b.state == "closed");
  CHECK(b.failure_count == 0);
  CHECK(b.window_attempts == 0);
}

TEST_CASE_FIXTURE(actor_fixture, "source_dead forces the circuit open for MAX_COOLDOWN_S") {
  fake->script("a", {fake_step::http(401, outcome::source_dead)});
  fake->script("b", {fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.breaker.max_cooldown_s = 600;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  auto b = source(status(gw), "a").breaker;
  CHECK(b.state == "open");
  CHECK(b.open_for_s > 590);
}

TEST_CASE_FIXTURE(actor_fixture, "RPM full and ON_QUOTA_FULL=wait: the call waits for the window") {
  auto sc = test_scope({"a"});
  sc.sources[0].rpm = 1;
  sc.on_quota_full = refusal_policy::wait;
  auto gw = spawn_gateway(sc);
  REQUIRE(call(gw, hello())->response);
  REQUIRE(call(gw, hello())->response);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  auto gap = seconds_between(calls[0].started, calls[1].started);
  CHECK(gap >= 60.0);
  CHECK(gap < 61.0);
  auto st = status(gw);
  CHECK(source(st, "a").limiter.refused_rpm >= 1);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "RPM full and ON_QUOTA_FULL=fail: quota_exhausted with retry_after_s, naming the limit") {
  auto sc = test_scope({"a"});
  sc.sources[0].rpm = 1;
  sc.on_quota_full = refusal_policy::fail;
  auto gw = spawn_gateway(sc);
  REQUIRE(call(gw, hello())->response);
  auto out = call(gw, hello());
  CHECK(code(*out) == error_code::quota_exhausted);
  auto d = detail_of(out->error);
  REQUIRE(d != nullptr);
  REQUIRE(d->retry_after_s);
  CHECK(*d->retry_after_s > 59);
  CHECK(*d->retry_after_s <= 60);
  CHECK(d->per_source.at("a") == "quota");
  // Which refusal and which limit (was "quota full, cooling down after a
  // 429 or circuit open everywhere: a: quota": two of three causes wrong).
  CHECK(d->message.find("every source's quota is full") != std::string::npos);
  CHECK(describe(d->sources) == "a: quota full, RPM limit reached (RPM=1)");
  CHECK(fake->calls().size() == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "MAX_CONCURRENCY holds calls until a slot frees") {
  fake->script("a", {fake_step::ok().after(2s)});
  auto sc = test_scope({"a"});
  sc.sources[0].max_concurrency = 1;
  auto gw = spawn_gateway(sc);
  auto first = start_call(gw, hello());
  auto second = start_call(gw, hello());
  settle();
  REQUIRE(first->response);
  REQUIRE(second->response);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  // The second request starts only once the first one is done.
  CHECK(seconds_between(calls[0].started, calls[1].started) >= 2.0);
  CHECK(source(status(gw), "a").limiter.refused_concurrency >= 1);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "health_aware moves load away from a failing source") {
  auto flaky = fake_step::http(503, outcome::transient);
  fake->script("a", {flaky});
  auto sc = test_scope({"a", "b", "c"}, "health_aware");
  sc.breaker.threshold = 1000; // isolate the selector from the breaker
  sc.breaker.min_calls = 1000;
  auto gw = spawn_gateway(sc, 5);
  for (int i = 0; i < 60; ++i)
    REQUIRE(call(gw, hello())->response);
  auto st = status(gw);
  CHECK(source(st, "a").ewma < 1.0);
  CHECK(source(st, "b").ewma == doctest::Approx(1.0));
  // Power of two choices puts the sick source first only when it is drawn
  // twice (1/9 of the orders), so it sees a fraction of the traffic.
  CHECK(fake->count("a") < 15);
}

TEST_CASE_FIXTURE(actor_fixture, "a call cancelled while its request is in flight settles the estimate, 0 before it left") {
  auto sc = test_scope({"a"});
  sc.sources[0].tpm = 100000;
  sc.sources[0].est_tokens = 1000;
  // connecting: the request never left (SPEC §8: nothing was generated).
  bool sent = true;
  SUBCASE("in flight") {
    fake->script("a", {fake_step::never()});
  }
  SUBCASE("still connecting") {
    fake->script("a", {fake_step::connecting()});
    sent = false;
  }
  auto gw = spawn_gateway(sc);
  auto req = hello();
  req.deadline_s = 5;
  CHECK(code_of(call(gw, req)->error) == error_code::call_deadline_exceeded);
  auto st = status(gw);
  CHECK(source(st, "a").limiter.tpm_used == (sent ? 1000 : 0));
  CHECK(source(st, "a").outcomes.at("cancelled") == 1);
  // Waiting is not death: nothing reached the breaker.
  CHECK(source(st, "a").breaker.window_attempts == 0);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "a source_rejected attempt settles 0") {
  auto sc = test_scope({"a", "b"}, "priority");
  for (auto& src : sc.sources) {
    src.tpm = 100000;
    src.est_tokens = 1000;
  }
  fake->script("a", {fake_step::http(400, outcome::source_rejected,
                                     "context_length_exceeded")});
  fake->script("b", {fake_step::ok("b", 10, 10)});
  auto gw = spawn_gateway(sc);
  REQUIRE(call(gw, hello())->response);
  auto st = status(gw);
  CHECK(source(st, "a").limiter.tpm_used == 0);
  CHECK(source(st, "b").limiter.tpm_used == 20);
  check_balanced(st);
}
