/// The embedding call actor on the test coordinator with the fake transport.

#include "actors/client.hpp"
#include "fakes/memory_sink.hpp"
#include "fixtures/side_call_fixture.hpp"

#include <boost/json.hpp>

#include <set>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

using embed_outcome = side_outcome<embed_response>;

/// An OK answer with one vector per input: [value of the input, 0.5, ...]
/// of length `dim`; 2 tokens per input, or no usage when `!usage`.
fake_step embed_ok(size_t dim = 3, bool usage = true) {
  fake_step s = fake_step::ok("", 0, 0);
  s.respond = [dim, usage](const std::string& body, attempt_result& res) {
    auto req = boost::json::parse(body).as_object();
    boost::json::array data;
    auto& input = req.at("input").as_array();
    for (size_t i = 0; i < input.size(); ++i) {
      boost::json::array vec;
      vec.emplace_back(std::stod(std::string(input[i].as_string())));
      for (size_t k = 1; k < dim; ++k)
        vec.emplace_back(0.5);
      data.emplace_back(boost::json::object{{"object", "embedding"},
                                            {"index", i},
                                            {"embedding", std::move(vec)}});
    }
    boost::json::object out{{"object", "list"},
                            {"data", std::move(data)},
                            {"model", req.at("model")},
                            {"usage",
                             {{"prompt_tokens", 2 * input.size()},
                              {"total_tokens", 2 * input.size()}}}};
    if (!usage) {
      out.erase("usage");
      res.usage_reported = false; // as the transport's fresh result
    }
    res.content = boost::json::serialize(out);
  };
  return s;
}

/// The transport's answer to a request of more than `fits` inputs (all of
/// them when 0): over MAX_RESPONSE_BYTES; smaller ones as `embed_ok`.
fake_step embed_fits(size_t fits) {
  auto s = embed_ok();
  auto ok = s.respond;
  s.respond = [ok, fits](const std::string& body, attempt_result& res) {
    auto n = boost::json::parse(body).at("input").as_array().size();
    if (fits != 0 && n <= fits)
      return ok(body, res);
    res.kind = outcome::source_rejected;
    res.reason = reason_response_too_large;
    res.content.clear();
  };
  return s;
}

std::vector<std::string> numbers(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(std::to_string(i));
  return out;
}

/// An embedding scope; every source takes at most `per_batch` inputs.
scope_config embed_scope(const std::vector<std::string>& names,
                         int64_t per_batch, int64_t concurrency = 4,
                         const std::string& selector = "round_robin") {
  auto sc = test_scope(names, selector);
  sc.name = "EMBED";
  sc.batch_concurrency = concurrency;
  for (auto& src : sc.sources) {
    src.scope = "EMBED";
    src.kind = source_kind::embedding;
    src.max_batch_inputs = per_batch;
    src.model = "emb";
  }
  return sc;
}

struct embed_fixture : side_call_fixture {
  std::shared_ptr<embed_outcome> start_embed(gateway_actor gw,
                                             embed_request req) {
    return start_side<embed_response>(gw, atom::embed_v, std::move(req));
  }

  std::shared_ptr<embed_outcome> embed(gateway_actor gw,
                                       std::vector<std::string> inputs) {
    embed_request req;
    req.inputs = std::move(inputs);
    auto out = start_embed(gw, std::move(req));
    run_until(out);
    return out;
  }

  /// Inputs of each upstream request, in start order.
  std::vector<std::vector<std::string>> bodies() {
    std::vector<std::vector<std::string>> out;
    for (auto& c : fake->calls()) {
      std::vector<std::string> in;
      auto body = boost::json::parse(c.body).as_object();
      for (auto& x : body.at("input").as_array())
        in.emplace_back(x.as_string());
      out.push_back(std::move(in));
    }
    return out;
  }
};

/// Vector i starts with the value of input i.
void check_order(const embed_response& resp, size_t n) {
  REQUIRE(resp.vectors.size() == n);
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    REQUIRE(!resp.vectors[i].empty());
    CHECK(resp.vectors[i][0] == static_cast<float>(i));
  }
}

} // namespace

