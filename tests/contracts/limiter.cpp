// The limiter contract (SPEC §5, backends/limiter.hpp), run against every
// backend of PGW_CONTRACT_BACKENDS.

#include "tests/contracts/backend_fixture.hpp"

#include <set>

using namespace pgw;
using namespace pgw::contract;

namespace {

/// Limits with a 1 s window; nothing else set.
limiter_limits limits_1s() {
  limiter_limits l;
  l.source = "src";
  l.window_s = 1.0;
  l.lease_s = 5.0;
  return l;
}

} // namespace

TEST_SUITE_BEGIN("contract");

// -- RPM ----------------------------------------------------------------------

TEST_CASE_TEMPLATE("limiter: the request after rpm in the window is refused "
                   "until the oldest ages out",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.rpm = 3;
  auto lim = make_limiter(fx, l);
  lim.grant(1); // t0
  fx.advance(0.3);
  lim.grant(1); // t0 + 0.3
  lim.grant(1);
  auto r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "rpm");
  CHECK_NEAR(r.retry_after_s, 0.7); // the oldest leaves at t0 + 1
  CHECK(lim.status().rpm_used == 3);
  fx.advance(0.6); // t0 + 0.9: still in the window
  r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "rpm");
  CHECK_NEAR(r.retry_after_s, 0.1);
  fx.advance(0.15); // t0 + 1.05: the first one aged out
  lim.grant(1);
  CHECK(lim.status().rpm_used == 3);
  // Now the two of t0 + 0.3 are the oldest.
  r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "rpm");
  CHECK_NEAR(r.retry_after_s, 0.25);
  auto st = lim.status();
  CHECK(st.refused_rpm == 3);
  CHECK(st.acquired == 4);
}

// -- TPM ----------------------------------------------------------------------

TEST_CASE_TEMPLATE("limiter: TPM counts estimates and refuses until enough "
                   "tokens age out",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l);
  lim.grant(40); // t0
  fx.advance(0.3);
  lim.grant(40); // t0 + 0.3
  fx.advance(0.2); // t0 + 0.5, 80 used
  // 60 fits once the 40 of t0 have left (t0 + 1).
  auto r = lim.acquire(60);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK_NEAR(r.retry_after_s, 0.5);
  // 100 needs both gone (t0 + 1.3).
  r = lim.acquire(100);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK_NEAR(r.retry_after_s, 0.8);
  // Exactly TPM fits.
  auto p = lim.grant(20);
  CHECK(p.est == 20);
  CHECK(lim.status().tpm_used == 100);
  r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK_NEAR(r.retry_after_s, 0.5);
  fx.advance(0.55); // t0 + 1.05: 40 + 20 left
  CHECK(lim.status().tpm_used == 60);
  lim.grant(40);
  CHECK(lim.status().refused_tpm == 3);
}

TEST_CASE_TEMPLATE("limiter: an estimate larger than TPM is refused with "
                   "retry window_s",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l);
  auto r = lim.acquire(101);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK_NEAR(r.retry_after_s, 1.0);
  auto st = lim.status();
  CHECK(st.refused_tpm == 1);
  CHECK(st.rpm_used == 0);
  CHECK(st.tpm_used == 0);
  CHECK(st.in_flight == 0);
  lim.grant(100);
}

// -- settle -------------------------------------------------------------------

TEST_CASE_TEMPLATE("limiter: settle replaces the estimate and settle 0 "
                   "refunds it",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l);
  auto p1 = lim.grant(80);
  auto r = lim.acquire(40);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK(lim.settle(p1, 0));
  CHECK(lim.status().tpm_used == 0);
  auto p2 = lim.grant(40); // refused before the refund
  CHECK(lim.settle(p2, 25));
  CHECK(lim.status().tpm_used == 25);
  lim.grant(75);
  CHECK(lim.status().tpm_used == 100);
  r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  // The request count is unchanged by settling.
  CHECK(lim.status().rpm_used == 3);
}

TEST_CASE_TEMPLATE("limiter: a settle above the estimate may exceed TPM "
                   "until it ages out",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l);
  auto p = lim.grant(10); // t0
  CHECK(lim.settle(p, 150));
  CHECK(lim.status().tpm_used == 150);
  auto r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK_NEAR(r.retry_after_s, 1.0);
  fx.advance(0.5);
  r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK_NEAR(r.retry_after_s, 0.5);
  fx.advance(0.55); // t0 + 1.05
  CHECK(lim.status().tpm_used == 0);
  lim.grant(100);
}

