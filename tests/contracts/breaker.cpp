// The breaker contract (SPEC §6, backends/breaker.hpp), run against every
// backend of PGW_CONTRACT_BACKENDS. Groups ① to ⑦ are the seven cases of
// the rate-channel design (seed 003 §T2).

#include "tests/contracts/backend_fixture.hpp"

using namespace pgw;
using namespace pgw::contract;

namespace {

constexpr auto S = breaker_feed::success;
constexpr auto NC = breaker_feed::success_no_count;
constexpr auto F = breaker_feed::failure;
constexpr auto DEAD = breaker_feed::force_open;
constexpr auto NONE = breaker_feed::none;

/// Short times for both clocks: cooldown 0.2 s (then 0.4, capped at 0.5),
/// a 1 s window, a 1 s probe lease; the rate channel off (min_calls 1000)
/// unless a case turns it on.
breaker_settings settings() {
  breaker_settings s;
  s.source = "src";
  s.threshold = 3;
  s.cooldown_s = 0.2;
  s.min_calls = 1000;
  s.fail_rate = 0.6;
  s.window_s = 1.0;
  s.max_cooldown_s = 0.5;
  s.probe_lease_s = 1.0;
  return s;
}

/// `settings()` with the rate channel on and the consecutive one out of
/// reach.
breaker_settings rate_settings(int64_t min_calls, double fail_rate) {
  auto s = settings();
  s.threshold = 100;
  s.min_calls = min_calls;
  s.fail_rate = fail_rate;
  return s;
}

} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE_TEMPLATE("breaker: a new breaker is closed and lets callers in", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, settings());
  auto e = br.enter();
  CHECK(e.allowed);
  CHECK_FALSE(e.probe);
  CHECK(e.epoch == 0);
  auto st = br.status();
  CHECK(st.source == "src");
  CHECK(st.state == "closed");
  CHECK(st.epoch == 0);
  CHECK(st.failure_count == 0);
  CHECK(st.threshold == 3);
  CHECK(st.reopen_streak == 0);
  CHECK(st.open_for_s == 0);
  CHECK(st.window_attempts == 0);
  CHECK(st.window_failures == 0);
  CHECK_FALSE(st.probe_in_flight);
  CHECK(st.opens == 0);
  CHECK(st.probes == 0);
  CHECK(st.probe_failures == 0);
}

// -- rate channel -------------------------------------------------------------

TEST_CASE_TEMPLATE("breaker T2.1: a high failure rate opens the rate channel "
                   "exactly at min_calls",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, rate_settings(10, 0.6));
  // 9 attempts, 6 failures (0.67): one attempt short of min_calls.
  for (auto feed : {F, F, S, F, F, S, F, F, S})
    br.attempt(feed);
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.window_attempts == 9);
  CHECK(st.window_failures == 6);
  br.attempt(F); // the 10th: 7 / 10
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.window_attempts == 10);
  CHECK(st.window_failures == 7);
  CHECK(st.epoch == 1);
  CHECK(st.opens == 1);
  CHECK(st.reopen_streak == 0);
  CHECK_NEAR(st.open_for_s, 0.2);
  CHECK_FALSE(br.enter().allowed);
}

TEST_CASE_TEMPLATE("breaker: the rate channel opens at fail_rate and not "
                   "below it",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  SUBCASE("5 of 10 at fail_rate 0.5 opens") {
    auto br = make_breaker(fx, rate_settings(10, 0.5));
    for (int i = 0; i < 5; ++i) {
      CAPTURE(i);
      br.attempt(S);
      br.attempt(F);
    }
    CHECK(br.state() == "open");
  }
  SUBCASE("5 of 10 at fail_rate 0.6 stays closed") {
    auto br = make_breaker(fx, rate_settings(10, 0.6));
    for (int i = 0; i < 5; ++i) {
      CAPTURE(i);
      br.attempt(S);
      br.attempt(F);
    }
    br.attempt(F); // 6 of 11 = 0.55
    auto st = br.status();
    CHECK(st.state == "closed");
    CHECK(st.window_attempts == 11);
    CHECK(st.window_failures == 6);
  }
}

