// Failover conduct and honest errors (issue 12, SPEC §12), on CAF's test
// coordinator with the scriptable fake transport: every 429 cools its source
// down, one time-costly failure demotes a source, errors say why.

#include "actors/selector.hpp"
#include "fixtures/actor_fixture.hpp"

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

const error_detail& detail_or_fail(const call_outcome& out) {
  auto d = detail_of(out.error);
  REQUIRE(d != nullptr);
  return *d;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

fake_step unauthorized() {
  auto s = fake_step::http(401, outcome::source_dead);
  s.result.reason = "unauthorized";
  s.result.error_message = "Incorrect API key provided";
  return s;
}

} // namespace

TEST_CASE("a 429 cools down by Retry-After, else 1 s doubling, capped") {
  CHECK(rate_limit_cooldown_s(1, caf::none, 300) == 1.0);
  CHECK(rate_limit_cooldown_s(2, caf::none, 300) == 2.0);
  CHECK(rate_limit_cooldown_s(4, caf::none, 300) == 8.0);
  CHECK(rate_limit_cooldown_s(10, caf::none, 300) == 300.0);
  CHECK(rate_limit_cooldown_s(1000, caf::none, 300) == 300.0);
  CHECK(rate_limit_cooldown_s(3, 7.0, 300) == 7.0);
  CHECK(rate_limit_cooldown_s(1, 1000.0, 300) == 300.0);
  CHECK(rate_limit_cooldown_s(1, 0.0, 300) == 1.0);
}

TEST_CASE("one time-costly failure demotes a source, fast ones need two") {
  std::vector<size_t> order{0, 1, 2};
  demote_failed(order, {1, 0, 0}, {true, false, false});
  CHECK(order == std::vector<size_t>{1, 2, 0});
  order = {0, 1, 2};
  demote_failed(order, {1, 0, 0}, {false, false, false});
  CHECK(order == std::vector<size_t>{0, 1, 2});
  CHECK(is_costly_failure("total_timeout"));
  CHECK(is_costly_failure("ttft_timeout"));
  CHECK(is_costly_failure("idle_timeout"));
  CHECK(is_costly_failure("connect_timeout"));
  CHECK_FALSE(is_costly_failure("http_503"));
  CHECK_FALSE(is_costly_failure("reset"));
}

TEST_CASE_FIXTURE(actor_fixture, "a persistent 429 without Retry-After fails over at once") {
  fake->script("a", {fake_step::rate_limited(caf::none)});
  fake->script("b", {fake_step::ok()});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.max_attempts = 1;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].source == "a");
  CHECK(seconds_between(calls[0].started, calls[1].started) < 0.01);
  // The next call finds a still cooling (1 s) and goes to b directly.
  auto again = call(gw, hello());
  REQUIRE(again->response);
  CHECK(fake->count("a") == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "one source's 429s without Retry-After wait 1, 2, 4 s, a success resets it") {
  fake->script("a", {fake_step::rate_limited(caf::none),
                     fake_step::rate_limited(caf::none),
                     fake_step::rate_limited(caf::none), fake_step::ok(),
                     fake_step::rate_limited(caf::none), fake_step::ok()});
  auto sc = test_scope({"a"});
  sc.max_attempts = 1;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->response);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 4);
  CHECK(seconds_between(calls[0].started, calls[1].started)
        == doctest::Approx(1.0).epsilon(0.01));
  CHECK(seconds_between(calls[1].started, calls[2].started)
        == doctest::Approx(2.0).epsilon(0.01));
  CHECK(seconds_between(calls[2].started, calls[3].started)
        == doctest::Approx(4.0).epsilon(0.01));
  auto second = call(gw, hello());
  REQUIRE(second->response);
  calls = fake->calls();
  REQUIRE(calls.size() == 6);
  CHECK(seconds_between(calls[4].started, calls[5].started)
        == doctest::Approx(1.0).epsilon(0.01));
}

TEST_CASE_FIXTURE(actor_fixture, "429s of one burst double the cooldown once") {
  // Both calls are admitted before either 429 comes back (100 ms later).
  fake->script("a", {fake_step::rate_limited(caf::none).after(100ms),
                     fake_step::rate_limited(caf::none).after(100ms),
                     fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto first = start_call(gw, hello());
  auto second = start_call(gw, hello());
  run_until_answered(first);
  run_until_answered(second);
  REQUIRE(first->response);
  REQUIRE(second->response);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 4);
  // Both 429s came back together: a cools down 1 s, not 2.
  CHECK(seconds_between(calls[0].started, calls[1].started) < 0.01);
  CHECK(seconds_between(calls[0].started, calls[2].started)
        == doctest::Approx(1.1).epsilon(0.01));
}

TEST_CASE_FIXTURE(actor_fixture, "every source cooling down: ON_QUOTA_FULL=fail fails at once") {
  auto limited = fake_step::rate_limited(caf::none);
  limited.result.error_message = "Rate limit reached for requests";
  fake->script("a", {limited});
  auto sc = test_scope({"a"});
  sc.on_quota_full = refusal_policy::fail;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::quota_exhausted);
  CHECK(fake->count("a") == 1);
  auto& d = detail_or_fail(*out);
  CHECK(d.per_source.at("a") == "cooling");
  // Its line says why it cools: the 429 and what the upstream said.
  CHECK(describe(d.sources)
        == "a: cooling after http_429 (429 \"Rate limit reached for "
           "requests\")");
  REQUIRE(d.retry_after_s);
  CHECK(*d.retry_after_s == doctest::Approx(1.0).epsilon(0.01));
}

