// Live streaming (issue 13, SPEC §12) on the test coordinator: a call with a
// stream sink commits at the first token; before the commit failover and
// hedging are invisible, after it a failure is one `stream_interrupted`.

#include "actors/client.hpp"
#include "fixtures/actor_fixture.hpp"

#include <doctest/doctest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

/// What a live call's sink and requester saw, in arrival order.
struct live_outcome {
  std::vector<stream_delta> deltas;
  /// Terminal events received by the sink (must end up exactly 1).
  int terminals = 0;
  /// Deltas that arrived after the terminal event (must stay 0).
  int deltas_after_terminal = 0;
  caf::optional<chat_response> response;
  caf::error error;
  int answers = 0; ///< responses to the request itself

  std::string text() const {
    std::string out;
    for (auto& d : deltas)
      out += d.content;
    return out;
  }
};

/// Starts a live call whose requester is also its sink.
std::shared_ptr<live_outcome> start_live(actor_fixture& fx, gateway_actor gw,
                                         chat_request req) {
  auto out = std::make_shared<live_outcome>();
  fx.sys.spawn([gw, req, out](caf::event_based_actor* self) -> caf::behavior {
    self->request(gw, caf::infinite, atom::chat_v, req,
                  caf::actor_cast<caf::actor>(self))
      .then([out](chat_response&) { ++out->answers; },
            [out](caf::error&) { ++out->answers; });
    return {
      [out](atom::delta, stream_delta& d) {
        if (out->terminals > 0)
          ++out->deltas_after_terminal;
        out->deltas.push_back(std::move(d));
      },
      [out](atom::stream_end, chat_response& r) {
        ++out->terminals;
        out->response = std::move(r);
      },
      [out](atom::stream_end, caf::error& e) {
        ++out->terminals;
        out->error = std::move(e);
      },
    };
  });
  fx.sched.run();
  return out;
}

std::shared_ptr<live_outcome> live_call_to_end(actor_fixture& fx,
                                               gateway_actor gw,
                                               chat_request req) {
  auto out = start_live(fx, gw, std::move(req));
  fx.settle();
  return out;
}

