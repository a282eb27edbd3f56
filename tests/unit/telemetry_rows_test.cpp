// Telemetry rows from the call path (SPEC §10): one attempt row per attempt,
// one call row per call, exactly one terminal_failure row per failed call,
// labels, settled tokens and costs — against an in-memory sink.

#include "actors/accounting.hpp"
#include "actors/telemetry.hpp"
#include "fakes/memory_sink.hpp"
#include "fixtures/actor_fixture.hpp"

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

struct telemetry_fixture : actor_fixture {
  std::shared_ptr<memory_sink> sink = std::make_shared<memory_sink>();
  telemetry_actor tel = spawn_telemetry(sys, sink);

  gateway_options options() {
    gateway_options opts;
    opts.telemetry = tel;
    auto prices = price_table::parse(R"({"models": {
      "model-a": {"input": 1.0, "output": 2.0},
      "model-b": {"input": 10.0, "output": 20.0}}})");
    REQUIRE(prices);
    opts.prices = std::make_shared<const price_table>(*prices);
    opts.wall_offset_ms = 1e12;
    return opts;
  }

  size_t rows_for(const std::string& call_id) {
    size_t n = 0;
    for (auto& r : sink->attempts)
      n += r.call_id == call_id;
    return n;
  }
};

const attempt_row& row_of(const std::vector<attempt_row>& rows,
                          const std::string& source) {
  for (auto& r : rows)
    if (r.source == source)
      return r;
  FAIL("no row for " << source);
  return rows.front();
}

} // namespace

TEST_CASE_FIXTURE(telemetry_fixture, "telemetry: a success writes one attempt row and one call row with its cost") {
  fake->script("a", {fake_step::ok("answer", 1000, 500).after(200ms)});
  auto sc = test_scope({"a"});
  sc.sources[0].tpm = 1000000;
  auto gw = spawn_gateway(sc, 42, options());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  sched.run();
  REQUIRE(sink->attempts.size() == 1);
  REQUIRE(sink->calls.size() == 1);
  CHECK(sink->failures.empty());
  auto& a = sink->attempts[0];
  CHECK(a.call_id == out->response->call_id);
  CHECK(a.attempt == 1);
  CHECK(a.scope == "LLM");
  CHECK(a.source == "a");
  CHECK(a.request_model == "model-a");
  CHECK(a.outcome == "ok");
  CHECK(a.operation == "chat");
  CHECK(a.input_tokens == 1000);
  CHECK(a.output_tokens == 500);
  CHECK(a.usage_source == "reported");
  CHECK(a.settled_tokens == 1500);
  CHECK(a.generation_ms == doctest::Approx(200));
  CHECK(a.latency_ms == doctest::Approx(200));
  CHECK(a.started_at_ms > 1e12);
  REQUIRE(a.cost_usd);
  // 1000 × $1/M + 500 × $2/M
  CHECK(*a.cost_usd == doctest::Approx(0.002));
  auto& c = sink->calls[0];
  CHECK(c.outcome == "ok");
  CHECK(c.attempts == 1);
  CHECK(c.source == "a");
  REQUIRE(c.cost_usd);
  CHECK(*c.cost_usd == doctest::Approx(0.002));
  CHECK(c.losers_cost_usd == 0);
  REQUIRE(out->response->stats.cost_usd);
  CHECK(*out->response->stats.cost_usd == doctest::Approx(0.002));
  // The limiter's view equals the row's settled tokens.
  CHECK(status(gw).sources[0].limiter.tpm_used == a.settled_tokens);
  // Prompts and answers are not stored unless opted in.
  CHECK(a.content.empty());
  CHECK(c.prompt.empty());
}

TEST_CASE_FIXTURE(telemetry_fixture, "telemetry: failover writes a row per attempt, a failed call has exactly one terminal_failure row") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  fake->script("b", {fake_step::ok("b", 10, 10)});
  auto gw = spawn_gateway(test_scope({"a", "b"}, "round_robin"), 42,
                          options());
  auto ok = call(gw, hello());
  REQUIRE(ok->response);
  auto sc = test_scope({"a"});
  sc.max_attempts = 2;
  auto gw2 = spawn_gateway(sc, 43, options()); // another seed: other call ids
  auto failed = call(gw2, hello());
  REQUIRE_FALSE(failed->response);
  sched.run();
  CHECK(rows_for(ok->response->call_id) == 2);
  CHECK(ok->response->stats.attempts == 2);
  auto failed_id = detail_of(failed->error)->call_id;
  CHECK(rows_for(failed_id) == 2);
  REQUIRE(sink->failures.size() == 1);
  auto& f = sink->failures[0];
  CHECK(f.call_id == failed_id);
  CHECK(f.error_code == "retry_exhausted");
  CHECK(f.per_source_json == R"({"a":"http_503"})");
  REQUIRE(sink->calls.size() == 2);
  CHECK(sink->calls[1].outcome == "retry_exhausted");
  for (auto& r : sink->attempts)
    if (r.outcome == "transient") {
      CHECK(r.http_status == 503);
      CHECK(r.reason == "http_503");
    }
}

