// Structured output through the call path (gateway + call_supervisor +
// attempt on the test coordinator, fake transport, virtual time): re-ask
// with the validator's errors, the re-ask cap, the deadline, the response
// format ladder learned from a 400.

#include "actors/structured_schema.hpp"
#include "actors/telemetry.hpp"
#include "config/pricing.hpp"
#include "fakes/memory_sink.hpp"
#include "fixtures/actor_fixture.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

const std::string person_schema
  = R"({"type":"object","properties":{"name":{"type":"string"},)"
    R"("age":{"type":"integer"}},"required":["name","age"],)"
    R"("additionalProperties":false})";

const std::string valid_person = R"({"name":"Ada","age":36})";
const std::string wrong_person = R"({"name":"Ada","age":"old"})";

chat_request structured(const std::string& schema = person_schema) {
  auto req = hello("who?");
  req.schema = schema;
  return req;
}

struct structured_fixture : actor_fixture {
  std::shared_ptr<memory_sink> sink = std::make_shared<memory_sink>();

  gateway_options with_telemetry() {
    gateway_options opts;
    opts.telemetry = spawn_telemetry(sys, sink);
    return opts;
  }
};

json::object body_of(const fake_call& c) {
  return json::parse(c.body).as_object();
}

std::string format_type(const fake_call& c) {
  auto b = body_of(c);
  auto rf = b.if_contains("response_format");
  return rf ? std::string(rf->at("type").as_string()) : std::string("none");
}

error_code code(const call_outcome& out) {
  auto c = code_of(out.error);
  REQUIRE(c);
  return *c;
}

} // namespace

TEST_CASE_FIXTURE(structured_fixture, "structured: invalid, re-ask with the errors, valid") {
  fake->script("a", {fake_step::ok(wrong_person, 10, 7).after(100ms),
                     fake_step::ok(valid_person, 30, 9).after(300ms)});
  auto opts = with_telemetry();
  auto prices = price_table::parse(
    R"({"models": {"model-a": {"input": 1.0, "output": 2.0}}})");
  REQUIRE(prices);
  opts.prices = std::make_shared<const price_table>(std::move(*prices));
  auto gw = spawn_gateway(test_scope({"a"}), 42, opts);
  auto checked = checked_answer_count();
  auto out = call(gw, structured());
  REQUIRE(out->response);
  // Each answer is validated once, by its attempt: the re-ask's errors and
  // `parsed` come from those checks.
  CHECK(checked_answer_count() - checked == 2);
  auto& r = *out->response;
  CHECK(r.stats.attempts == 2);
  CHECK(r.stats.reasks == 1);
  CHECK_FALSE(r.stats.repaired);
  CHECK(r.stats.generation_ms == doctest::Approx(300)); // the last round's
  CHECK(json::parse(r.parsed) == json::parse(valid_person));
  // The refused round's usage goes with the answer (serve's /metrics counts
  // it as upstream work); the answer's own usage is the last round's.
  CHECK(r.usage.prompt_tokens == 30);
  REQUIRE(r.stats.unreturned.size() == 1);
  CHECK(r.stats.unreturned.at("a").prompt_tokens == 10);
  CHECK(r.stats.unreturned.at("a").completion_tokens == 7);
  // ... priced: 10 input tokens at $1 and 7 output at $2 per million.
  REQUIRE(r.stats.unreturned.at("a").cost_usd);
  CHECK(*r.stats.unreturned.at("a").cost_usd == doctest::Approx(24e-6));
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(format_type(calls[0]) == "json_schema");
  auto msgs = body_of(calls[1]).at("messages").as_array();
  REQUIRE(msgs.size() == 3);
  CHECK(msgs[1].at("role") == "assistant");
  CHECK(msgs[1].at("content").as_string() == wrong_person.c_str());
  CHECK(msgs[2].at("role") == "user");
  std::string feedback{msgs[2].at("content").as_string()};
  CHECK(feedback.find("Validation errors (JSON pointer: message):\n/age: ")
        != std::string::npos);
  check_balanced(status(gw));
  settle();
  // The bad round's row says why, with the first validation error.
  REQUIRE(sink->attempts.size() == 2);
  auto& bad = sink->attempts[0].outcome == "result_invalid" ? sink->attempts[0]
                                                            : sink->attempts[1];
  CHECK(bad.outcome == "result_invalid");
  CHECK(bad.reason == "schema_mismatch");
  CHECK(bad.error_message.rfind("/age: ", 0) == 0);
  CHECK(bad.settled_tokens == 17); // tokens of a bad round are real usage
}