TEST_CASE_FIXTURE(actor_fixture, "a time-costly failure demotes its source after one occurrence") {
  auto sc = test_scope({"a", "b"}, "priority");
  sc.max_attempts = 3;
  for (auto reason : {"total_timeout", "ttft_timeout", "idle_timeout",
                      "connect_timeout"}) {
    CAPTURE(reason);
    fake = std::make_shared<fake_transport>();
    fake->script("a", {fake_step::transient(reason).after(30s)});
    fake->script("b", {fake_step::http(503, outcome::transient),
                       fake_step::ok()});
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK(out->response->source == "b");
    // a once, then b twice (its fast failure keeps it ahead of demoted a).
    auto order = fake->sources_called();
    CHECK(order == std::vector<std::string>{"a", "b", "b"});
  }
}

TEST_CASE_FIXTURE(actor_fixture, "a TLS handshake that ran out of CONNECT_TIMEOUT_S demotes at once, a fast one does not") {
  auto sc = test_scope({"a", "b"}, "priority");
  sc.max_attempts = 3;
  for (bool timed_out : {true, false}) {
    CAPTURE(timed_out);
    fake = std::make_shared<fake_transport>();
    auto handshake = fake_step::transient("tls_handshake");
    handshake.result.timed_out = timed_out;
    fake->script("a", {handshake.after(timed_out ? 30s : 10ms), fake_step::ok()});
    fake->script("b", {fake_step::http(503, outcome::transient),
                       fake_step::ok()});
    auto gw = spawn_gateway(sc);
    auto out = call(gw, hello());
    REQUIRE(out->response);
    auto order = fake->sources_called();
    // Timed out: a is demoted after one failure, b answers on its second
    // try. Fast: one failure keeps a first, and a's retry answers.
    CHECK(order
          == (timed_out ? std::vector<std::string>{"a", "b", "b"}
                        : std::vector<std::string>{"a", "a"}));
  }
}

TEST_CASE_FIXTURE(actor_fixture, "a wrong API key says so, and the open circuit says why") {
  fake->script("a", {unauthorized()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto out = call(gw, hello());
  REQUIRE(out->answers == 1);
  auto code = code_of(out->error);
  REQUIRE(code);
  CHECK(is_unavailable_family(*code));
  auto& d = detail_or_fail(*out);
  CHECK(d.message
        == "every source is unusable: a: unauthorized (401 \"Incorrect API "
           "key provided\")");
  CHECK(d.per_source.at("a") == "unauthorized");
  CHECK(d.sources.at("a").http_status == 401);
  CHECK(d.sources.at("a").message == "Incorrect API key provided");
  // Dead for the call: asked once, not retried there.
  CHECK(fake->count("a") == 1);
  auto later = call(gw, hello());
  REQUIRE(later->answers == 1);
  CHECK(code_of(later->error) == error_code::circuit_open);
  auto& d2 = detail_or_fail(*later);
  CHECK(has(d2.message, "a: circuit open, opened after unauthorized 401"));
  CHECK(fake->count("a") == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "retry_exhausted lists each source's last reason and status") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  auto sc = test_scope({"a"});
  sc.max_attempts = 1;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, hello());
  CHECK(code_of(out->error) == error_code::retry_exhausted);
  CHECK(detail_or_fail(*out).message
        == "the only attempt of the retry budget failed: a: http_503 (503)");
}

TEST_CASE_FIXTURE(actor_fixture, "a deadline error lists the sources in flight and what they did") {
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::never().token_after(1s)});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.hedge.after_s = 2.0;
  auto gw = spawn_gateway(sc);
  auto req = hello();
  req.deadline_s = 5.0;
  auto out = call(gw, req);
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::call_deadline_exceeded);
  auto& d = detail_or_fail(*out);
  CHECK(d.per_source.at("a") == "in_flight");
  CHECK(d.sources.at("a").doing == "in flight 5.0 s, no first token");
  CHECK(d.sources.at("b").doing == "in flight 3.0 s, streaming (hedge)");
  CHECK(has(d.message, "the call deadline passed: a: in flight 5.0 s, no "
                       "first token; b: in flight 3.0 s, streaming (hedge)"));
}