TEST_CASE_FIXTURE(telemetry_fixture, "telemetry: a hedge loser is labelled hedge_cancelled, settled at est and priced as losers' cost") {
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::ok("b", 100, 100).after(100ms)});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.sources[1].priority = 1;
  sc.hedge.after_s = 1.0;
  for (auto& src : sc.sources) {
    src.tpm = 1000000;
    src.est_tokens = 1000;
  }
  auto gw = spawn_gateway(sc, 42, options());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  sched.run();
  REQUIRE(sink->attempts.size() == 2);
  auto& loser = row_of(sink->attempts, "a");
  auto& winner = row_of(sink->attempts, "b");
  CHECK(loser.outcome == "hedge_cancelled");
  CHECK_FALSE(loser.is_hedge);
  CHECK(loser.settled_tokens == 1000);
  REQUIRE(loser.cost_usd);
  CHECK(*loser.cost_usd == doctest::Approx(1000 * 2.0 / 1e6).scale(0));
  CHECK(winner.outcome == "ok");
  CHECK(winner.is_hedge);
  auto& c = sink->calls[0];
  CHECK(c.hedges == 1);
  CHECK(c.hedge_won);
  CHECK(*c.cost_usd
        == doctest::Approx(100 * 10.0 / 1e6 + 100 * 20.0 / 1e6).scale(0));
  CHECK(c.losers_cost_usd == doctest::Approx(0.002));
  CHECK(status(gw).sources[0].limiter.tpm_used == loser.settled_tokens);
}

TEST_CASE_FIXTURE(telemetry_fixture, "telemetry: a deadline labels the live attempt cancelled") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(test_scope({"a"}), 42, options());
  auto req = hello();
  req.deadline_s = 2;
  auto out = call(gw, req);
  REQUIRE_FALSE(out->response);
  sched.run();
  REQUIRE(sink->attempts.size() == 1);
  CHECK(sink->attempts[0].outcome == "cancelled");
  CHECK(sink->attempts[0].latency_ms == doctest::Approx(2000));
  REQUIRE(sink->failures.size() == 1);
  CHECK(sink->failures[0].error_code == "call_deadline_exceeded");
}

TEST_CASE_FIXTURE(telemetry_fixture, "telemetry: prompts and answers are stored only when opted in") {
  fake->script("a", {fake_step::ok("the answer")});
  auto opts = options();
  opts.telemetry_content = true;
  auto gw = spawn_gateway(test_scope({"a"}), 42, opts);
  REQUIRE(call(gw, hello("the question"))->response);
  sched.run();
  CHECK(sink->attempts[0].content == "the answer");
  CHECK(sink->calls[0].prompt == "the question");
}

TEST_CASE_FIXTURE(telemetry_fixture, "telemetry: absurd usage from an upstream is counted as rejected and the estimate settled (SPEC 12)") {
  auto step = fake_step::ok("hi", 0, 0);
  step.result.usage_reported = false;
  step.result.usage_rejected = true;
  fake->script("a", {step});
  auto sc = test_scope({"a"});
  sc.sources[0].est_tokens = 700;
  auto gw = spawn_gateway(sc, 42, options());
  auto out = call(gw, hello());
  REQUIRE(out->response);
  sched.run();
  REQUIRE(sink->attempts.size() == 1);
  CHECK(sink->attempts[0].usage_source == "rejected");
  CHECK(sink->attempts[0].settled_tokens == 700);
}

TEST_CASE("telemetry: a stream_interrupted call row is its committed "
          "source's, with the usage reported so far") {
  error_detail d;
  d.message = "the stream from source a broke after it began";
  d.stream_source = "a";
  d.stream_reason = "stream_cut";
  d.usage_reported = true;
  d.prompt_tokens = 3;
  d.completion_tokens = 4;
  call_row row;
  auto f = fail_call(row, make_error(error_code::stream_interrupted, d));
  CHECK(row.outcome == "stream_interrupted");
  CHECK(row.source == "a");
  CHECK(row.input_tokens == 3);
  CHECK(row.output_tokens == 4);
  CHECK(f.error_code == "stream_interrupted");
  // Without reported usage the tokens stay 0; another failure has no source.
  d.usage_reported = false;
  call_row unknown;
  fail_call(unknown, make_error(error_code::stream_interrupted, d));
  CHECK(unknown.source == "a");
  CHECK(unknown.input_tokens == 0);
  call_row exhausted;
  fail_call(exhausted, make_error(error_code::retry_exhausted, "all failed"));
  CHECK(exhausted.source.empty());
}