TEST_CASE_FIXTURE(actor_fixture, "structured: a fenced answer is repaired, not re-asked") {
  fake->script("a", {fake_step::ok("Sure:\n```json\n" + valid_person + "\n```")});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto out = call(gw, structured());
  REQUIRE(out->response);
  CHECK(out->response->stats.attempts == 1);
  CHECK(out->response->stats.repaired);
  CHECK(json::parse(out->response->parsed) == json::parse(valid_person));
}

TEST_CASE_FIXTURE(actor_fixture, "structured: invalid MAX_REASKS+1 times is result_invalid") {
  fake->script("a", {fake_step::ok(wrong_person)});
  auto sc = test_scope({"a"});
  sc.max_attempts = 10;
  sc.structured_max_reasks = 2;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, structured());
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::result_invalid);
  CHECK(fake->count("a") == 3);
  auto d = detail_of(out->error);
  REQUIRE(d != nullptr);
  CHECK(d->message.find("after 2 re-asks") != std::string::npos);
  CHECK(d->message.find("/age: ") != std::string::npos);
  // One line: the CLI prints it as one (the errors were on lines of their
  // own).
  CHECK(d->message.find('\n') == std::string::npos);
  CHECK(d->per_source.at("a") == "schema_mismatch");
  // Every refused round was upstream work: the error carries its usage.
  REQUIRE(d->spent.size() == 1);
  CHECK(d->spent.at("a").prompt_tokens == 3 * 10);
  CHECK(d->spent.at("a").completion_tokens == 3 * 5);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "structured: re-asks spend the retry budget") {
  fake->script("a", {fake_step::ok("not json at all")});
  auto sc = test_scope({"a"});
  sc.max_attempts = 2;
  sc.structured_max_reasks = 5;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, structured());
  CHECK(code(*out) == error_code::result_invalid);
  CHECK(fake->count("a") == 2);
}

TEST_CASE_FIXTURE(actor_fixture, "structured: the final re-ask may go to another source") {
  fake->script("a", {fake_step::ok(wrong_person)});
  fake->script("b", {fake_step::ok(valid_person)});
  auto sc = test_scope({"a", "b"}, "priority");
  sc.sources[1].priority = 1;
  auto gw = spawn_gateway(sc);
  auto out = call(gw, structured());
  REQUIRE(out->response);
  CHECK(out->response->source == "b");
  CHECK(fake->count("a") == 2); // failed twice: moved to the tail
  CHECK(out->response->stats.reasks == 2);
}

TEST_CASE_FIXTURE(actor_fixture, "structured: the deadline ends a call during a re-ask") {
  fake->script("a", {fake_step::ok(wrong_person).after(1s),
                     fake_step::ok(valid_person).after(10s)});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = structured();
  req.deadline_s = 5;
  auto t0 = now();
  auto out = call(gw, req);
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::call_deadline_exceeded);
  CHECK(fake->count("a") == 2);
  CHECK(fake->calls()[1].cancelled);
  CHECK(seconds_between(t0, now()) == doctest::Approx(5).epsilon(0.01));
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "structured: an invalid schema is invalid_request before any upstream call") {
  auto gw = spawn_gateway(test_scope({"a"}));
  auto out = call(gw, structured(R"({"type":"object","properties":{"a":{"type":"strng"}}})"));
  REQUIRE(out->answers == 1);
  CHECK(code(*out) == error_code::invalid_request);
  auto d = detail_of(out->error);
  REQUIRE(d != nullptr);
  CHECK(d->message.find("schema /properties/a/type: ") == 0);
  CHECK(fake->calls().empty());
}

