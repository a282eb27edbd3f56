// What the memory backends promise beyond the contract (tests/contracts):
// exact edges on binary-exact times, bounded memory, id scoping, the two
// rate buckets, a clock that never runs backwards.

#include "backends/memory/breaker.hpp"
#include "backends/memory/limiter.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace pgw;

namespace {

limiter_limits limits_1s() {
  limiter_limits l;
  l.source = "a";
  l.window_s = 1.0;
  l.lease_s = 5.0;
  return l;
}

acquire_result acquire(memory_limiter& lim, int64_t est, double now) {
  auto r = lim.try_acquire(est, now);
  REQUIRE(r);
  return *r;
}

permit grant(memory_limiter& lim, int64_t est, double now) {
  auto r = acquire(lim, est, now);
  REQUIRE(r.granted);
  return r.granted_permit;
}

bool settle(memory_limiter& lim, const permit& p, int64_t actual, double now) {
  auto r = lim.settle(p.id, actual, now);
  REQUIRE(r);
  return *r;
}

bool release(memory_limiter& lim, const permit& p, double now) {
  auto r = lim.release(p.id, now);
  REQUIRE(r);
  return *r;
}

limiter_status status(memory_limiter& lim, double now) {
  auto r = lim.status(now);
  REQUIRE(r);
  return *r;
}

breaker_settings breaker_1s() {
  breaker_settings s;
  s.source = "b";
  s.threshold = 100;
  s.cooldown_s = 0.25;
  s.min_calls = 1000;
  s.window_s = 1.0;
  s.max_cooldown_s = 1.0;
  s.probe_lease_s = 1.0;
  return s;
}

breaker_status status(memory_breaker& br, double now) {
  auto r = br.status(now);
  REQUIRE(r);
  return *r;
}

void fail(memory_breaker& br, double now) {
  auto e = br.enter(now);
  REQUIRE(e);
  REQUIRE(e->allowed);
  REQUIRE_FALSE(br.record(e->epoch, breaker_feed::failure, now));
}

} // namespace

// -- limiter ------------------------------------------------------------------

TEST_CASE("memory limiter: windows and leases end exactly at their edge") {
  auto l = limits_1s();
  l.rpm = 1;
  l.lease_s = 0.5;
  l.max_concurrency = 2;
  memory_limiter lim{l};
  grant(lim, 1, 0.0);
  auto r = acquire(lim, 1, 0.25);
  CHECK(r.reason == "rpm");
  CHECK(r.retry_after_s == 0.75);
  CHECK(status(lim, 0.5).leases_expired == 1); // lease_s after acquisition
  CHECK(acquire(lim, 1, 0.9375).retry_after_s == 0.0625);
  grant(lim, 1, 1.0); // window_s after the first one
}

TEST_CASE("memory limiter: the TPM retry is the exact time enough tokens "
          "have left") {
  auto l = limits_1s();
  l.tpm = 100;
  memory_limiter lim{l};
  grant(lim, 30, 0.0);
  grant(lim, 30, 0.25);
  grant(lim, 30, 0.5);
  // 40 more needs 30 out (t = 1); 70 needs 60 out (t = 1.25); 100 needs all.
  CHECK(acquire(lim, 40, 0.75).retry_after_s == 0.25);
  CHECK(acquire(lim, 70, 0.75).retry_after_s == 0.5);
  CHECK(acquire(lim, 100, 0.75).retry_after_s == 0.75);
  CHECK(acquire(lim, 10, 0.75).granted);
}