TEST_CASE_FIXTURE(embed_fixture, "embed: split by count, order kept") {
  fake->script("a", {embed_ok()});
  auto gw = spawn_gateway(embed_scope({"a"}, 2));
  auto out = embed(gw, numbers(5));
  REQUIRE(out->response);
  check_order(*out->response, 5);
  CHECK(out->response->sub_batches == 3);
  auto b = bodies();
  REQUIRE(b.size() == 3);
  for (auto& c : fake->calls())
    CHECK(c.kind == upstream_kind::embeddings);
  CHECK(b[0] == std::vector<std::string>{"0", "1"});
  CHECK(b[2] == std::vector<std::string>{"4"});
  settle();
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(embed_fixture, "embed: split by estimated tokens") {
  fake->script("a", {embed_ok()});
  auto sc = embed_scope({"a"}, 2048);
  sc.sources[0].max_batch_tokens = 2; // one-character inputs: 1 token each
  auto gw = spawn_gateway(sc);
  auto out = embed(gw, numbers(5));
  REQUIRE(out->response);
  check_order(*out->response, 5);
  CHECK(fake->calls().size() == 3);
  // Each sub-batch reserved its own estimate, then settled its usage.
  auto st = status(gw);
  CHECK(source(st, "a").limiter.acquired == 3);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: sub-batches on two sources keep input order") {
  // b answers faster than a: results come back out of order.
  fake->script("a", {embed_ok().after(300ms)});
  fake->script("b", {embed_ok().after(100ms)});
  auto gw = spawn_gateway(embed_scope({"a", "b"}, 3));
  auto out = embed(gw, numbers(12));
  REQUIRE(out->response);
  check_order(*out->response, 12);
  CHECK(fake->count("a") == 2);
  CHECK(fake->count("b") == 2);
  CHECK(out->response->stats.source.find(',') != std::string::npos);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: only the failed sub-batch is retried, usage and "
                  "generation_ms summed") {
  auto fail = fake_step::http(503, outcome::transient).after(100ms);
  fake->script("a", {embed_ok().after(100ms), fail, embed_ok().after(100ms)});
  auto gw = spawn_gateway(embed_scope({"a"}, 2, 1));
  auto out = embed(gw, numbers(6));
  REQUIRE(out->response);
  check_order(*out->response, 6);
  auto b = bodies();
  REQUIRE(b.size() == 4);
  // The third sub-batch runs while the second waits out its backoff; then
  // the second, alone, again.
  CHECK(b[1] == std::vector<std::string>{"2", "3"});
  CHECK(b[2] == std::vector<std::string>{"4", "5"});
  CHECK(b[3] == b[1]);
  auto& stats = out->response->stats;
  CHECK(stats.attempts == 4);
  CHECK(stats.prompt_tokens == 12);
  CHECK(stats.usage_source == "reported");
  CHECK(stats.generation_ms == doctest::Approx(300));
  CHECK_FALSE(stats.cost_usd); // no prices
  settle();
  auto st = status(gw);
  check_balanced(st);
  // Settled: usage of the three good sub-batches, the estimate (2 tokens)
  // of the failed one.
  CHECK(source(st, "a").limiter.tpm_used == 12 + 2);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: the error names each source's last failure, with "
                  "its status and what the upstream said") {
  // a answers 401 (its circuit opens: later admissions skip it as
  // circuit_open), b 503 until the budget is spent. The lines keep the
  // failures, not the skip: "circuit_open" alone hid the 401.
  auto unauthorized = fake_step::http(401, outcome::source_dead, "unauthorized");
  unauthorized.result.error_message = "Incorrect API key";
  auto down = fake_step::http(503, outcome::transient);
  down.result.error_message = "overloaded";
  fake->script("a", {unauthorized});
  fake->script("b", {down, down, down});
  auto sc = embed_scope({"a", "b"}, 2, 1, "priority");
  sc.backoff_base_s = 0.01;
  auto gw = spawn_gateway(sc);
  auto out = embed(gw, numbers(2));
  REQUIRE(out->error);
  auto d = detail_of(out->error);
  REQUIRE(d);
  REQUIRE(d->sources.count("a") == 1);
  CHECK(d->sources.at("a").http_status == 401);
  CHECK(d->sources.at("a").message == "Incorrect API key");
  REQUIRE(d->sources.count("b") == 1);
  CHECK(d->sources.at("b").http_status == 503);
  CHECK(describe(d->sources)
        == "a: unauthorized (401 \"Incorrect API key\"); b: http_503 (503 "
           "\"overloaded\")");
  settle();
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: one deadline for the call, earlier permits "
                  "settled") {
  fake->script("a", {embed_ok().after(1s)});
  auto sc = embed_scope({"a"}, 2, 1);
  sc.call_deadline_s = 2.5;
  auto gw = spawn_gateway(sc);
  auto out = embed(gw, numbers(8));
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::call_deadline_exceeded);
  CHECK(fake->calls().size() == 3);
  CHECK(fake->calls()[2].cancelled);
  settle();
  auto st = status(gw);
  check_balanced(st);
  // Two sub-batches settled their usage (4 each), the third — cancelled
  // after sending — its estimate (2); the fourth never ran.
  CHECK(source(st, "a").limiter.tpm_used == 4 + 4 + 2);
  CHECK(source(st, "a").limiter.acquired == 3);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: cancellation settles the estimate of what was "
                  "sent (S7), 0 for a request that had not left (SPEC §8)") {
  // The first sub-batch's request is out; the second's too, or still
  // connecting.
  bool second_sent = true;
  SUBCASE("both out") {
    fake->script("a", {fake_step::never()});
  }
  SUBCASE("the second connecting") {
    fake->script("a", {fake_step::never(), fake_step::connecting()});
    second_sent = false;
  }
  auto sc = embed_scope({"a"}, 2, 4);
  sc.sources[0].max_batch_tokens = 1000;
  auto gw = spawn_gateway(sc);
  embed_request req;
  req.call_id = "emb-1";
  req.inputs = {std::string(40, 'x'), std::string(40, 'y'), "z"};
  auto out = start_embed(gw, req);
  sched.run();
  CHECK(fake->calls().size() == 2);
  CHECK(out->answers == 0);
  CHECK(status(gw).calls_active == 1);
  caf::anon_send(gw, atom::cancel_v, std::string{"emb-1"});
  sched.run();
  REQUIRE(out->answers == 1);
  CHECK(code_of(out->error) == error_code::cancelled);
  settle();
  auto st = status(gw);
  check_balanced(st);
  // Estimates: 11 + 11 for the first sub-batch, 1 for the second.
  CHECK(source(st, "a").limiter.tpm_used == (second_sent ? 23 : 22));
  CHECK(source(st, "a").outcomes.at("cancelled") == 2);
  CHECK(st.calls_active == 0);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: a caller that goes away cancels the call") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(embed_scope({"a"}, 2, 4));
  embed_request req;
  req.inputs = numbers(2);
  auto caller = sys.spawn([gw, req](caf::event_based_actor* self) {
    self->request(gw, caf::infinite, atom::embed_v, req)
      .then([](embed_response&) {}, [](caf::error&) {});
  });
  sched.run();
  REQUIRE(fake->calls().size() == 1);
  caf::anon_send_exit(caller, caf::exit_reason::kill);
  settle();
  CHECK(fake->calls()[0].cancelled);
  auto st = status(gw);
  check_balanced(st);
  CHECK(source(st, "a").limiter.tpm_used == 2); // the estimate: it was sent
  CHECK(st.calls_failed == 1);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: a different vector length is result_invalid, "
                  "retried elsewhere") {
  fake->script("a", {embed_ok(3)});
  fake->script("b", {embed_ok(5)});
  auto gw = spawn_gateway(embed_scope({"a", "b"}, 1, 1));
  auto out = embed(gw, numbers(3));
  REQUIRE(out->response);
  check_order(*out->response, 3);
  for (auto& v : out->response->vectors)
    CHECK(v.size() == 3);
  auto st = status(gw);
  CHECK(source(st, "b").outcomes.at("result_invalid") >= 1);
  CHECK(source(st, "b").outcomes.count("ok") == 0);
  // b is excluded for the sub-batch it failed: a runs it.
  CHECK(fake->count("a") == 3);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: empty input answers at once, no admission") {
  auto sc = embed_scope({"a"}, 2);
  sc.call_deadline_s = 1;
  auto gw = spawn_gateway(sc);
  embed_request req;
  auto out = start_embed(gw, req);
  sched.run();
  REQUIRE(out->response);
  CHECK(out->response->vectors.empty());
  CHECK(fake->calls().empty());
  auto st = status(gw);
  CHECK(source(st, "a").limiter.acquired == 0);
  CHECK(st.calls_started == 0);
}