/// Two streaming sources a (primary: lower PRIORITY) and b.
scope_config streaming(bool hedge) {
  auto sc = test_scope({"a", "b"}, "priority");
  sc.sources[1].priority = 1;
  sc.stream = true;
  if (hedge)
    sc.hedge.after_s = 1.0;
  return sc;
}

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "live stream: with hedging the first leg to produce a token is committed, the other is stopped hedge_cancelled") {
  SUBCASE("the hedge produces the first token") {
    // a is silent until 3 s; the hedge b starts at 1 s and streams at 1.2 s.
    fake->script("a", {fake_step::streamed({"A1", "A2"}, 3s, 100ms)});
    fake->script("b", {fake_step::streamed({"B1", "B2", "B3"}, 200ms, 100ms)});
    auto gw = spawn_gateway(streaming(true));
    auto out = live_call_to_end(*this, gw, hello());
    REQUIRE(out->terminals == 1);
    REQUIRE(out->response);
    CHECK(out->text() == "B1B2B3");
    REQUIRE_FALSE(out->deltas.empty());
    CHECK(out->deltas.front().source == "b");
    CHECK(out->response->content == "B1B2B3");
    CHECK(out->response->source == "b");
    CHECK(out->response->stats.hedges == 1);
    CHECK(out->deltas_after_terminal == 0);
    CHECK(out->answers == 1);
    auto calls = fake->calls();
    REQUIRE(calls.size() == 2);
    CHECK(calls[0].source == "a");
    CHECK(calls[0].forward_deltas);
    CHECK(calls[0].cancelled); // the primary's connection was closed
    CHECK_FALSE(calls[1].cancelled);
    auto st = status(gw);
    CHECK(source(st, "a").outcomes.at("hedge_cancelled") == 1);
    CHECK(source(st, "a").outcomes.count("cancelled") == 0);
    // Stopped at the commit (1.2 s), not when b finished (1.5 s): a was
    // settled then, and its breaker heard nothing.
    CHECK(source(st, "a").breaker.window_attempts == 0);
    check_balanced(st);
  }
  SUBCASE("the primary produces the first token after the hedge started") {
    fake->script("a", {fake_step::streamed({"A1", "A2"}, 1500ms, 100ms)});
    fake->script("b", {fake_step::streamed({"B1"}, 800ms, 100ms)});
    auto gw = spawn_gateway(streaming(true));
    auto out = live_call_to_end(*this, gw, hello());
    REQUIRE(out->response);
    CHECK(out->text() == "A1A2");
    CHECK(out->deltas.front().source == "a");
    CHECK(out->response->stats.hedges == 1);
    CHECK_FALSE(out->response->stats.hedge_won);
    auto calls = fake->calls();
    REQUIRE(calls.size() == 2);
    CHECK(calls[1].source == "b");
    CHECK(calls[1].cancelled);
    auto st = status(gw);
    CHECK(source(st, "b").outcomes.at("hedge_cancelled") == 1);
    check_balanced(st);
  }
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: a cut after the commit ends with exactly one stream_interrupted and no further content") {
  fake->script("a", {fake_step::streamed({"x", "yz"}, 100ms, 100ms).cut()});
  fake->script("b", {fake_step::streamed({"never", "sent"}, 100ms, 100ms)});
  auto gw = spawn_gateway(streaming(false));
  auto out = live_call_to_end(*this, gw, hello());
  CHECK(out->text() == "xyz");
  REQUIRE(out->terminals == 1);
  CHECK_FALSE(out->response);
  CHECK(code_of(out->error) == error_code::stream_interrupted);
  auto d = detail_of(out->error);
  REQUIRE(d != nullptr);
  CHECK(d->stream_source == "a");
  CHECK(d->stream_reason == "stream_cut");
  CHECK(d->streamed_bytes == 3);
  CHECK(d->message.find("source a") != std::string::npos);
  CHECK(out->deltas_after_terminal == 0);
  CHECK(out->answers == 1);
  // No other source was asked to continue the answer.
  CHECK(fake->count("b") == 0);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: buffered mode fails over transparently on the same fault") {
  fake->script("a", {fake_step::streamed({"x", "yz"}, 100ms, 100ms).cut()});
  fake->script("b", {fake_step::streamed({"whole", " answer"}, 100ms, 100ms)});
  auto gw = spawn_gateway(streaming(false));
  auto out = call(gw, hello());
  REQUIRE(out->response);
  CHECK(out->response->content == "whole answer");
  CHECK(out->response->source == "b");
  CHECK(out->response->stats.attempts >= 2); // a (cut) was retried, then b
  for (auto& c : fake->calls())
    CHECK_FALSE(c.forward_deltas);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: a failure before the first token fails over invisibly") {
  fake->script("a", {fake_step::http(503, outcome::transient).after(50ms)});
  fake->script("b", {fake_step::streamed({"from ", "b"}, 100ms, 100ms)});
  auto gw = spawn_gateway(streaming(false));
  auto out = live_call_to_end(*this, gw, hello());
  REQUIRE(out->response);
  CHECK(out->text() == "from b");
  CHECK(out->deltas.front().source == "b");
  CHECK(out->terminals == 1);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: the deadline after the commit is stream_interrupted, a cancel stays cancelled") {
  SUBCASE("deadline") {
    fake->script("a", {fake_step::streamed({"p", "q", "r"}, 100ms, 1s)});
    auto gw = spawn_gateway(streaming(false));
    auto req = hello();
    req.deadline_s = 1.5;
    auto out = live_call_to_end(*this, gw, req);
    CHECK(out->text() == "pq");
    REQUIRE(out->terminals == 1);
    CHECK(code_of(out->error) == error_code::stream_interrupted);
    REQUIRE(detail_of(out->error) != nullptr);
    CHECK(detail_of(out->error)->stream_reason == "call_deadline_exceeded");
    CHECK(out->deltas_after_terminal == 0);
    check_balanced(status(gw));
  }
  SUBCASE("cancel") {
    fake->script("a", {fake_step::streamed({"p", "q", "r"}, 100ms, 1s)});
    auto gw = spawn_gateway(streaming(false));
    auto req = hello();
    req.call_id = "c1";
    auto out = start_live(*this, gw, req);
    advance(500ms);
    caf::anon_send(gw, atom::cancel_v, std::string{"c1"});
    settle();
    REQUIRE(out->terminals == 1);
    CHECK(code_of(out->error) == error_code::cancelled);
    CHECK(out->text() == "p");
    check_balanced(status(gw));
  }
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: an answer that never streamed reaches the sink as one delta") {
  auto sc = streaming(false);
  sc.stream = false;
  fake->script("a", {fake_step::ok("all at once").after(200ms)});
  auto gw = spawn_gateway(sc);
  auto out = live_call_to_end(*this, gw, hello());
  REQUIRE(out->response);
  REQUIRE(out->deltas.size() == 1);
  CHECK(out->deltas[0].content == "all at once");
  CHECK(out->deltas[0].source == "a");
  CHECK(out->terminals == 1);
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: a hedge's whole answer and another leg's first token in the same instant are never spliced") {
  // a (primary) stays silent; hedge b (1 s) answers in one piece, without
  // a first token, at 2.5 s; hedge c (2 s) streams its first token at
  // 2.5 s too. b's answer reaches the call first, its decision waits
  // behind c's first token and delta (a primary success at that instant
  // would win, SPEC 9).
  auto sc = test_scope({"a", "b", "c"}, "priority");
  sc.sources[1].priority = 1;
  sc.sources[2].priority = 2;
  sc.stream = true;
  sc.hedge.after_s = 1.0;
  sc.hedge.max_extra = 2;
  fake->script("a", {fake_step::never()});
  fake->script("b", {fake_step::ok("B whole").after(1500ms)});
  fake->script("c", {fake_step::streamed({"C1", "C2"}, 500ms, 100ms)});
  auto gw = spawn_gateway(sc);
  auto out = start_live(*this, gw, hello());
  advance(1s);
  advance(1s);
  REQUIRE(fake->calls().size() == 3);
  advance(500ms); // b's done and c's first token in one instant
  settle();
  REQUIRE(out->terminals == 1);
  REQUIRE(out->response);
  // One source from the first delta to the terminal event.
  REQUIRE_FALSE(out->deltas.empty());
  CHECK(out->deltas.front().source == out->response->source);
  CHECK(out->text() == out->response->content);
  CHECK(out->response->source == "b");
  CHECK(out->deltas_after_terminal == 0);
  CHECK(out->answers == 1);
  auto st = status(gw);
  CHECK(source(st, "c").outcomes.at("hedge_cancelled") == 1);
  check_balanced(st);
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: a refused request still gets its terminal event") {
  auto gw = spawn_gateway(streaming(false));
  chat_request empty;
  auto out = live_call_to_end(*this, gw, empty);
  CHECK(out->terminals == 1);
  CHECK(code_of(out->error) == error_code::invalid_request);
  CHECK(fake->calls().empty());
}

