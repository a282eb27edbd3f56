// The gateway against absurd numbers from an upstream (SPEC 12): a
// far-future Retry-After cools a source for at most BREAKER__MAX_COOLDOWN_S
// (it used to overflow into the past, so every call hammered that source),
// and a deadline of 30 days still works.

#include "config/limits.hpp"
#include "fixtures/actor_fixture.hpp"
#include "fixtures/log_capture.hpp"

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

TEST_CASE_FIXTURE(actor_fixture, "a far-future Retry-After is capped at the "
                                 "scope's max cooldown, the fallback serves") {
  fake->script("a", {fake_step::rate_limited(1e11), fake_step::ok()});
  fake->script("b", {fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.breaker.max_cooldown_s = 120;
  auto gw = spawn_gateway(sc);
  for (int i = 0; i < 3; ++i) {
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
  }
  CHECK(fake->count("a") == 1); // not hammered while cooling
  auto cooling = source(status(gw), "a").cooling_s;
  CHECK(cooling > 100);
  CHECK(cooling <= 120);
  advance(121s);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "a");
}

TEST_CASE_FIXTURE(actor_fixture, "a capped Retry-After is logged once per "
                                 "source, with the cap as configured") {
  log_capture logs;
  fake->script("a", {fake_step::rate_limited(3600.5)});
  fake->script("b", {fake_step::rate_limited(7200)});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.breaker.max_cooldown_s = 0.25;
  sc.stall_window_s = 2;
  auto gw = spawn_gateway(sc);
  // A persistent 429: each call waits out the cooldowns and asks again
  // until its stall window is over.
  for (int i = 0; i < 2; ++i) {
    CHECK(code_of(call(gw, hello())->error) == error_code::stalled);
    advance(1s);
  }
  CHECK(fake->count("a") >= 5);
  CAPTURE(logs.all());
  CHECK(logs.count("sent a Retry-After") == 2);
  CHECK(logs.count("source a sent a Retry-After of 3600.5 s; capped at "
                   "BREAKER__MAX_COOLDOWN_S=0.25")
        == 1);
  CHECK(logs.count("source b sent a Retry-After of 7200 s; capped at "
                   "BREAKER__MAX_COOLDOWN_S=0.25")
        == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "a 30-day deadline is a deadline, not an "
                                 "overflow") {
  fake->script("a", {fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = hello();
  req.deadline_s = max_duration_s;
  auto out = call(gw, req);
  REQUIRE(out->response);
  CHECK(out->response->source == "a");
}

TEST_CASE_FIXTURE(actor_fixture, "every source over MAX_RESPONSE_BYTES or "
                                 "redirecting is result_invalid, not the "
                                 "caller's request_rejected") {
  fake->script("a", {fake_step::unusable(200, reason_response_too_large)});
  auto redirect = fake_step::unusable(302, "redirect");
  redirect.result.error_message = "redirect to http://elsewhere/";
  fake->script("b", {redirect});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "priority"));
  auto out = call(gw, hello());
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::result_invalid);
  auto d = detail_of(out->error);
  REQUIRE(d);
  CHECK(d->message
        == "no source gave a usable answer: a: response_too_large (200); "
           "b: redirect (302 \"redirect to http://elsewhere/\")");
  CHECK(d->upstream_status == 302);
  CHECK(fake->count("a") == 1); // each source once, no budget spent
  CHECK(fake->count("b") == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "a rejection about the request stays "
                                 "request_rejected next to an unusable "
                                 "answer") {
  fake->script("a", {fake_step::http(400, outcome::source_rejected,
                                     "context_length_exceeded")});
  fake->script("b", {fake_step::unusable(200, reason_response_too_large)});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "priority"));
  auto out = call(gw, hello());
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::request_rejected);
  CHECK(detail_of(out->error)->upstream_code == "context_length_exceeded");
}
