#include "actors/timer_table.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace pgw;
using namespace std::chrono_literals;

namespace {

/// Two real actor handles to own timers.
struct owners {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::strong_actor_ptr a = caf::actor_cast<caf::strong_actor_ptr>(
    sys.spawn([](caf::event_based_actor*) {}));
  caf::strong_actor_ptr b = caf::actor_cast<caf::strong_actor_ptr>(
    sys.spawn([](caf::event_based_actor*) {}));
};

} // namespace

TEST_CASE("timer_table: due timers come out earliest first, once") {
  owners o;
  timer_table t;
  timer_table::time_point t0{};
  t.arm(o.a, timer_kind::stall, 0, t0 + 5s);
  CHECK(t.size() == 1);
  REQUIRE(t.next());
  CHECK(*t.next() == t0 + 5s);
  CHECK(t.take_due(t0 + 4s).empty());
  auto due = t.take_due(t0 + 5s);
  REQUIRE(due.size() == 1);
  CHECK(due[0].kind == timer_kind::stall);
  CHECK(t.size() == 0);
  CHECK_FALSE(t.next());
}

TEST_CASE("timer_table: timers add up and come back with their kind and id") {
  // Like delayed messages: a hedge round arms one timer per extra leg, and
  // the owner tells a stale one by its id.
  owners o;
  auto& owner = o.a;
  timer_table t;
  timer_table::time_point t0{};
  t.arm(o.b, timer_kind::stall, 0, t0 + 40s);
  t.arm(owner, timer_kind::hedge, 3, t0 + 10s);
  t.arm(owner, timer_kind::deadline, 0, t0 + 20s);
  t.arm(owner, timer_kind::hedge, 3, t0 + 30s);
  t.arm(owner, timer_kind::retry, 7, t0 + 30s);
  CHECK(t.size() == 5);
  auto due = t.take_due(t0 + 25s);
  REQUIRE(due.size() == 2);
  CHECK(due[0].kind == timer_kind::hedge);
  CHECK(due[0].id == 3);
  CHECK(due[1].kind == timer_kind::deadline);
  due = t.take_due(t0 + 30s);
  REQUIRE(due.size() == 2); // same time: in the order armed
  CHECK(due[0].kind == timer_kind::hedge);
  CHECK(due[1].kind == timer_kind::retry);
  CHECK(due[1].id == 7);
  CHECK(std::string{to_string(due[1].kind)} == "retry");
}

TEST_CASE("timer_table: drop removes every timer of an owner") {
  owners o;
  timer_table t;
  timer_table::time_point t0{};
  t.arm(o.a, timer_kind::stall, 0, t0 + 1s);
  t.arm(o.a, timer_kind::retry, 1, t0 + 2s);
  t.arm(o.b, timer_kind::stall, 0, t0 + 3s);
  t.drop(caf::actor_cast<caf::actor_addr>(o.a));
  CHECK(t.size() == 1);
  auto due = t.take_due(t0 + 1h);
  REQUIRE(due.size() == 1);
  CHECK(due[0].owner == o.b);
}