TEST_CASE("live stream: client::chat_stream calls back per delta, and destroying the handle cancels the call") {
  // A threaded system: the client blocks on futures, which the test
  // coordinator cannot drive. The fake's delays are short real times.
  caf::actor_system_config cfg;
  pgw::add_message_types(cfg);
  caf::actor_system sys{cfg};
  auto fake = std::make_shared<fake_transport>();
  auto step = fake_step::streamed({"one", "two"}, 10ms, 10ms);
  step.hang = true; // streams, then never finishes
  fake->script("a", {step});
  auto sc = test_scope({"a"});
  sc.stream = true;
  auto gw = pgw::spawn_gateway(sys, std::make_shared<const scope_config>(sc),
                               std::static_pointer_cast<transport>(fake),
                               gateway_options{});
  client cl{sys, gw};
  std::mutex mtx;
  std::condition_variable cv;
  std::string text;
  {
    auto call = cl.chat_stream(hello(), [&](const stream_delta& d) {
      std::lock_guard<std::mutex> guard{mtx};
      text += d.content;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock{mtx};
    CHECK(cv.wait_for(lock, 10s, [&] { return text == "onetwo"; }));
    CHECK(call.result().wait_for(0s) == std::future_status::timeout);
  } // destroyed: the call is cancelled
  bool cancelled = false;
  for (int i = 0; i < 1000 && !cancelled; ++i) {
    auto calls = fake->calls();
    cancelled = !calls.empty() && calls[0].cancelled;
    if (!cancelled)
      std::this_thread::sleep_for(5ms);
  }
  CHECK(cancelled);
  caf::expected<gateway_status> st{caf::error{}};
  for (int i = 0; i < 1000; ++i) {
    st = cl.status();
    if (st && source(*st, "a").in_flight == 0)
      break;
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(st);
  CHECK(source(*st, "a").outcomes.at("cancelled") == 1);
  check_balanced(*st);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: chat_stream's cancel answers only once the upstream call is closed, and the gateway's shutdown then leaves no actor") {
  // The CLI's Ctrl-C: cancel, wait for the result, then shut the gateway
  // down. A result set before the call stopped let that shutdown overtake
  // the cancel and leave the call (supervisor, attempt) running forever.
  auto baseline = sys.registry().running();
  auto step = fake_step::streamed({"p", "q"}, 100ms, 100ms);
  step.hang = true; // streams, then never finishes (the simulator's stall)
  fake->script("a", {step});
  auto gw = spawn_gateway(streaming(false));
  {
    client cl{sys, gw};
    std::string text;
    auto call = cl.chat_stream(hello(), [&text](const stream_delta& d) {
      text += d.content;
    });
    advance(500ms);
    REQUIRE(text == "pq");
    call.cancel();
    bool ready = false;
    bool closed_when_ready = false;
    while (!ready && sched.try_run_once()) {
      ready = call.result().wait_for(0s) == std::future_status::ready;
      closed_when_ready = ready && !fake->calls().empty()
                          && fake->calls()[0].cancelled;
    }
    REQUIRE(ready);
    CHECK(closed_when_ready);
    auto result = call.wait();
    REQUIRE_FALSE(result);
    CHECK(code_of(result.error()) == error_code::cancelled);
    auto st = status(gw);
    CHECK(source(st, "a").outcomes.at("cancelled") == 1);
    check_balanced(st);
    caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  }
  settle();
  CHECK(sys.registry().running() == baseline);
}

TEST_CASE_FIXTURE(actor_fixture, "live stream: a gateway shut down while a live call runs stops the call: cancelled, upstream closed, no actor left") {
  // The shutdown reaches the gateway before it hears that the requester
  // went away: the gateway itself must stop its calls.
  auto baseline = sys.registry().running();
  auto step = fake_step::streamed({"p", "q"}, 100ms, 100ms);
  step.hang = true;
  fake->script("a", {step});
  auto gw = spawn_gateway(streaming(false));
  {
    client cl{sys, gw};
    auto call = cl.chat_stream(hello(), {});
    advance(500ms);
    call.cancel();
    caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
    settle();
    REQUIRE(call.result().wait_for(0s) == std::future_status::ready);
    auto result = call.wait();
    REQUIRE_FALSE(result);
    CHECK(code_of(result.error()) == error_code::cancelled);
    auto calls = fake->calls();
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].cancelled);
  }
  settle();
  CHECK(sys.registry().running() == baseline);
}