TEST_CASE("memory limiter: ids name the source and belong to one limiter") {
  memory_limiter a{limits_1s()};
  memory_limiter b{limits_1s()};
  auto pa = grant(a, 1, 0.0);
  auto pb = grant(b, 1, 0.0);
  CHECK(pa.id.rfind("a-", 0) == 0);
  CHECK(pa.id != pb.id);
  // A permit of one limiter (e.g. before an actor restart) is unknown to
  // the other.
  CHECK_FALSE(settle(b, pa, 0, 0.0));
  CHECK_FALSE(release(b, pa, 0.0));
  CHECK(status(b, 0.0).in_flight == 1);
  CHECK(settle(a, pa, 0, 0.0));
  CHECK(release(a, pa, 0.0));
  // Non-canonical spellings of a real id are unknown too.
  auto p2 = grant(a, 1, 0.0);
  auto prefix = p2.id.substr(0, p2.id.rfind('-') + 1);
  CHECK_FALSE(a.release(prefix + "02", 0.0).value());
  CHECK_FALSE(a.release(prefix + "+2", 0.0).value());
  CHECK_FALSE(a.release(prefix, 0.0).value());
  CHECK(a.release(prefix + "2", 0.0).value());
}

TEST_CASE("memory limiter: a permit settled and released is forgotten") {
  memory_limiter lim{limits_1s()};
  for (int i = 0; i < 100; ++i) {
    auto p = grant(lim, 10, 0.0);
    if (i % 2 == 0) {
      CHECK(settle(lim, p, 5, 0.0));
      CHECK(release(lim, p, 0.0));
    } else {
      CHECK(release(lim, p, 0.0));
      CHECK(settle(lim, p, 5, 0.0));
    }
  }
  CHECK(lim.tracked_permits() == 0);
  CHECK(lim.window_entries() == 100);
  CHECK(status(lim, 0.0).tpm_used == 500);
  status(lim, 1.0);
  CHECK(lim.window_entries() == 0);
}

TEST_CASE("memory limiter: an unsettled permit is kept while its entry is in "
          "the window") {
  auto l = limits_1s();
  l.lease_s = 0.5;
  memory_limiter lim{l};
  auto released = grant(lim, 10, 0.0);
  auto expired = grant(lim, 10, 0.0);
  CHECK(release(lim, released, 0.25));
  status(lim, 0.75); // `expired` ran out
  CHECK(lim.tracked_permits() == 2);
  CHECK(settle(lim, expired, 0, 0.75));
  CHECK(lim.tracked_permits() == 1);
  status(lim, 1.0);
  CHECK(lim.tracked_permits() == 0);
  // Nothing is left to settle.
  CHECK_FALSE(settle(lim, released, 0, 1.0));
  CHECK(status(lim, 1.0).settled == 1);
}

TEST_CASE("memory limiter: a long run stays bounded") {
  auto l = limits_1s();
  l.lease_s = 0.5;
  memory_limiter lim{l};
  size_t most_tracked = 0;
  size_t most_entries = 0;
  for (int i = 0; i < 20'000; ++i) {
    auto now = i * 0.01;
    auto p = grant(lim, 1, now);
    if (i % 10 == 3)
      continue; // a holder that died: never settled nor released
    if (i % 10 == 7) {
      settle(lim, p, 1, now); // settled, the lease left to expire
      continue;
    }
    release(lim, p, now); // released, never settled
    if (i % 2 == 0)
      settle(lim, p, 1, now);
    most_tracked = std::max(most_tracked, lim.tracked_permits());
    most_entries = std::max(most_entries, lim.window_entries());
  }
  // One window (1 s = 100 acquisitions) of records at most.
  CHECK(most_entries <= 101);
  CHECK(most_tracked <= 101);
  status(lim, 1000.0);
  CHECK(lim.tracked_permits() == 0);
  CHECK(lim.window_entries() == 0);
  CHECK(status(lim, 1000.0).in_flight == 0);
}

TEST_CASE("memory limiter: time never runs backwards") {
  auto l = limits_1s();
  l.rpm = 1;
  memory_limiter lim{l};
  grant(lim, 1, 10.0);
  auto r = acquire(lim, 1, 5.0); // read as 10
  CHECK(r.reason == "rpm");
  CHECK(r.retry_after_s == 1.0);
  grant(lim, 1, 11.0);
}