TEST_CASE_FIXTURE(embed_fixture, "embed: bad requests are invalid_request") {
  auto gw = spawn_gateway(embed_scope({"a"}, 2));
  auto out = embed(gw, {"1", ""});
  CHECK(code_of(out->error) == error_code::invalid_request);
  // Bytes that are not UTF-8 would make the upstream body invalid JSON.
  auto bytes = embed(gw, {"ok", "ok \xff\xfe bad"});
  CHECK(code_of(bytes->error) == error_code::invalid_request);
  CHECK(detail_of(bytes->error)->message
        == "input 1: not valid UTF-8 at byte offset 3");
  auto chat_gw = spawn_gateway(test_scope({"c"}));
  auto wrong = embed(chat_gw, {"1"});
  CHECK(code_of(wrong->error) == error_code::invalid_request);
  // And chat calls on an embedding scope.
  auto chat = call(gw, hello());
  CHECK(code_of(chat->error) == error_code::invalid_request);
  CHECK(detail_of(chat->error)->message
        == "scope EMBED serves KIND=embedding, not chat");
  CHECK(fake->calls().empty());
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: every source rejecting a sub-batch is "
                  "request_rejected") {
  fake->script("a", {fake_step::http(400, outcome::request_rejected)});
  fake->script("b", {fake_step::http(400, outcome::request_rejected)});
  auto gw = spawn_gateway(embed_scope({"a", "b"}, 2, 1));
  auto out = embed(gw, numbers(2));
  CHECK(code_of(out->error) == error_code::request_rejected);
  CHECK(fake->calls().size() == 2); // each source once, no budget spent
  settle();
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: every source redirecting a sub-batch is "
                  "result_invalid, not the caller's request_rejected") {
  fake->script("a", {fake_step::unusable(302, "redirect")});
  fake->script("b", {fake_step::unusable(302, "redirect")});
  auto gw = spawn_gateway(embed_scope({"a", "b"}, 2, 1));
  auto out = embed(gw, numbers(2));
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::result_invalid);
  CHECK(detail_of(out->error)->message
        == "no source gave a usable answer: a: redirect (302); "
           "b: redirect (302)");
  CHECK(fake->calls().size() == 2);
  settle();
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(embed_fixture, "embeddings never change the health EWMA") {
  auto sc = embed_scope({"a", "b"}, 1, 1, "health_aware");
  sc.max_attempts = 10;
  fake->script("a", {fake_step::transient("reset"), embed_ok()});
  fake->script("b", {fake_step::transient("reset"), embed_ok()});
  auto gw = spawn_gateway(sc);
  auto out = embed(gw, numbers(4));
  REQUIRE(out->response);
  auto st = status(gw);
  CHECK(source(st, "a").outcomes.at("transient") == 1);
  CHECK(source(st, "b").outcomes.at("transient") == 1);
  CHECK(source(st, "a").ewma == 1.0);
  CHECK(source(st, "b").ewma == 1.0);
  // The same report from a chat attempt does move it.
  attempt_report rep;
  rep.source = "a";
  rep.kind = outcome::transient;
  caf::anon_send(gw, atom::report_v, rep);
  sched.run();
  CHECK(source(status(gw), "a").ewma < 1.0);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: cost_usd sums the sub-batches' input tokens") {
  fake->script("a", {embed_ok()});
  gateway_options opts;
  auto prices = price_table::parse(
    R"({"models": {"emb": {"input": 2.0, "output": 9.0}}})");
  REQUIRE(prices);
  opts.prices = std::make_shared<const price_table>(std::move(*prices));
  auto gw = spawn_gateway(embed_scope({"a"}, 2), 42, opts);
  auto out = embed(gw, numbers(5));
  REQUIRE(out->response);
  // 3 sub-batches, 2 tokens per input: 10 input tokens at $2 per million.
  REQUIRE(out->response->stats.cost_usd);
  CHECK(*out->response->stats.cost_usd
        == doctest::Approx(10 * 2.0 / 1e6).scale(0));
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: each sub-batch request writes an attempt row, "
                  "operation embeddings") {
  fake->script("a", {fake_step::http(503, outcome::transient), embed_ok(),
                     embed_ok()});
  auto sink = std::make_shared<memory_sink>();
  gateway_options opts;
  opts.telemetry = spawn_telemetry(sys, sink);
  auto sc = embed_scope({"a"}, 2, 1);
  sc.backoff_base_s = 0.01;
  auto gw = spawn_gateway(sc, 42, opts);
  auto out = embed(gw, numbers(3));
  REQUIRE(out->response);
  settle();
  // One sub-batch fails once and is retried; the other runs once.
  REQUIRE(sink->attempts.size() == 3);
  std::multiset<std::string> outcomes;
  std::set<uint64_t> numbers_seen;
  int64_t tokens = 0;
  for (auto& r : sink->attempts) {
    CAPTURE(r.attempt);
    CHECK(r.operation == "embeddings");
    CHECK(r.scope == "EMBED");
    CHECK(r.source == "a");
    CHECK(r.call_id == out->response->call_id);
    outcomes.insert(r.outcome);
    numbers_seen.insert(r.attempt);
    if (r.outcome == "ok") {
      CHECK(r.settled_tokens == r.input_tokens);
      tokens += r.input_tokens;
    } else {
      CHECK(r.http_status == 503);
    }
  }
  CHECK(outcomes == std::multiset<std::string>{"ok", "ok", "transient"});
  CHECK(numbers_seen == std::set<uint64_t>{1, 2, 3});
  CHECK(tokens == 6); // 3 inputs, 2 tokens each
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: a call pinned to one source runs every sub-batch "
                  "there, split by that source's batch limit") {
  fake->script("a", {embed_ok()});
  fake->script("b", {fake_step::transient("http_503"), embed_ok()});
  auto sc = embed_scope({"a", "b"}, 2);
  sc.sources[1].max_batch_inputs = 5;
  sc.backoff_base_s = 0.01;
  auto gw = spawn_gateway(sc);
  embed_request req;
  req.inputs = numbers(10);
  req.source = "b";
  auto out = start_embed(gw, std::move(req));
  run_until(out);
  REQUIRE(out->response);
  check_order(*out->response, 10);
  // b's limit (5), not the scope's smallest (2); the failed sub-batch is
  // retried on b again, never on a.
  CHECK(out->response->sub_batches == 2);
  CHECK(fake->count("a") == 0);
  CHECK(fake->count("b") == 3);
  for (auto& body : bodies())
    CHECK(body.size() == 5);
  CHECK(out->response->stats.source == "b");
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: a pinned source the scope does not have is "
                  "invalid_request, nothing sent") {
  fake->script("a", {embed_ok()});
  auto gw = spawn_gateway(embed_scope({"a"}, 2));
  embed_request req;
  req.inputs = numbers(3);
  req.source = "zz";
  auto out = start_embed(gw, std::move(req));
  run_until(out);
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::invalid_request);
  CHECK(describe(out->error).find("source 'zz' is not in scope EMBED")
        != std::string::npos);
  CHECK(fake->calls().empty());
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: the deadline timer is armed at the gateway and "
                  "dropped when the call ends") {
  fake->script("a", {embed_ok().after(1s)});
  auto sc = embed_scope({"a"}, 8, 1);
  sc.call_deadline_s = 600;
  auto gw = spawn_gateway(sc);
  embed_request req;
  req.inputs = numbers(8);
  auto out = start_embed(gw, std::move(req));
  CHECK(status(gw).timers_armed == 1);
  run_until(out);
  REQUIRE(out->response);
  CHECK(status(gw).timers_armed == 0);
  CHECK(sched.clock().schedule().size() <= 1); // the gateway's next tick
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: a sub-batch whose answer is over MAX_RESPONSE_BYTES "
                  "is halved until it fits, no budget spent, order kept") {
  fake->script("a", {embed_fits(2)});
  auto sc = embed_scope({"a"}, 8, 1);
  sc.max_attempts = 1; // a halving must not spend it
  auto gw = spawn_gateway(sc);
  auto out = embed(gw, numbers(8));
  INFO(describe(out->error));
  REQUIRE(out->response);
  check_order(*out->response, 8);
  // 8 (too large), 0..3 (too large), 0..1, 4..7 (too large), 4..5, 2..3,
  // 6..7: each half keeps its place, the other goes last.
  std::vector<size_t> sizes;
  for (auto& b : bodies())
    sizes.push_back(b.size());
  CHECK(sizes == std::vector<size_t>{8, 4, 2, 4, 2, 2, 2});
  CHECK(out->response->sub_batches == 4);
  CHECK(out->response->stats.prompt_tokens == 16);
  CHECK(out->response->stats.source == "a");
  settle();
  auto st = status(gw);
  check_balanced(st);
  CHECK(source(st, "a").outcomes.at("source_rejected") == 3);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: an answer over MAX_RESPONSE_BYTES even for one "
                  "input is result_invalid naming the key to raise, not the "
                  "caller's request_rejected") {
  fake->script("a", {embed_fits(0)});
  fake->script("b", {embed_fits(0)});
  auto gw = spawn_gateway(embed_scope({"a", "b"}, 4, 1, "priority"));
  auto out = embed(gw, numbers(2));
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::result_invalid);
  auto d = detail_of(out->error);
  REQUIRE(d);
  CAPTURE(d->message);
  CHECK(d->message.find("is larger than EMBED__GENERIC__") != std::string::npos);
  CHECK(d->message.find("for a single input: raise EMBED__GENERIC__")
        != std::string::npos);
  // Both inputs on a, halved; the first half on a, then on b: no source
  // left, the call ends before the second half runs.
  CHECK(fake->calls().size() == 3);
  settle();
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(embed_fixture,
                  "embed: without reported usage the answer reports the "
                  "settled estimate, usage_source unavailable, no cost") {
  fake->script("a", {embed_ok(3, false), embed_ok()});
  gateway_options opts;
  auto prices = price_table::parse(
    R"({"models": {"emb": {"input": 2.0, "output": 9.0}}})");
  REQUIRE(prices);
  opts.prices = std::make_shared<const price_table>(std::move(*prices));
  auto sc = embed_scope({"a"}, 2, 1);
  auto gw = spawn_gateway(sc, 42, opts);
  embed_request req;
  // Estimates: 40 bytes → 11 tokens, 1 byte → 1 token; then 2 + 2 reported.
  req.inputs = {std::string(39, '0') + "1", "2", "3", "4"};
  auto out = start_embed(gw, std::move(req));
  run_until(out);
  REQUIRE(out->response);
  auto& stats = out->response->stats;
  CHECK(stats.prompt_tokens == 12 + 4);
  CHECK(stats.usage_source == "unavailable");
  CHECK_FALSE(stats.cost_usd);
  settle();
  auto st = status(gw);
  check_balanced(st);
  CHECK(source(st, "a").limiter.tpm_used == stats.prompt_tokens);
}

TEST_CASE_FIXTURE(embed_fixture,
                  "client: a cancel right after embed_async reaches the call") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(embed_scope({"a"}, 2, 4));
  client cl{sys, gw};
  embed_request req;
  req.inputs = numbers(2);
  req.call_id = "embed-1";
  auto pending = cl.embed_async(req);
  cl.cancel("embed-1"); // before anything has run: it used to overtake
  check_cancelled(pending);
  check_balanced(status(gw));
}
