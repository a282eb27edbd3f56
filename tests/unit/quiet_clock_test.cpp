// The quiet clock (issue 17): an actor that never armed a timeout ends
// without waking CAF's clock thread; timeouts and delayed messages still
// work, and an actor that armed a timeout still has it dropped.

#include "actors/quiet_clock.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "fixtures/eventually.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

using pgw::test::eventually;

namespace {

struct quiet_config : caf::actor_system_config {
  quiet_config() {
    pgw::use_quiet_clock(*this);
    set("scheduler.max-threads", 1);
    set("logger.console-verbosity", caf::atom("quiet"));
  }
};

} // namespace

TEST_CASE("quiet clock: ended actors that armed no timeout are not sent to "
          "the clock thread") {
  quiet_config cfg;
  caf::actor_system sys{cfg};
  auto* clock = pgw::quiet_clock_of(sys);
  REQUIRE(clock != nullptr);
  auto skipped = clock->skipped();
  auto forwarded = clock->forwarded();
  for (int i = 0; i < 10; ++i)
    sys.spawn([](caf::event_based_actor*) {}); // no behaviour: ends at once
  sys.await_all_actors_done();
  // An actor leaves the registry's count before its cleanup reaches the
  // clock: the last `cancel_timeouts` may come just after the await.
  CHECK(eventually([&] { return clock->skipped() >= skipped + 10; }));
  CHECK(clock->forwarded() == forwarded);
}

TEST_CASE("quiet clock: request timeouts, ordinary timeouts and delayed "
          "messages still fire, and an armed actor's timeouts are dropped "
          "when it ends") {
  using namespace std::chrono_literals;
  quiet_config cfg;
  caf::actor_system sys{cfg};
  auto* clock = pgw::quiet_clock_of(sys);
  REQUIRE(clock != nullptr);
  auto forwarded = clock->forwarded();
  // A request to an actor that never answers times out.
  auto silent = sys.spawn([]() -> caf::behavior {
    return {[](int) -> caf::result<int> { return caf::delegated<int>{}; }};
  });
  std::atomic<bool> timed_out{false};
  sys.spawn([silent, &timed_out](caf::event_based_actor* self) {
    self->request(silent, 20ms, 1)
      .then([](int) {}, [self, &timed_out](caf::error&) {
        timed_out = true;
        self->quit();
      });
  });
  // An ordinary (behaviour) timeout and a delayed message.
  std::atomic<bool> after_fired{false}, delayed_fired{false};
  sys.spawn([&after_fired](caf::event_based_actor* self) -> caf::behavior {
    return {caf::after(10ms) >> [self, &after_fired] {
      after_fired = true;
      self->quit();
    }};
  });
  sys.spawn([&delayed_fired](caf::event_based_actor* self) -> caf::behavior {
    self->delayed_send(self, 10ms, 42);
    return {[self, &delayed_fired](int) {
      delayed_fired = true;
      self->quit();
    }};
  });
  {
    caf::scoped_actor self{sys};
    // The three above end; `silent` is stopped.
    for (int i = 0; i < 500 && !(timed_out && after_fired && delayed_fired);
         ++i)
      self->receive(caf::after(10ms) >> [] {});
  }
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
  sys.await_all_actors_done();
  CHECK(timed_out);
  CHECK(after_fired);
  CHECK(delayed_fired);
  // The requester (request timeout) and the `after` actor (ordinary
  // timeout) armed timeouts: their ends went to the clock thread.
  CHECK(eventually([&] { return clock->forwarded() >= forwarded + 2; }));
}