TEST_CASE("memory limiter: negative amounts count as 0 and zero limits "
          "refuse") {
  auto l = limits_1s();
  l.tpm = 10;
  memory_limiter lim{l};
  auto p = grant(lim, -5, 0.0);
  CHECK(p.est == 0);
  CHECK(settle(lim, grant(lim, 5, 0.0), -7, 0.0));
  CHECK(status(lim, 0.0).tpm_used == 0);

  auto z = limits_1s();
  z.rpm = 0;
  memory_limiter no_rpm{z};
  auto r = acquire(no_rpm, 1, 0.0);
  CHECK(r.reason == "rpm");
  CHECK(r.retry_after_s == 1.0);

  auto c = limits_1s();
  c.max_concurrency = 0;
  c.concurrency_retry_s = 0.125;
  memory_limiter no_slot{c};
  r = acquire(no_slot, 1, 0.0);
  CHECK(r.reason == "concurrency");
  CHECK(r.retry_after_s == 0.125);
}

// -- breaker ------------------------------------------------------------------

TEST_CASE("memory breaker: the rate window is the current and the previous "
          "half-window bucket") {
  memory_breaker br{breaker_1s()}; // buckets of 0.5 s: [0, 0.5), [0.5, 1)..
  fail(br, 0.0);
  fail(br, 0.25);
  CHECK(status(br, 0.4375).window_attempts == 2);
  fail(br, 0.5); // bucket 1; bucket 0 is the previous one
  CHECK(status(br, 0.5).window_attempts == 3);
  CHECK(status(br, 0.9375).window_attempts == 3);
  auto st = status(br, 1.0); // bucket 2: bucket 0 is gone
  CHECK(st.window_attempts == 1);
  CHECK(st.window_failures == 1);
  CHECK(status(br, 1.5).window_attempts == 0);
  // A gap of more than one bucket clears both.
  fail(br, 2.0);
  fail(br, 2.75);
  CHECK(status(br, 2.75).window_attempts == 2);
  CHECK(status(br, 4.0).window_attempts == 0);
}

TEST_CASE("memory breaker: force_open from a probe keeps the streak") {
  auto s = breaker_1s();
  s.threshold = 1;
  memory_breaker br{s};
  fail(br, 0.0); // open 0.25
  auto p = br.enter(0.25);
  REQUIRE(p);
  REQUIRE(p->probe);
  REQUIRE_FALSE(br.record(p->epoch, breaker_feed::failure, 0.25)); // open 0.5
  p = br.enter(0.75);
  REQUIRE(p);
  REQUIRE(p->probe);
  REQUIRE_FALSE(br.record(p->epoch, breaker_feed::force_open, 0.75));
  auto st = status(br, 0.75);
  CHECK(st.reopen_streak == 1);
  CHECK(st.open_for_s == 1.0);
  CHECK(st.probe_failures == 1);
}

TEST_CASE("memory breaker: a probe that reports after giving its lease back "
          "still decides") {
  auto s = breaker_1s();
  s.threshold = 1;
  memory_breaker br{s};
  fail(br, 0.0);
  auto p = br.enter(0.25);
  REQUIRE(p);
  REQUIRE_FALSE(br.release_probe(p->epoch, 0.25));
  REQUIRE(status(br, 0.25).state == "half_open"); // the next caller probes
  REQUIRE_FALSE(br.record(p->epoch, breaker_feed::failure, 0.25));
  auto st = status(br, 0.25);
  CHECK(st.state == "open");
  CHECK(st.reopen_streak == 1);
  CHECK(st.epoch == 2);
  CHECK(st.open_for_s == 0.5);
}

TEST_CASE("memory breaker: time never runs backwards") {
  auto s = breaker_1s();
  s.threshold = 1;
  memory_breaker br{s};
  fail(br, 10.0);
  auto e = br.enter(5.0); // read as 10
  REQUIRE(e);
  CHECK_FALSE(e->allowed);
  CHECK(e->retry_after_s == 0.25);
  CHECK(status(br, 5.0).open_for_s == 0.25);
}
