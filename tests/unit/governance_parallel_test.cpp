// Admission with the memory backends (issue 17): the breaker's `enter` and
// the limiter's `acquire` are asked at once while the breaker was last seen
// closed (once seen open, one after the other: governance_actor_test's "an
// open circuit is skipped").

#include "fixtures/actor_fixture.hpp"

#include <caf/local_actor.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace pgw;
using namespace pgw::test;

namespace {

/// Runs the call one message at a time until its attempt reaches the
/// transport, and tells whether a breaker and a limiter ever had a message
/// waiting at the same time meanwhile (asked in parallel).
bool asked_at_once(actor_fixture& fx, gateway_actor gw) {
  auto out = std::make_shared<call_outcome>();
  auto before = fx.fake->calls().size();
  fx.sys.spawn([gw, out](caf::event_based_actor* self) {
    self->request(gw, caf::infinite, atom::chat_v, hello())
      .then([out](chat_response&) { ++out->answers; },
            [out](caf::error&) { ++out->answers; });
  });
  bool both = false;
  while (fx.fake->calls().size() == before && fx.sched.try_run_once()) {
    bool limiter = false, breaker = false;
    for (auto* job : fx.sched.jobs) {
      auto* a = dynamic_cast<caf::local_actor*>(job);
      if (a == nullptr)
        continue;
      limiter = limiter || std::string{a->name()} == "limiter";
      breaker = breaker || std::string{a->name()} == "breaker";
    }
    both = both || (limiter && breaker);
  }
  fx.run_until_answered(out);
  CHECK(out->answers == 1);
  return both;
}

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "memory governance: enter and acquire are "
                                 "asked at once while the breaker is closed") {
  fake->script("a", {fake_step::ok(), fake_step::ok()});
  auto gw = spawn_gateway(test_scope({"a"}));
  CHECK(asked_at_once(*this, gw));
  CHECK(asked_at_once(*this, gw));
  settle();
  auto st = status(gw);
  CHECK(source(st, "a").limiter.acquired == 2);
  check_balanced(st);
}
