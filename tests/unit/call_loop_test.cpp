// Deterministic tests of the call loop: gateway + call_supervisor + attempt
// on CAF's test coordinator with the scriptable fake transport.

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

const error_detail& detail(const call_outcome& out) {
  auto d = detail_of(out.error);
  REQUIRE(d != nullptr);
  return *d;
}

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "a healthy source answers with call stats") {
  fake->script("a", {fake_step::ok("hi there", 12, 3).after(250ms)});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  REQUIRE(out->response);
  auto& r = *out->response;
  CHECK(r.content == "hi there");
  CHECK(r.source == "a");
  CHECK(r.model == "model-a");
  CHECK(r.stats.attempts == 1);
  CHECK(r.stats.source == "a");
  CHECK(r.stats.prompt_tokens == 12);
  CHECK(r.stats.completion_tokens == 3);
  CHECK(r.stats.usage_source == "reported");
  CHECK(r.stats.generation_ms == doctest::Approx(250));
  CHECK(r.stats.total_latency_ms >= 250);
  CHECK_FALSE(r.call_id.empty());
}

TEST_CASE_FIXTURE(actor_fixture, "failover: a 503 source is left for a healthy one") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  fake->script("b", {fake_step::ok()});
  SUBCASE("round_robin moves on at once") {
    auto gw = spawn_gateway(test_scope({"a", "b"}, "round_robin"));
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
    CHECK(out->response->stats.attempts == 2);
    CHECK(fake->count("a") == 1);
  }
  SUBCASE("priority keeps its first source until it failed twice") {
    auto sc = test_scope({"a", "b"}, "priority");
    sc.max_attempts = 3;
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
    CHECK(out->response->stats.attempts == 3);
    CHECK(fake->count("a") == 2);
    CHECK(fake->count("b") == 1);
  }
}

TEST_CASE_FIXTURE(actor_fixture, "MAX_ATTEMPTS bounds the rounds that fail") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  auto sc = test_scope({"a"});
  sc.max_attempts = 3;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::retry_exhausted);
  CHECK(fake->count("a") == 3);
  CHECK(detail(*out).per_source.at("a") == "http_503");
  CHECK(is_unavailable_family(code(*out)));
}

TEST_CASE_FIXTURE(actor_fixture, "429 costs no budget and Retry-After is waited for") {
  fake->script("a", {fake_step::rate_limited(2.0), fake_step::rate_limited(2.0),
                     fake_step::rate_limited(2.0), fake_step::ok()});
  auto sc = test_scope({"a"});
  sc.max_attempts = 1;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->stats.attempts == 4);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 4);
  for (size_t i = 1; i < calls.size(); ++i)
    CHECK(seconds_between(calls[i - 1].started, calls[i].started) >= 2.0);
}

