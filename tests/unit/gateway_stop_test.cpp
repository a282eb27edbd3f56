// A gateway told to exit, and the client's callbacks, on the test
// coordinator: every call in flight answers once, its permits settle, and a
// caller's callback that throws breaks only its own call.

#include "actors/client.hpp"
#include "backends/limiter.hpp"
#include "fixtures/actor_fixture.hpp"
#include "fixtures/shared_limiter.hpp"

#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <stdexcept>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

template <class T>
bool ready(std::future<T>& f) {
  return f.wait_for(0s) == std::future_status::ready;
}

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "gateway stop: buffered calls in flight each answer cancelled and settle their permits before the limiters go") {
  auto baseline = sys.registry().running();
  fake->script("a", {fake_step::never(), fake_step::never(),
                     fake_step::never()});
  auto sc = test_scope({"a"});
  std::shared_ptr<limiter_backend> counts
    = make_memory_limiter(limits_of(sc.sources[0]));
  gateway_options opts;
  opts.make_limiter = [counts](const scope_config&, const source_config&) {
    return std::make_unique<shared_limiter>(counts);
  };
  auto gw = spawn_gateway(sc, 42, opts);
  {
    client cl{sys, gw};
    auto async = cl.chat_async(hello());
    std::promise<caf::expected<chat_response>> then_answer;
    int then_calls = 0;
    cl.chat_then(hello(), [&](caf::expected<chat_response> r) {
      ++then_calls;
      then_answer.set_value(std::move(r));
    });
    auto raw = start_call(gw, hello()); // an actor's request
    advance(500ms);
    REQUIRE(fake->calls().size() == 3);
    REQUIRE_FALSE(ready(async));
    caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
    sched.run(); // no virtual time passes: the cancels alone end the calls
    REQUIRE(ready(async));
    auto a = async.get();
    REQUIRE_FALSE(a);
    CHECK(code_of(a.error()) == error_code::cancelled);
    auto then_future = then_answer.get_future();
    REQUIRE(ready(then_future));
    CHECK(code_of(then_future.get().error()) == error_code::cancelled);
    CHECK(then_calls == 1);
    CHECK(raw->answers == 1);
    CHECK(code_of(raw->error) == error_code::cancelled);
    for (auto& call : fake->calls())
      CHECK(call.cancelled);
    // A call asked of the stopped gateway is answered too, in pgw's terms.
    auto late = cl.chat_async(hello());
    settle();
    REQUIRE(ready(late));
    auto l = late.get();
    REQUIRE_FALSE(l);
    CHECK(code_of(l.error()) == error_code::cancelled);
  }
  settle();
  auto st = counts->status(0);
  REQUIRE(st);
  CHECK(st->acquired == 3);
  CHECK(st->settled == 3);
  CHECK(st->released == 3);
  CHECK(st->in_flight == 0);
  CHECK(sys.registry().running() == baseline);
}

TEST_CASE_FIXTURE(actor_fixture, "gateway stop: a second exit ends the wait at once") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(test_scope({"a"}));
  auto raw = start_call(gw, hello());
  advance(100ms);
  // The first exit is held (the call still runs, say); the second one, as
  // the grace's end sends, answers what is left and quits.
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  settle();
  CHECK(raw->answers == 1);
  CHECK(code_of(raw->error) == error_code::cancelled);
}

TEST_CASE_FIXTURE(actor_fixture, "client: a chat_then callback that throws breaks only its own call") {
  fake->script("a", {fake_step::ok("one"), fake_step::ok("two").after(1s),
                     fake_step::ok("three")});
  auto gw = spawn_gateway(test_scope({"a"}));
  client cl{sys, gw};
  auto slow = cl.chat_async(hello());
  cl.chat_then(hello(), [](caf::expected<chat_response>) {
    throw std::runtime_error("callback failed");
  });
  settle();
  REQUIRE(ready(slow));
  auto first = slow.get();
  REQUIRE(first);
  // The client still works: its requester outlived the callback.
  auto after = cl.chat_async(hello());
  settle();
  REQUIRE(ready(after));
  CHECK(after.get());
}

TEST_CASE_FIXTURE(actor_fixture, "client: an on_delta that throws cancels its live call: upstream closed, permit settled, the result says why") {
  auto step = fake_step::streamed({"p", "q", "r", "s"}, 100ms, 100ms);
  step.hang = true;
  fake->script("a", {step});
  auto sc = test_scope({"a"});
  sc.stream = true;
  auto gw = spawn_gateway(sc);
  client cl{sys, gw};
  int deltas = 0;
  auto call = cl.chat_stream(hello(), [&](const stream_delta&) {
    if (++deltas == 2)
      throw std::runtime_error("sink failed");
  });
  advance(1s);
  settle();
  REQUIRE(call.result().wait_for(0s) == std::future_status::ready);
  auto result = call.wait();
  REQUIRE_FALSE(result);
  CHECK(code_of(result.error()) == error_code::cancelled);
  CHECK(describe(result.error()).find("on_delta threw: sink failed")
        != std::string::npos);
  auto again = call.wait(); // the same answer (was: std::future_error)
  REQUIRE_FALSE(again);
  CHECK(describe(again.error()) == describe(result.error()));
  CHECK(deltas == 2);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].cancelled);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(actor_fixture, "client: a cancel right after chat_async reaches the call") {
  fake->script("a", {fake_step::never(), fake_step::never()});
  auto gw = spawn_gateway(test_scope({"a"}));
  client cl{sys, gw};
  auto req = hello();
  req.call_id = "call-1";
  auto pending = cl.chat_async(req);
  cl.cancel("call-1"); // before the requester has run at all
  sched.run();
  REQUIRE(ready(pending));
  auto res = pending.get();
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == error_code::cancelled);
  check_balanced(status(gw));
}