TEST_CASE_TEMPLATE("breaker T2.2: fewer than min_calls samples never open the "
                   "rate channel",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, rate_settings(10, 0.6));
  br.attempts(9, F); // a failure rate of 1, but 9 samples
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.window_attempts == 9);
  CHECK(st.failure_count == 9);
  fx.advance(1.05); // they age out of the window
  st = br.status();
  CHECK(st.window_attempts == 0);
  CHECK(st.window_failures == 0);
  br.attempts(9, F); // 18 failures in all, never 10 in one window
  st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.window_attempts == 9);
  CHECK(st.failure_count == 18);
  br.attempt(F);
  CHECK(br.state() == "open");
}

TEST_CASE_TEMPLATE("breaker: a rate sample counts for window_s over 2 at least "
                   "and is gone after window_s",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  SUBCASE("kept for window_s over 2") {
    auto br = make_breaker(fx, rate_settings(4, 0.5));
    br.attempts(3, F);
    fx.advance(0.4);
    auto st = br.status();
    CHECK(st.window_attempts == 3);
    CHECK(st.window_failures == 3);
    br.attempt(F); // 4 of 4 with the older three
    CHECK(br.state() == "open");
  }
  SUBCASE("gone after window_s") {
    auto br = make_breaker(fx, rate_settings(4, 0.5));
    br.attempts(3, F);
    fx.advance(1.05);
    br.attempt(F);
    auto st = br.status();
    CHECK(st.state == "closed");
    CHECK(st.window_attempts == 1);
    CHECK(st.window_failures == 1);
  }
}

TEST_CASE_TEMPLATE("breaker: a success never opens the circuit", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, rate_settings(4, 0.5));
  br.attempts(3, F);
  br.attempt(S); // 3 of 4 failed, but this one succeeded
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.window_attempts == 4);
  br.attempt(F); // 4 of 5
  CHECK(br.state() == "open");
}

TEST_CASE_TEMPLATE("breaker T2.7: a rate-opened breaker shows failure_count at "
                   "the threshold",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, rate_settings(4, 0.5));
  for (auto feed : {S, F, S, F})
    br.attempt(feed);
  auto st = br.status();
  CHECK(st.state == "open");
  CHECK(st.failure_count == 100);
  CHECK(st.threshold == 100);
  CHECK(st.window_attempts == 4);
  CHECK(st.window_failures == 2);
}

// -- consecutive channel ------------------------------------------------------

TEST_CASE_TEMPLATE("breaker T2.3: the consecutive channel opens at the "
                   "configured threshold",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, settings()); // threshold 3
  br.attempts(2, F);
  CHECK(br.status().failure_count == 2);
  br.attempt(S); // resets the count
  CHECK(br.status().failure_count == 0);
  br.attempts(2, F);
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.failure_count == 2);
  br.attempt(F);
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.failure_count == 3);
  CHECK(st.threshold == 3);
  CHECK(st.epoch == 1);
  CHECK_NEAR(st.open_for_s, 0.2);
}

TEST_CASE_TEMPLATE("breaker T2.3: max_concurrency lifts the consecutive "
                   "threshold",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = effective_threshold(3, int64_t{4}); // max(3, 2 x 4)
  REQUIRE(s.threshold == 8);
  auto br = make_breaker(fx, s);
  br.attempts(7, F);
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.failure_count == 7);
  CHECK(st.threshold == 8);
  br.attempt(F);
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.failure_count == 8);
}

// -- what each feed counts ----------------------------------------------------

TEST_CASE_TEMPLATE("breaker T2.5: result_invalid resets the consecutive count "
                   "and counts nothing in the window",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = rate_settings(4, 0.5);
  s.threshold = 3;
  auto br = make_breaker(fx, s);
  br.attempts(2, F);
  br.attempt(NC);
  auto st = br.status();
  CHECK(st.failure_count == 0);
  CHECK(st.window_attempts == 2);
  CHECK(st.window_failures == 2);
  // Had NC reset nothing, this would be the 3rd consecutive failure; had
  // it counted an attempt, 3 of 4 would trip the rate channel.
  br.attempt(F);
  st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.failure_count == 1);
  CHECK(st.window_attempts == 3);
  CHECK(st.window_failures == 3);
  br.attempt(NC);
  br.attempt(F); // 4 of 4 real attempts failed: the rate channel opens
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.window_attempts == 4);
  CHECK(st.window_failures == 4);
  CHECK(st.failure_count == 3);
}

