// The soak's permit invariants (permits_ended, node_permit_invariants): they
// read this node's own permits (the limiter actor's own_* counts), never the
// backend's counters, which a Redis namespace shares with the other nodes
// of a fleet and with earlier runs. A lease that expired ends its permit, a
// permit neither released nor expired is a leak, and a limiter that cannot
// be read makes the invariants unknown rather than held or broken.

#include "apps/harness/soak.hpp"
#include "backends/memory/limiter.hpp"

#include "fixtures/actor_fixture.hpp"
#include "fixtures/shared_limiter.hpp"

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using pgw::cli::node_permit_invariants;
using pgw::cli::permits_ended;

namespace {

/// The node's own figures of one limiter.
limiter_status own(uint64_t acquired, uint64_t settled, uint64_t released,
                   uint64_t expired) {
  limiter_status st;
  st.own_acquired = acquired;
  st.own_settled = settled;
  st.own_released = released;
  st.own_expired = expired;
  return st;
}

} // namespace

TEST_CASE("soak permits: a permit whose lease expired has ended, settled "
          "late or never") {
  CHECK(permits_ended(own(3, 3, 3, 0)));
  // One settled after its lease ran out, one never settled: both expired.
  CHECK(permits_ended(own(3, 2, 1, 2)));
  CHECK(permits_ended(own(3, 1, 1, 2)));
  // The backend's counters (other nodes' permits) do not count.
  auto st = own(2, 2, 2, 0);
  st.acquired = 10;
  st.released = 3;
  st.in_flight = 7;
  CHECK(permits_ended(st));
}

TEST_CASE("soak permits: a permit neither released nor expired is a leak") {
  CHECK_FALSE(permits_ended(own(2, 2, 1, 0))); // still held
  // Beside an expired lease, a leaked permit still shows.
  CHECK_FALSE(permits_ended(own(3, 2, 1, 1)));
  // Released but never settled, no lease expired: a settle leaked.
  CHECK_FALSE(permits_ended(own(2, 1, 2, 0)));
  // A settle or release still pending (the backend down) has not ended.
  auto st = own(2, 2, 2, 0);
  st.own_pending = 1;
  CHECK_FALSE(permits_ended(st));
  st.own_pending = 0;
  st.unavailable = "redis down";
  CHECK_FALSE(permits_ended(st));
}

TEST_CASE("soak permits: an unreadable limiter makes the invariants "
          "unknown, naming why") {
  gateway_status st;
  source_status a, b;
  a.name = "a";
  a.limiter = own(4, 4, 4, 0);
  b.name = "b";
  b.limiter.unavailable = "governance_unavailable: redis at 127.0.0.1:1 "
                          "refused the connection";
  st.sources = {a, b};
  auto p = node_permit_invariants(st);
  CHECK_FALSE(p.in_flight_zero.has_value());
  CHECK_FALSE(p.permits_ended.has_value());
  CHECK_FALSE(p.leases_expired.has_value());
  CHECK(p.unknown_why == "limiter of b unreadable: governance_unavailable: "
                         "redis at 127.0.0.1:1 refused the connection");
  // What can be read and is broken stays broken.
  st.sources[0].in_flight = 1;
  p = node_permit_invariants(st);
  REQUIRE(p.in_flight_zero.has_value());
  CHECK_FALSE(*p.in_flight_zero);
  // Both readable: known.
  st.sources = {a};
  p = node_permit_invariants(st);
  CHECK(p.in_flight_zero == true);
  CHECK(p.permits_ended == true);
  CHECK(p.leases_expired == uint64_t{0});
  CHECK(p.unknown_why.empty());
}

TEST_CASE_FIXTURE(actor_fixture, "soak permits: a node's invariants hold "
                                 "while another node on the same limiter "
                                 "holds a permit") {
  limiter_limits limits;
  limits.source = "a";
  auto backend = std::shared_ptr<limiter_backend>(make_memory_limiter(limits));
  gateway_options opts;
  opts.make_limiter = [backend](const scope_config&, const source_config&) {
    return limiter_backend_ptr{std::make_unique<shared_limiter>(backend)};
  };
  // Node 2's call hangs (its permit stays live); node 1's answers.
  fake->script("a", {fake_step::never(), fake_step::ok()});
  auto sc = test_scope({"a"});
  sc.sources[0].timeout_s = 1000;
  sc.call_deadline_s = 1000;
  auto node2 = spawn_gateway(sc, 1, opts);
  auto node1 = spawn_gateway(sc, 2, opts);
  auto hanging = start_call(node2, hello());
  auto out = call(node1, hello());
  REQUIRE(out->response);
  CHECK(hanging->answers == 0);
  auto st = status(node1);
  auto& l = source(st, "a").limiter;
  // The shared figures count node 2's live permit ...
  CHECK(l.acquired == 2);
  CHECK(l.released == 1);
  CHECK(l.in_flight == 1);
  // ... node 1's own are its one permit, settled and released.
  CHECK(l.own_acquired == 1);
  CHECK(l.own_settled == 1);
  CHECK(l.own_released == 1);
  CHECK(l.own_expired == 0);
  CHECK(l.own_pending == 0);
  auto p = node_permit_invariants(st);
  CHECK(p.in_flight_zero == true);
  CHECK(p.permits_ended == true);
  // Node 2's own invariants are broken while its permit is held.
  auto p2 = node_permit_invariants(status(node2));
  CHECK(p2.in_flight_zero == false);
  CHECK(p2.permits_ended == false);
}
