#include "actors/timer_table.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include <doctest/doctest.h>

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
  t.arm(o.a, uint64_t{1} << 56, t0 + 5s);
  CHECK(t.size() == 1);
  REQUIRE(t.next());
  CHECK(*t.next() == t0 + 5s);
  CHECK(t.take_due(t0 + 4s).empty());
  auto due = t.take_due(t0 + 5s);
  REQUIRE(due.size() == 1);
  CHECK(due[0].tag == uint64_t{1} << 56);
  CHECK(t.size() == 0);
  CHECK_FALSE(t.next());
}

TEST_CASE("timer_table: arming a kind again replaces it, other kinds stay") {
  owners o;
  auto& owner = o.a;
  timer_table t;
  timer_table::time_point t0{};
  t.arm(o.b, uint64_t{1} << 56, t0 + 40s);
  auto stall = uint64_t{1} << 56;
  auto deadline = uint64_t{2} << 56;
  t.arm(owner, stall, t0 + 10s);
  t.arm(owner, deadline, t0 + 20s);
  t.arm(owner, stall | 7, t0 + 30s);
  CHECK(t.size() == 3);
  auto due = t.take_due(t0 + 25s);
  REQUIRE(due.size() == 1);
  CHECK(due[0].tag == deadline);
  due = t.take_due(t0 + 30s);
  REQUIRE(due.size() == 1);
  CHECK(due[0].tag == (stall | 7));
}

TEST_CASE("timer_table: drop removes every timer of an owner") {
  owners o;
  timer_table t;
  timer_table::time_point t0{};
  t.arm(o.a, uint64_t{1} << 56, t0 + 1s);
  t.arm(o.a, uint64_t{2} << 56, t0 + 2s);
  t.arm(o.b, uint64_t{1} << 56, t0 + 3s);
  t.drop(caf::actor_cast<caf::actor_addr>(o.a));
  CHECK(t.size() == 1);
  auto due = t.take_due(t0 + 1h);
  REQUIRE(due.size() == 1);
  CHECK(due[0].owner == o.b);
}