TEST_CASE_TEMPLATE("breaker T2.6: a 429 pulse never opens while a timeout "
                   "pulse opens without growing the streak",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = rate_settings(4, 0.5);
  s.threshold = 3;
  auto br = make_breaker(fx, s);
  br.attempts(50, NONE); // rate_limited: fed as none
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.failure_count == 0);
  CHECK(st.window_attempts == 0);
  CHECK(st.window_failures == 0);
  CHECK(st.opens == 0);
  // none neither resets nor counts: two timeouts, 429s, a third timeout.
  br.attempts(2, F);
  br.attempts(10, NONE);
  CHECK(br.status().failure_count == 2);
  br.attempt(F);
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.reopen_streak == 0);
  CHECK_NEAR(st.open_for_s, 0.2);
  fx.advance(0.25);
  auto p = br.probe();
  br.record(p.epoch, S);
  CHECK(br.state() == "closed");
  // Another timeout pulse: the same cooldown, the streak unchanged.
  br.attempts(3, F);
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.reopen_streak == 0);
  CHECK(st.opens == 2);
  CHECK_NEAR(st.open_for_s, 0.2);
}

// -- open time ----------------------------------------------------------------

TEST_CASE_TEMPLATE("breaker T2.4: each failed probe doubles the open time up "
                   "to max_cooldown_s",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  auto st = br.status();
  CHECK(st.reopen_streak == 0);
  CHECK_NEAR(st.open_for_s, 0.2); // cooldown x 2^0
  fx.advance(0.25);
  auto p = br.probe();
  br.record(p.epoch, F);
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.reopen_streak == 1);
  CHECK(st.probe_failures == 1);
  CHECK_NEAR(st.open_for_s, 0.4); // cooldown x 2^1
  fx.advance(0.3);
  auto e = br.enter();
  CHECK_FALSE(e.allowed);
  CHECK_NEAR(e.retry_after_s, 0.1);
  fx.advance(0.15);
  p = br.probe();
  br.record(p.epoch, F);
  st = br.status();
  CHECK(st.reopen_streak == 2);
  CHECK_NEAR(st.open_for_s, 0.5); // cooldown x 2^2 = 0.8, capped
  fx.advance(0.55);
  p = br.probe();
  br.record(p.epoch, S);
  st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.reopen_streak == 2); // decays only with time spent closed
  CHECK(st.probe_failures == 2);
}

TEST_CASE_TEMPLATE("breaker T2.4: the streak decays by one per cooldown_s "
                   "spent closed",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  // Streak 2: open, two failed probes, a good one.
  br.attempt(F);
  fx.advance(0.25);
  br.record(br.probe().epoch, F); // open 0.4
  fx.advance(0.45);
  br.record(br.probe().epoch, F); // open 0.5
  fx.advance(0.55);
  br.record(br.probe().epoch, S);
  REQUIRE(br.status().reopen_streak == 2);
  // 1.5 cooldowns closed: one step of decay.
  fx.advance(0.3);
  br.attempt(F);
  auto st = br.status();
  CHECK(st.reopen_streak == 1);
  CHECK_NEAR(st.open_for_s, 0.4);
  fx.advance(0.45);
  br.record(br.probe().epoch, S);
  // 2.5 cooldowns closed: down to 0, not below.
  fx.advance(0.5);
  br.attempt(F);
  st = br.status();
  CHECK(st.reopen_streak == 0);
  CHECK_NEAR(st.open_for_s, 0.2);
  // Time spent open or half-open does not decay: a failed probe now grows
  // the streak to 1.
  fx.advance(0.25);
  br.record(br.probe().epoch, F);
  st = br.status();
  CHECK(st.reopen_streak == 1);
  CHECK_NEAR(st.open_for_s, 0.4);
}

// -- probes -------------------------------------------------------------------