TEST_CASE_TEMPLATE("limiter: absurd amounts saturate and never wrap TPM "
                   "(SPEC 12)",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l);
  // Two settlements of 5e18 each would wrap int64 to a negative sum and
  // admit everything; saturated, the window stays full.
  auto p1 = lim.grant(10);
  auto p2 = lim.grant(10);
  CHECK(lim.settle(p1, INT64_C(5000000000000000000)));
  CHECK(lim.settle(p2, INT64_C(5000000000000000000)));
  CHECK(lim.status().tpm_used > 100);
  auto r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  // A negative amount is 0, never a credit.
  fx.advance(1.05);
  auto p3 = lim.grant(10);
  CHECK(lim.settle(p3, -1000));
  CHECK(lim.status().tpm_used == 0);
  lim.grant(100);
}

TEST_CASE_TEMPLATE("limiter: settle happens exactly once per permit",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l);
  auto p = lim.grant(60);
  auto other = lim.grant(10);
  CHECK(lim.settle(p, 0));
  CHECK_FALSE(lim.settle(p, 50)); // no effect
  auto st = lim.status();
  CHECK(st.tpm_used == 10);
  CHECK(st.settled == 1);
  // Unknown ids change nothing.
  CHECK_FALSE(lim.settle("", 5));
  CHECK_FALSE(lim.settle("no-such-permit", 5));
  CHECK_FALSE(lim.settle(p.id + "x", 5));
  // Once released too, it still cannot settle again.
  CHECK(lim.release(p));
  CHECK_FALSE(lim.settle(p, 70));
  st = lim.status();
  CHECK(st.tpm_used == 10);
  CHECK(st.settled == 1);
  // The other permit settles on its own.
  CHECK(lim.settle(other, 20));
  CHECK(lim.status().tpm_used == 20);
  CHECK(lim.status().settled == 2);
}

TEST_CASE_TEMPLATE("limiter: a settle after the entry aged out counts and "
                   "leaves the window unchanged",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.tpm = 100;
  auto lim = make_limiter(fx, l); // lease 5 s: still held
  auto p = lim.grant(50);
  fx.advance(1.05);
  CHECK(lim.status().tpm_used == 0);
  CHECK(lim.settle(p, 80));
  auto st = lim.status();
  CHECK(st.tpm_used == 0);
  CHECK(st.settled == 1);
  lim.grant(100);
  CHECK_FALSE(lim.settle(p, 0));
  CHECK(lim.release(p));
}

// -- release and leases -------------------------------------------------------

TEST_CASE_TEMPLATE("limiter: release frees the slot exactly once",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.max_concurrency = 1;
  auto lim = make_limiter(fx, l);
  auto p1 = lim.grant(1);
  CHECK(lim.status().in_flight == 1);
  CHECK(lim.acquire(1).reason == "concurrency");
  CHECK(lim.release(p1));
  CHECK(lim.status().in_flight == 0);
  CHECK_FALSE(lim.release(p1));
  CHECK(lim.status().released == 1);
  auto p2 = lim.grant(1);
  // A repeated release of p1 does not free p2's slot.
  CHECK_FALSE(lim.release(p1));
  auto st = lim.status();
  CHECK(st.in_flight == 1);
  CHECK(st.released == 1);
  CHECK(lim.acquire(1).reason == "concurrency");
  CHECK_FALSE(lim.release(""));
  CHECK_FALSE(lim.release("no-such-permit"));
  CHECK(lim.release(p2));
  CHECK(lim.status().released == 2);
}

TEST_CASE_TEMPLATE("limiter: a concurrency refusal hints the earlier of the "
                   "next lease expiry and concurrency_retry_s",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.max_concurrency = 2;
  l.lease_s = 0.5;
  l.concurrency_retry_s = 0.2;
  auto lim = make_limiter(fx, l);
  lim.grant(1);
  lim.grant(1);
  auto r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "concurrency");
  CHECK_NEAR(r.retry_after_s, 0.2);
  fx.advance(0.4);
  r = lim.acquire(1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "concurrency");
  CHECK_NEAR(r.retry_after_s, 0.1); // the leases end at 0.5
  CHECK(lim.status().refused_concurrency == 2);
}

TEST_CASE_TEMPLATE("limiter: an expired lease returns its slot", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto l = limits_1s();
  l.max_concurrency = 1;
  l.tpm = 100;
  l.lease_s = 0.3;
  auto lim = make_limiter(fx, l);
  auto p1 = lim.grant(30);
  CHECK(lim.acquire(30).reason == "concurrency");
  fx.advance(0.35);
  auto st = lim.status();
  CHECK(st.in_flight == 0);
  CHECK(st.leases_expired == 1);
  auto p2 = lim.grant(30);
  // The expired permit cannot be released any more, but still settles.
  CHECK_FALSE(lim.release(p1));
  CHECK(lim.settle(p1, 0));
  st = lim.status();
  CHECK(st.in_flight == 1);
  CHECK(st.released == 0);
  CHECK(st.leases_expired == 1);
  CHECK(st.tpm_used == 30);
  CHECK(lim.release(p2));
  CHECK(lim.status().released == 1);
}

// -- reasons, counters, no limits ---------------------------------------------