TEST_CASE_FIXTURE(actor_fixture, "the wait after a failed round is max(backoff, Retry-After)") {
  // A transient failure with a 5 s Retry-After: the next round may not start
  // before the memo ends, even though backoff is at most 1 s.
  fake->script("a", {fake_step::rate_limited(5.0), fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto out = call(gw, hello());
  REQUIRE(out->response);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  auto gap = seconds_between(calls[0].started, calls[1].started);
  CHECK(gap >= 5.0);
  CHECK(gap < 5.5);
}

TEST_CASE_FIXTURE(actor_fixture, "a 429 on one source fails over at once to another") {
  fake->script("a", {fake_step::rate_limited(30.0)});
  fake->script("b", {fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "priority"));
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(seconds_between(calls[0].started, calls[1].started) <= 1.0);
}

TEST_CASE_FIXTURE(actor_fixture, "a call that only sees 429s ends stalled") {
  fake->script("a", {fake_step::rate_limited(10.0)});
  auto sc = test_scope({"a"});
  sc.stall_window_s = 45;
  auto gw = spawn_gateway(sc);
  auto t0 = now();
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::stalled);
  // It gave up as soon as the next wait would cross the window.
  CHECK(fake->count("a") >= 4);
  CHECK(fake->count("a") <= 5);
  auto last = fake->calls().back().started;
  CHECK(seconds_between(t0, last) <= 45.0);
  REQUIRE(detail(*out).retry_after_s);
  CHECK(*detail(*out).retry_after_s > 0);
}

TEST_CASE_FIXTURE(actor_fixture, "request_rejected ends the call after one request") {
  fake->script("a", {fake_step::http(400, outcome::request_rejected,
                                     "content_policy_violation")});
  fake->script("b", {fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "priority"));
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::request_rejected);
  CHECK(detail(*out).upstream_status == 400);
  CHECK(detail(*out).upstream_code == "content_policy_violation");
  CHECK(fake->calls().size() == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "source_rejected excludes that source, costs no budget") {
  fake->script("a", {fake_step::http(400, outcome::source_rejected,
                                     "context_length_exceeded")});
  fake->script("b", {fake_step::http(503, outcome::transient),
                     fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.max_attempts = 2;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  CHECK(fake->count("a") == 1);
  CHECK(fake->count("b") == 2);
}

TEST_CASE_FIXTURE(actor_fixture, "every source rejecting the request is request_rejected") {
  fake->script("a", {fake_step::http(400, outcome::source_rejected,
                                     "context_length_exceeded")});
  fake->script("b", {fake_step::http(413, outcome::source_rejected)});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "priority"));
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::request_rejected);
  CHECK(fake->calls().size() == 2);
  CHECK(detail(*out).per_source.size() == 2);
}

TEST_CASE_FIXTURE(actor_fixture, "sources that failed twice in the call move to the tail") {
  // Priority would always pick a first; after two failures b goes first.
  fake->script("a", {fake_step::http(503, outcome::transient)});
  fake->script("b", {fake_step::http(503, outcome::transient), fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.sources[1].priority = 1;
  sc.max_attempts = 5;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  auto order = fake->sources_called();
  // a, a (twice failed → tail), b (fails once, still ahead), b ok.
  CHECK(order == std::vector<std::string>{"a", "a", "b", "b"});
}

TEST_CASE_FIXTURE(actor_fixture, "round_robin rotates the first candidate") {
  auto gw = spawn_gateway(test_scope({"a", "b", "c"}, "round_robin"));
  std::vector<std::string> sources;
  for (int i = 0; i < 6; ++i) {
    auto out = call(gw, hello());
    REQUIRE(out->response);
    sources.push_back(out->response->source);
  }
  CHECK(sources == std::vector<std::string>{"a", "b", "c", "a", "b", "c"});
}

TEST_CASE_FIXTURE(actor_fixture, "priority picks the lowest PRIORITY, then name") {
  auto sc = test_scope({"a", "b", "c"}, "priority");
  sc.sources[0].priority = 5;
  sc.sources[1].priority = 1;
  sc.sources[2].priority = 1;
  auto gw = spawn_gateway(sc);
  for (int i = 0; i < 3; ++i) {
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
  }
}

TEST_CASE_FIXTURE(actor_fixture, "an attempt that times out fails over") {
  fake->script("a", {fake_step::transient("total_timeout").after(120s)});
  fake->script("b", {fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "priority"));
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  CHECK(detail_of(out->error) == nullptr);
}

TEST_CASE_FIXTURE(actor_fixture, "the call deadline cancels the live attempt") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = hello();
  req.deadline_s = 3.0;
  auto t0 = now();
  auto out = call(gw, req);
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::call_deadline_exceeded);
  CHECK_FALSE(detail(*out).retry_after_s);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].cancelled);
  CHECK(seconds_between(t0, now()) >= 3.0);
  auto st = status(gw);
  CHECK(st.sources[0].in_flight == 0);
  CHECK(st.calls_active == 0);
}