TEST_CASE_TEMPLATE("breaker: after open_until exactly one caller gets the "
                   "probe",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  auto e = br.enter();
  CHECK_FALSE(e.allowed);
  CHECK_FALSE(e.probe);
  CHECK_NEAR(e.retry_after_s, 0.2);
  fx.advance(0.25);
  auto p = br.probe();
  CHECK(p.epoch == 1);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    e = br.enter();
    CHECK_FALSE(e.allowed);
    CHECK_FALSE(e.probe);
    CHECK_NEAR(e.retry_after_s, 1.0); // the probe lease
  }
  auto st = br.status();
  CHECK(st.state == "half_open");
  CHECK(st.probe_in_flight);
  CHECK(st.probes == 1);
  CHECK(st.open_for_s == 0);
  CHECK(st.epoch == 1);
}

TEST_CASE_TEMPLATE("breaker: an expired probe lease lets the next caller "
                   "probe",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  s.probe_lease_s = 0.3;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  fx.advance(0.25);
  br.probe(); // never reports
  fx.advance(0.2);
  auto e = br.enter();
  CHECK_FALSE(e.allowed);
  CHECK_NEAR(e.retry_after_s, 0.1);
  fx.advance(0.15);
  auto p2 = br.probe();
  auto st = br.status();
  CHECK(st.state == "half_open");
  CHECK(st.probe_in_flight);
  CHECK(st.probes == 2);
  br.record(p2.epoch, S);
  CHECK(br.state() == "closed");
}

TEST_CASE_TEMPLATE("breaker: past its cooldown an open breaker shows "
                   "half_open with no probe in flight",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  CHECK(br.state() == "open");
  fx.advance(0.25); // cooldown 0.2 s over, nobody has entered since
  auto st = br.status();
  CHECK(st.state == "half_open");
  CHECK_FALSE(st.probe_in_flight);
  CHECK(st.open_for_s == 0);
  CHECK(st.probes == 0);
  auto p = br.probe(); // what the status promised
  CHECK(br.status().probe_in_flight);
  br.record(p.epoch, S);
  CHECK(br.state() == "closed");
}

TEST_CASE_TEMPLATE("breaker: release_probe gives the lease back at once", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  SUBCASE("from the probe's epoch") {
    auto br = make_breaker(fx, s);
    br.attempt(F);
    fx.advance(0.25);
    auto p = br.probe();
    br.release_probe(p.epoch);
    auto st = br.status();
    CHECK(st.state == "half_open"); // the next caller probes
    CHECK(st.open_for_s == 0);
    CHECK_FALSE(st.probe_in_flight);
    CHECK(st.epoch == 1); // not an open
    CHECK(st.opens == 1);
    auto p2 = br.probe(); // no waiting
    CHECK(p2.epoch == 1);
    CHECK(br.status().probes == 2);
  }
  SUBCASE("a stale epoch keeps the lease") {
    auto br = make_breaker(fx, s);
    br.attempt(F);
    fx.advance(0.25);
    auto p = br.probe();
    br.release_probe(p.epoch - 1);
    CHECK_FALSE(br.enter().allowed);
    CHECK(br.status().probe_in_flight);
  }
  SUBCASE("closed: nothing happens") {
    auto br = make_breaker(fx, s);
    auto e = br.enter();
    br.release_probe(e.epoch);
    auto st = br.status();
    CHECK(st.state == "closed");
    CHECK(st.opens == 0);
    e = br.enter();
    CHECK(e.allowed);
    CHECK_FALSE(e.probe);
  }
}

TEST_CASE_TEMPLATE("breaker: none from the probe gives the lease back", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  fx.advance(0.25);
  auto p = br.probe();
  br.record(p.epoch, NONE); // e.g. the probe was rate limited
  auto st = br.status();
  CHECK_FALSE(st.probe_in_flight);
  CHECK(st.epoch == 1);
  auto p2 = br.probe();
  // none with a stale epoch does not free the new lease.
  br.record(p2.epoch - 1, NONE);
  CHECK_FALSE(br.enter().allowed);
  CHECK(br.status().probe_in_flight);
}

