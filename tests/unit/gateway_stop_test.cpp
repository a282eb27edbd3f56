// A gateway told to exit, and the client's callbacks, on the test
// coordinator: every call in flight answers once, its permits settle (a
// call that does not end is stopped when the grace ends), and a caller's
// callback that throws breaks only its own call.

#include "actors/client.hpp"
#include "backends/limiter.hpp"
#include "backends/governance.hpp"
#include "fixtures/actor_fixture.hpp"
#include "fixtures/shared_limiter.hpp"
#include "fixtures/side_call_fixture.hpp"

#include <doctest/doctest.h>

#include <future>
#include <memory>
#include <stdexcept>
#include <vector>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

template <class T>
bool ready(std::future<T>& f) {
  return f.wait_for(0s) == std::future_status::ready;
}

/// `acquired` permits were taken from `counts`, each settled and released.
void check_given_back(limiter_backend& counts, uint64_t acquired) {
  auto st = counts.status(0);
  REQUIRE(st);
  CHECK(st->acquired == acquired);
  CHECK(st->settled == acquired);
  CHECK(st->released == acquired);
  CHECK(st->in_flight == 0);
}

/// A governance pair over a memory limiter (its breaker always lets in)
/// whose admissions after the first `answered` never answer, as a stalled
/// Redis: they stay in `held` (and take no permit). Attempt ends go through
/// at once.
class stalling_pair : public governance_pair {
public:
  stalling_pair(std::shared_ptr<limiter_backend> lim, int answered)
    : lim_(std::move(lim)), answered_(answered) {
    // nop
  }

  std::vector<admission_fn> held;

  bool pipelined() const override {
    return true;
  }

  caf::expected<admission> enter_and_acquire(int64_t est,
                                             double now_s) override {
    breaker_entry entry;
    entry.allowed = true;
    auto r = lim_->try_acquire(est, now_s);
    if (!r)
      return r.error();
    return admission{entry, *r};
  }

  caf::expected<std::pair<bool, bool>>
  finish(uint64_t, breaker_feed, const std::string& permit_id, int64_t actual,
         double now_s) override {
    return lim_->settle_and_release(permit_id, actual, now_s);
  }

  void enter_and_acquire_async(int64_t est, double now_s,
                               admission_fn done) override {
    if (answered_-- > 0)
      return done(enter_and_acquire(est, now_s));
    held.push_back(std::move(done));
  }

private:
  std::shared_ptr<limiter_backend> lim_;
  int answered_;
};

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
  check_given_back(*counts, 3);
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

TEST_CASE_FIXTURE(side_call_fixture, "gateway stop: a call that does not end on cancel is stopped when the grace ends, and its caller answered cancelled once") {
  // Two sub-batches of one input each: the first admitted and sent, the
  // second's admission stalled. On cancel the embedding call settles the
  // first and waits for the second's admission: it cannot end.
  auto baseline = sys.registry().running();
  fake->script("a", {fake_step::never()});
  auto sc = test_scope({"a"});
  sc.batch_concurrency = 2;
  auto& src = sc.sources[0];
  src.kind = source_kind::embedding;
  src.max_batch_inputs = 1;
  std::shared_ptr<limiter_backend> counts
    = make_memory_limiter(limits_of(src));
  auto pair = std::make_shared<stalling_pair>(counts, 1);
  gateway_options opts;
  opts.make_limiter = [counts](const scope_config&, const source_config&) {
    return std::make_unique<shared_limiter>(counts);
  };
  opts.make_governance_pair = [pair](const scope_config&,
                                     const source_config&) { return pair; };
  auto gw = spawn_gateway(sc, 42, opts);
  embed_request req;
  req.inputs = {"1", "2"};
  auto out = start_side<embed_response>(gw, atom::embed_v, req);
  advance(100ms);
  REQUIRE(fake->calls().size() == 1);
  REQUIRE(pair->held.size() == 1);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  advance(4900ms);
  CHECK(fake->calls()[0].cancelled);
  CHECK(out->answers == 0);
  CHECK(sys.registry().running() > baseline); // the gateway waits
  advance(200ms); // past stop_grace (5 s)
  CHECK(out->answers == 1);
  CHECK(code_of(out->error) == error_code::cancelled);
  CHECK(describe(out->error).find("the gateway shut down")
        != std::string::npos);
  CHECK(sys.registry().running() == baseline); // the gateway and its actors
  check_given_back(*counts, 1);
  // (When the grace never ends, this lets the actor system shut down.)
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  settle();
  CHECK(out->answers == 1);
  pair->held.clear(); // each holds the limiter actor
}

TEST_CASE_FIXTURE(side_call_fixture, "gateway: an embedding call that ends without answering (killed) still answers its caller once, internal") {
  // A call actor cannot trap exit_reason::kill: it quits without answering
  // its start request, and only the gateway's down handler is left to
  // answer the caller.
  fake->script("a", {fake_step::never()});
  auto sc = test_scope({"a"});
  sc.sources[0].kind = source_kind::embedding;
  auto gw = spawn_gateway(sc, 42);
  embed_request req;
  req.inputs = {"1"};
  auto out = start_side<embed_response>(gw, atom::embed_v, req);
  advance(100ms);
  REQUIRE(fake->calls().size() == 1);
  auto call = caf::actor_cast<caf::actor>(fake->calls()[0].sink);
  REQUIRE(call);
  caf::anon_send_exit(call, caf::exit_reason::kill);
  settle();
  CHECK(out->answers == 1);
  CHECK(code_of(out->error) == error_code::internal);
  CHECK(describe(out->error).find("call ended without an answer")
        != std::string::npos);
  // The gateway no longer counts it live.
  auto st = status(gw);
  CHECK(st.calls_active == 0);
  CHECK(st.calls_failed == 1);
  // The gateway still holds the handler of the request the call never
  // answered (and through it itself): it ends when told to.
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  settle();
  CHECK(out->answers == 1);
}