TEST_CASE_FIXTURE(actor_fixture, "a caller's cancel stops the attempt and answers cancelled") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = hello();
  req.call_id = "call-1";
  auto out = start_call(gw, req);
  advance(1s);
  CHECK(out->answers == 0);
  sys.spawn([gw](caf::event_based_actor* self) {
    self->send(gw, atom::cancel_v, std::string{"call-1"});
  });
  settle();
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::cancelled);
  CHECK(fake->calls()[0].cancelled);
  CHECK(status(gw).sources[0].in_flight == 0);
}

TEST_CASE_FIXTURE(actor_fixture, "in-flight returns to zero on every path") {
  fake->script("a", {fake_step::http(503, outcome::transient),
                     fake_step::rate_limited(1.0), fake_step::ok()});
  fake->script("b", {fake_step::http(400, outcome::source_rejected)});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "round_robin"));
  for (int i = 0; i < 4; ++i)
    call(gw, hello());
  auto st = status(gw);
  for (auto& s : st.sources)
    CHECK(s.in_flight == 0);
  CHECK(st.timers_armed == 0);
  CHECK(st.calls_started == 4);
  CHECK(st.calls_ok + st.calls_failed == 4);
  CHECK(st.calls_active == 0);
}

TEST_CASE_FIXTURE(actor_fixture, "a bad request is rejected before anything starts") {
  auto gw = spawn_gateway(test_scope({"a"}));
  chat_request empty;
  auto out = call(gw, empty);
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::invalid_request);
  auto bad_deadline = hello();
  bad_deadline.deadline_s = -1.0;
  out = call(gw, bad_deadline);
  CHECK(code(*out) == error_code::invalid_request);
  CHECK(fake->calls().empty());
}

TEST_CASE_FIXTURE(actor_fixture, "a duplicate call id while the first runs is rejected") {
  fake->script("a", {fake_step::ok().after(10s)});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = hello();
  req.call_id = "same";
  auto first = start_call(gw, req);
  auto second = start_call(gw, req);
  settle();
  REQUIRE(first->answers == 1);
  REQUIRE(second->answers == 1);
  CHECK(first->response);
  CHECK(code(*second) == error_code::invalid_request);
}

TEST_CASE_FIXTURE(actor_fixture, "the stall window ends a call without progress") {
  // The source hangs before its first token; TIMEOUT_S would be 120 s, the
  // stall window is 30 s.
  fake->script("a", {fake_step::never()});
  auto sc = test_scope({"a"});
  sc.stall_window_s = 30;
  auto gw = spawn_gateway(sc);
  auto t0 = now();
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::stalled);
  CHECK(seconds_between(t0, now()) == doctest::Approx(30).epsilon(0.01));
  CHECK(fake->calls()[0].cancelled);
}

TEST_CASE_FIXTURE(actor_fixture, "a streaming answer in progress is not stalled") {
  auto step = fake_step::ok().after(50s);
  step.token_after(1s);
  fake->script("a", {step});
  auto sc = test_scope({"a"});
  sc.stall_window_s = 30;
  sc.stream = true;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->stats.attempts == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "a call's long timers are dropped when it ends") {
  fake->script("a", {fake_step::ok().after(1s)});
  auto sc = test_scope({"a"});
  sc.call_deadline_s = 600;
  auto gw = spawn_gateway(sc);
  auto out = start_call(gw, hello());
  sched.run();
  // Running: a stall-window and a deadline timer are armed.
  CHECK(status(gw).timers_armed == 2);
  advance(2s);
  REQUIRE(out->response);
  // Done: both are gone at once, not 300 or 600 s later.
  CHECK(status(gw).timers_armed == 0);
  CHECK(sched.clock().schedule().size() <= 1);
}