TEST_CASE_TEMPLATE("breaker: a probe success closes with a clean count and "
                   "window",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = rate_settings(5, 0.5);
  s.threshold = 3;
  auto br = make_breaker(fx, s);
  br.attempt(S);
  br.attempts(3, F); // consecutive channel: 4 attempts, 3 failures
  CHECK(br.state() == "open");
  fx.advance(0.25);
  auto p = br.probe();
  br.record(p.epoch, S);
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.failure_count == 0);
  CHECK(st.window_attempts == 0);
  CHECK(st.window_failures == 0);
  CHECK(st.epoch == 1);
  CHECK(st.reopen_streak == 0);
  // With the old count this would open at once; with the old window at the
  // second (6 attempts, 5 failures).
  br.attempts(2, F);
  st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.window_attempts == 2);
}

TEST_CASE_TEMPLATE("breaker: a probe that returns result_invalid closes", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  fx.advance(0.25);
  br.record(br.probe().epoch, NC);
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.window_attempts == 0);
}

TEST_CASE_TEMPLATE("breaker: a probe failure reopens with the streak grown "
                   "and a new epoch",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  fx.advance(0.25);
  auto p = br.probe();
  REQUIRE(p.epoch == 1);
  br.record(p.epoch, F);
  auto st = br.status();
  CHECK(st.state == "open");
  CHECK(st.epoch == 2);
  CHECK(st.reopen_streak == 1);
  CHECK(st.probe_failures == 1);
  CHECK(st.opens == 2);
  CHECK_FALSE(st.probe_in_flight);
  CHECK_NEAR(st.open_for_s, 0.4);
  auto e = br.enter();
  CHECK_FALSE(e.allowed);
  CHECK(e.epoch == 2);
  CHECK_NEAR(e.retry_after_s, 0.4);
}

// -- epochs and force_open ----------------------------------------------------

TEST_CASE_TEMPLATE("breaker: results with a stale epoch are ignored", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  auto slow = br.enter(); // an attempt that reports late
  REQUIRE(slow.allowed);
  br.attempt(F); // opens: epoch 1
  br.record(slow.epoch, S); // a late success does not close
  CHECK(br.state() == "open");
  fx.advance(0.25);
  br.record(br.probe().epoch, S); // recovered
  REQUIRE(br.state() == "closed");
  // A late failure from before the recovery cannot reopen it, nor can a
  // late source_dead.
  br.record(slow.epoch, F);
  br.record(slow.epoch, DEAD);
  auto st = br.status();
  CHECK(st.state == "closed");
  CHECK(st.failure_count == 0);
  CHECK(st.window_attempts == 0);
  CHECK(st.epoch == 1);
  CHECK(st.opens == 1);
}

TEST_CASE_TEMPLATE("breaker: force_open opens for max_cooldown_s with a new "
                   "epoch",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto br = make_breaker(fx, settings()); // threshold 3, max 0.5
  br.attempt(DEAD);
  auto st = br.status();
  CHECK(st.state == "open");
  CHECK(st.epoch == 1);
  CHECK(st.opens == 1);
  CHECK(st.reopen_streak == 0);
  CHECK_NEAR(st.open_for_s, 0.5);
  fx.advance(0.3);
  auto e = br.enter();
  CHECK_FALSE(e.allowed);
  CHECK_NEAR(e.retry_after_s, 0.2);
  fx.advance(0.25);
  auto p = br.probe();
  br.record(p.epoch, DEAD); // the probe finds it still dead
  st = br.status();
  CHECK(st.state == "open");
  CHECK(st.epoch == 2);
  CHECK(st.opens == 2);
  CHECK_NEAR(st.open_for_s, 0.5);
}

TEST_CASE_TEMPLATE("breaker: the epoch grows on every open and only then", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  CAPTURE(B::name);
  auto s = settings();
  s.threshold = 1;
  auto br = make_breaker(fx, s);
  br.attempt(F);
  CHECK(br.status().epoch == 1); // consecutive open
  fx.advance(0.25);
  br.record(br.probe().epoch, F);
  CHECK(br.status().epoch == 2); // probe failure
  fx.advance(0.45);
  br.record(br.probe().epoch, S);
  CHECK(br.status().epoch == 2); // closing is not an open
  CHECK(br.enter().epoch == 2);
  br.attempt(DEAD);
  CHECK(br.status().epoch == 3); // forced open
  fx.advance(0.55);
  br.release_probe(br.probe().epoch);
  auto st = br.status();
  CHECK(st.epoch == 3); // giving the lease back is not an open
  CHECK(st.opens == 3);
}

TEST_SUITE_END();