TEST_CASE_FIXTURE(actor_fixture, "structured: a source rejecting json_schema is moved down, without budget, and remembered") {
  auto rejected = fake_step::http(400, outcome::request_rejected,
                                  "invalid_request_error");
  rejected.result.error_message = "Invalid parameter: 'response_format' of "
                                  "type 'json_schema' is not supported with "
                                  "this model.";
  fake->script("a", {rejected, fake_step::ok(valid_person)});
  auto sc = test_scope({"a"});
  sc.max_attempts = 1; // a budget unit spent would end the call
  auto gw = spawn_gateway(sc);
  auto out = call(gw, structured());
  REQUIRE(out->response);
  CHECK(out->response->stats.attempts == 2);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(format_type(calls[0]) == "json_schema");
  CHECK(format_type(calls[1]) == "json_object");
  auto st = status(gw);
  CHECK(source(st, "a").structured_rung == "json_object");
  CHECK(source(st, "a").breaker.state == "closed");
  CHECK(source(st, "a").breaker.failure_count == 0);
  // The next call starts at the lower rung.
  auto next = call(gw, structured());
  REQUIRE(next->response);
  CHECK(next->response->stats.attempts == 1);
  CHECK(format_type(fake->calls()[2]) == "json_object");
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "structured: a forced rung is not downgraded") {
  auto rejected = fake_step::http(400, outcome::request_rejected);
  rejected.result.error_message = "response_format is not supported";
  fake->script("a", {rejected, fake_step::ok(valid_person)});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto req = structured();
  req.strategy = schema_strategy::json_schema;
  auto out = call(gw, req);
  CHECK(code(*out) == error_code::request_rejected);
  CHECK(fake->count("a") == 1);
  CHECK(source(status(gw), "a").structured_rung == "json_schema");
}

TEST_CASE_FIXTURE(actor_fixture, "structured: hedging is per round, a mismatched leg waits for the other") {
  auto sc = test_scope({"a", "b"}, "priority");
  sc.sources[1].priority = 1;
  sc.hedge.after_s = 1.0;
  fake->script("a", {fake_step::ok(wrong_person).after(3s)});
  fake->script("b", {fake_step::ok(valid_person).after(4s)});
  auto gw = spawn_gateway(sc);
  auto out = call(gw, structured());
  REQUIRE(out->response);
  auto& r = *out->response;
  CHECK(r.source == "b");
  CHECK(r.stats.hedge_won);
  CHECK(r.stats.attempts == 2);
  CHECK(r.stats.reasks == 0); // the round did not fail: no re-ask
  // Both legs were asked the same messages, each with its own rung.
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(body_of(calls[0]).at("messages") == body_of(calls[1]).at("messages"));
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "structured: an answer with tool calls is returned as it is, the schema is for content") {
  auto step = fake_step::ok("");
  step.result.finish_reason = "tool_calls";
  step.result.tool_calls.push_back({"call_1", "function", "lookup",
                                    R"({"who":"Ada"})"});
  fake->script("a", {step});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto out = call(gw, structured());
  // It was "not valid JSON", re-asked, then result_invalid without them.
  REQUIRE(out->response);
  auto& r = *out->response;
  CHECK(fake->count("a") == 1);
  CHECK(r.stats.attempts == 1);
  CHECK(r.stats.reasks == 0);
  CHECK(r.finish_reason == "tool_calls");
  CHECK(r.content.empty());
  CHECK(r.parsed.empty());
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].name == "lookup");
  CHECK(r.tool_calls[0].arguments == R"({"who":"Ada"})");
  check_balanced(status(gw));
}