TEST_CASE_FIXTURE(actor_fixture, "a 429 whose Retry-After outlasts the deadline fails at once, saying when") {
  fake->script("a", {fake_step::rate_limited(30.0)});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = hello();
  req.deadline_s = 5;
  auto t0 = now();
  auto out = call(gw, req);
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::quota_exhausted);
  auto detail = detail_of(out->error);
  REQUIRE(detail);
  REQUIRE(detail->retry_after_s);
  CHECK(*detail->retry_after_s == doctest::Approx(30.0).epsilon(0.05));
  CHECK(seconds_between(t0, now()) < 0.01); // was: the whole deadline
  CHECK(fake->calls().size() == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "an admission wait that outlasts the deadline fails at once, one that fits is waited") {
  auto sc = test_scope({"a"});
  sc.sources[0].rpm = 1;
  sc.on_quota_full = refusal_policy::wait;
  auto gw = spawn_gateway(sc);
  REQUIRE(call(gw, hello())->response);
  auto req = hello();
  req.deadline_s = 10;
  auto t0 = now();
  auto out = call(gw, req);
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::quota_exhausted);
  CHECK(describe(out->error).find("before the call's deadline (10 s)")
        != std::string::npos);
  CHECK(seconds_between(t0, now()) < 0.01);
  // With a deadline past the window's end, the call waits and runs.
  req.deadline_s = 120;
  out = call(gw, req);
  REQUIRE(out->answers == 1);
  CHECK(out->response);
  CHECK(seconds_between(t0, now()) > 50);
  CHECK(fake->calls().size() == 2);
}

TEST_CASE_FIXTURE(actor_fixture, "a requester that goes away cancels its call") {
  fake->script("a", {fake_step::never()});
  auto sc = test_scope({"a"});
  sc.sources[0].tpm = 100000;
  sc.sources[0].est_tokens = 100;
  auto gw = spawn_gateway(sc);
  // A requester that asks and then dies before the answer.
  auto requester = sys.spawn([gw](caf::event_based_actor* self) {
    self->request(gw, caf::infinite, atom::chat_v, hello())
      .then([](chat_response&) {}, [](caf::error&) {});
  });
  advance(1s);
  REQUIRE(fake->calls().size() == 1);
  caf::anon_send_exit(requester, caf::exit_reason::user_shutdown);
  sched.run(); // no time passes: the cancel is immediate
  CHECK(fake->calls()[0].cancelled);
  auto st = status(gw);
  CHECK(st.calls_active == 0);
  CHECK(st.sources[0].in_flight == 0);
  CHECK(st.sources[0].limiter.tpm_used == 100); // in flight: est
  CHECK(st.sources[0].limiter.settled == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "gateway timers: a call's retries leave no stale tick in the clock") {
  // Each retry arms a short backoff timer, earlier than the call's stall
  // window. A tick for the window is already on its way (CAF 0.17 cannot
  // take a delayed message back); once the backoff's tick fired, the old
  // code sent another for the window, so every retry left one more delayed
  // message in the clock for up to STALL_WINDOW_S (300 s): memory grew
  // with the retry rate (found by a serve soak against a source that cuts
  // its streams: RSS +5 MB a minute at ~500 retries/s).
  const int failures = 20;
  std::vector<fake_step> steps(failures,
                               fake_step::http(503, outcome::transient));
  steps.push_back(fake_step::ok());
  fake->script("a", steps);
  auto sc = test_scope({"a"});
  sc.max_attempts = failures + 1;
  sc.backoff_base_s = 0.01;
  sc.backoff_max_s = 0.01;
  sc.breaker.threshold = 1000;
  sc.breaker.min_calls = 1000;
  auto gw = spawn_gateway(sc);
  auto pending_before = sched.clock().schedule().size();
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->stats.attempts == failures + 1);
  CHECK(status(gw).timers_armed == 0);
  // What is left is the window's first tick (it comes, finds nothing due
  // and sends no other), not one per retry.
  auto pending = sched.clock().schedule().size() - pending_before;
  CHECK(pending <= 1);
  settle();
  CHECK(sched.clock().schedule().empty());
}