TEST_CASE_TEMPLATE("limiter: refusal reasons come in the order rpm then tpm "
                   "then concurrency",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  SUBCASE("all three full: rpm") {
    auto l = limits_1s();
    l.rpm = 1;
    l.tpm = 10;
    l.max_concurrency = 1;
    auto lim = make_limiter(fx, l);
    lim.grant(10);
    CHECK(lim.acquire(10).reason == "rpm");
    auto st = lim.status();
    CHECK(st.refused_rpm == 1);
    CHECK(st.refused_tpm == 0);
    CHECK(st.refused_concurrency == 0);
  }
  SUBCASE("tpm and concurrency full: tpm") {
    auto l = limits_1s();
    l.rpm = 5;
    l.tpm = 10;
    l.max_concurrency = 1;
    auto lim = make_limiter(fx, l);
    lim.grant(10);
    CHECK(lim.acquire(10).reason == "tpm");
    auto st = lim.status();
    CHECK(st.refused_rpm == 0);
    CHECK(st.refused_tpm == 1);
    CHECK(st.refused_concurrency == 0);
  }
  SUBCASE("only concurrency full: concurrency") {
    auto l = limits_1s();
    l.rpm = 5;
    l.tpm = 100;
    l.max_concurrency = 1;
    auto lim = make_limiter(fx, l);
    lim.grant(10);
    CHECK(lim.acquire(10).reason == "concurrency");
    auto st = lim.status();
    CHECK(st.refused_rpm == 0);
    CHECK(st.refused_tpm == 0);
    CHECK(st.refused_concurrency == 1);
  }
}

TEST_CASE_TEMPLATE("limiter: status reports limits and usage and every "
                   "counter",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  limiter_limits l;
  l.source = "counted";
  l.rpm = 10;
  l.tpm = 1000;
  l.max_concurrency = 3;
  l.window_s = 1.0;
  l.lease_s = 0.5;
  auto lim = make_limiter(fx, l);
  auto st = lim.status();
  CHECK(st.source == "counted");
  REQUIRE(st.rpm_limit);
  REQUIRE(st.tpm_limit);
  REQUIRE(st.concurrency_limit);
  CHECK(*st.rpm_limit == 10);
  CHECK(*st.tpm_limit == 1000);
  CHECK(*st.concurrency_limit == 3);
  CHECK(st.acquired == 0);
  auto p1 = lim.grant(100);
  auto p2 = lim.grant(200);
  lim.grant(50);
  CHECK(lim.acquire(1).reason == "concurrency");
  CHECK(lim.settle(p1, 30));
  CHECK(lim.release(p1));
  CHECK(lim.acquire(800).reason == "tpm");
  CHECK(lim.settle(p2, 200));
  st = lim.status();
  CHECK(st.rpm_used == 3);
  CHECK(st.tpm_used == 280);
  CHECK(st.in_flight == 2);
  CHECK(st.acquired == 3);
  CHECK(st.settled == 2);
  CHECK(st.released == 1);
  CHECK(st.refused_rpm == 0);
  CHECK(st.refused_tpm == 1);
  CHECK(st.refused_concurrency == 1);
  CHECK(st.leases_expired == 0);
  fx.advance(0.55); // both remaining leases ran out
  st = lim.status();
  CHECK(st.in_flight == 0);
  CHECK(st.leases_expired == 2);
  CHECK(st.released == 1);
  CHECK(st.rpm_used == 3);
  fx.advance(0.5); // and the window is empty
  st = lim.status();
  CHECK(st.rpm_used == 0);
  CHECK(st.tpm_used == 0);
  CHECK(st.acquired == 3);
  CHECK(st.settled == 2);
  CHECK(st.leases_expired == 2);
  // Rpm refusals are counted too.
  for (int i = 0; i < 10; ++i)
    CHECK(lim.release(lim.grant(1)));
  CHECK(lim.acquire(1).reason == "rpm");
  CHECK(lim.status().refused_rpm == 1);
  CHECK(lim.status().released == 11);
}

TEST_CASE_TEMPLATE("limiter: with no limits set every request is granted", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto lim = make_limiter(fx, limits_1s());
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    CAPTURE(i);
    auto p = lim.grant(1'000'000);
    CHECK(p.source == "src");
    CHECK(p.est == 1'000'000);
    CHECK_FALSE(p.id.empty());
    ids.insert(p.id);
  }
  CHECK(ids.size() == 200); // unique ids
  auto st = lim.status();
  CHECK_FALSE(st.rpm_limit);
  CHECK_FALSE(st.tpm_limit);
  CHECK_FALSE(st.concurrency_limit);
  CHECK(st.acquired == 200);
  CHECK(st.in_flight == 200);
  CHECK(st.rpm_used == 200);
  CHECK(st.tpm_used == 200'000'000);
  CHECK(st.refused_rpm + st.refused_tpm + st.refused_concurrency == 0);
}

TEST_SUITE_END();
