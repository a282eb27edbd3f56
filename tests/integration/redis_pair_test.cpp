// The Redis governance pair (issue 17): a source's breaker and limiter in
// one script call per admission and one per attempt end, and lean scripts
// (counted with Redis' own INFO commandstats, which counts the commands a
// script runs too).

#include "backends/redis/breaker.hpp"
#include "backends/redis/client.hpp"
#include "backends/redis/governance.hpp"
#include "backends/redis/limiter.hpp"
#include "fixtures/redis_process.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

/// A server of its own: the command counts are this case's alone.
struct pair_fixture {
  redis_process server;
  redis_client_ptr client;
  std::string prefix = "pgw-pair:" + std::to_string(::getpid());

  pair_fixture() {
    auto c = make_redis_client(server.url());
    REQUIRE_MESSAGE(c, describe(c.error()));
    client = *c;
  }

  /// Calls of each Redis command since the last `reset`, by name
  /// ("evalsha", "hset", ...).
  std::map<std::string, int64_t> calls() {
    auto r = client->command({"INFO", "commandstats"});
    REQUIRE_MESSAGE(r, describe(r.error()));
    std::map<std::string, int64_t> out;
    size_t pos = 0;
    const std::string tag = "cmdstat_";
    while ((pos = r->str.find(tag, pos)) != std::string::npos) {
      auto colon = r->str.find(':', pos);
      auto name = r->str.substr(pos + tag.size(), colon - pos - tag.size());
      auto eq = r->str.find("calls=", colon);
      out[name] = std::stoll(r->str.substr(eq + 6));
      pos = colon;
    }
    return out;
  }

  /// Script calls (EVAL and EVALSHA) since the last `reset`.
  int64_t scripts() {
    auto c = calls();
    return c["eval"] + c["evalsha"];
  }

  void reset() {
    REQUIRE(client->command({"CONFIG", "RESETSTAT"}));
  }
};

limiter_limits pair_limits() {
  limiter_limits l;
  l.source = "src";
  l.window_s = 60;
  l.lease_s = 5;
  return l;
}

breaker_settings pair_settings() {
  breaker_settings s;
  s.source = "src";
  s.threshold = 1;
  s.cooldown_s = 0.2;
  s.max_cooldown_s = 1;
  return s;
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("redis pair: an admission and an attempt's end are one script "
          "call each") {
  pair_fixture fx;
  auto pair = make_redis_governance_pair(fx.client, fx.prefix, pair_limits(),
                                         pair_settings());
  auto lim = make_redis_limiter(fx.client, fx.prefix, pair_limits());
  auto brk = make_redis_breaker(fx.client, fx.prefix, pair_settings());
  REQUIRE(pair->enter_and_acquire(1, 0)); // loads the script
  fx.reset();
  auto a = pair->enter_and_acquire(100, 0);
  REQUIRE_MESSAGE(a, describe(a.error()));
  CHECK(a->first.allowed);
  CHECK_FALSE(a->first.probe);
  REQUIRE(a->second.granted);
  CHECK(a->second.granted_permit.est == 100);
  auto done = pair->finish(a->first.epoch, breaker_feed::success,
                           a->second.granted_permit.id, 40, 0);
  REQUIRE_MESSAGE(done, describe(done.error()));
  CHECK(done->first);
  CHECK(done->second);
  CHECK(fx.scripts() == 2);
  auto c = fx.calls();
  // The attempt's end asks Redis the time once for the breaker's record
  // and the limiter's release (one per script call), and the settle reads
  // its permit's tokens with the token sum (no HGET of either, or of the
  // saved clock).
  CHECK(c["time"] == 2);
  CHECK(c["hget"] == 0);
  // The pair works on the limiter's and the breaker's own keys.
  auto ls = lim->status(0);
  REQUIRE(ls);
  CHECK(ls->acquired == 2);
  CHECK(ls->settled == 1);
  CHECK(ls->released == 1);
  CHECK(ls->tpm_used == 1 + 40);
  CHECK(ls->in_flight == 1); // the first, never finished
  auto bs = brk->status(0);
  REQUIRE(bs);
  CHECK(bs->state == "closed");
  CHECK(bs->window_attempts == 1);
  // Exactly once, as settle_and_release: a second finish changes no permit.
  auto again = pair->finish(a->first.epoch, breaker_feed::none,
                            a->second.granted_permit.id, 99, 0);
  REQUIRE(again);
  CHECK_FALSE(again->first);
  CHECK_FALSE(again->second);
  // An id of another prefix is nobody's permit here; the outcome counts.
  auto other = pair->finish(a->first.epoch, breaker_feed::failure,
                            "src-00000000-5", 1, 0);
  REQUIRE(other);
  CHECK_FALSE(other->first);
  bs = brk->status(0);
  REQUIRE(bs);
  CHECK(bs->state == "open");
}

TEST_CASE("redis pair: an open breaker acquires nothing, and a probe "
          "without a permit gives its lease back in the same call") {
  pair_fixture fx;
  auto limits = pair_limits();
  limits.rpm = 1;
  auto pair = make_redis_governance_pair(fx.client, fx.prefix, limits,
                                         pair_settings());
  auto lim = make_redis_limiter(fx.client, fx.prefix, limits);
  auto brk = make_redis_breaker(fx.client, fx.prefix, pair_settings());
  auto a = pair->enter_and_acquire(1, 0);
  REQUIRE(a);
  REQUIRE(a->second.granted);
  REQUIRE(pair->finish(a->first.epoch, breaker_feed::failure,
                       a->second.granted_permit.id, 1, 0));
  auto refused = pair->enter_and_acquire(1, 0);
  REQUIRE(refused);
  CHECK_FALSE(refused->first.allowed);
  CHECK(refused->first.retry_after_s > 0);
  CHECK_FALSE(refused->second.granted);
  CHECK(refused->second.reason.empty()); // the limiter was not asked
  auto ls = lim->status(0);
  REQUIRE(ls);
  CHECK(ls->acquired == 1);
  CHECK(ls->refused_rpm == 0);
  // Once the cooldown has passed the next caller probes, but RPM is full:
  // refused as quota, and the probe lease is free again at once.
  std::this_thread::sleep_for(250ms);
  auto probe = pair->enter_and_acquire(1, 0);
  REQUIRE(probe);
  CHECK(probe->first.allowed);
  CHECK(probe->first.probe);
  CHECK_FALSE(probe->second.granted);
  CHECK(probe->second.reason == "rpm");
  auto bs = brk->status(0);
  REQUIRE(bs);
  CHECK(bs->state == "half_open"); // the lease is free: the next probes
  CHECK_FALSE(bs->probe_in_flight);
  CHECK(bs->probes == 1);
  auto next = brk->enter(0);
  REQUIRE(next);
  CHECK(next->probe); // not refused for a lease nobody holds
}

TEST_CASE("redis: a lean acquire prunes nothing and writes no clock or "
          "permit key, a closed breaker's enter writes nothing") {
  pair_fixture fx;
  auto limits = pair_limits();
  limits.rpm = 100000;
  limits.tpm = 100000000;
  limits.max_concurrency = 1000;
  auto lim = make_redis_limiter(fx.client, fx.prefix, limits);
  auto brk = make_redis_breaker(fx.client, fx.prefix, pair_settings());
  REQUIRE(lim->try_acquire(1, 0)); // loads the script, starts the sequence
  REQUIRE(brk->enter(0));
  fx.reset();
  for (int i = 0; i < 100; ++i) {
    auto p = lim->try_acquire(10, 0);
    REQUIRE(p);
    REQUIRE(p->granted);
    auto e = brk->enter(0);
    REQUIRE(e);
    REQUIRE(e->allowed);
  }
  auto c = fx.calls();
  CHECK(fx.scripts() == 200);
  CHECK(c["set"] == 0);               // no key per permit
  CHECK(c["hset"] <= 102); // the permit's tokens (+ the clock per pruning)
  CHECK(c["zrangebyscore"] <= 2);     // pruning: every 64th permit
  CHECK(c["zremrangebyscore"] <= 6);
  CHECK(c["pexpire"] <= 2 * 2 + 4 * 4); // window keys ~1/s, the rest 1/32
  CHECK(c["hgetall"] == 0);           // enter while closed: two fields read
  CHECK(c["pttl"] == 0);    // the window keys' expiry is read with the sum
  CHECK(c["hincrby"] == 100); // 'acquired'; the sum is in the grant's HSET
  auto st = lim->status(0);
  REQUIRE(st);
  CHECK(st->acquired == 101);
  CHECK(st->in_flight == 101);
  CHECK(st->rpm_used == 101);
  CHECK(st->tpm_used == 1 + 1000);
}

TEST_CASE("redis: a limit that looks reached is decided on pruned, exact "
          "figures") {
  pair_fixture fx;
  auto limits = pair_limits();
  limits.window_s = 0.3;
  limits.lease_s = 0.3;
  limits.rpm = 2;
  limits.tpm = 20;
  limits.max_concurrency = 2;
  auto lim = make_redis_limiter(fx.client, fx.prefix, limits);
  for (int i = 0; i < 2; ++i) {
    auto p = lim->try_acquire(10, 0);
    REQUIRE(p);
    REQUIRE(p->granted);
  }
  auto full = lim->try_acquire(10, 0);
  REQUIRE(full);
  CHECK(full->reason == "rpm");
  // Both entries and both leases end; nothing has pruned them yet, the
  // counts still say full: the acquire prunes and grants.
  std::this_thread::sleep_for(350ms);
  auto again = lim->try_acquire(10, 0);
  REQUIRE(again);
  CHECK(again->granted);
  auto st = lim->status(0);
  REQUIRE(st);
  CHECK(st->rpm_used == 1);
  CHECK(st->tpm_used == 10);
  CHECK(st->in_flight == 1);
  CHECK(st->leases_expired == 2);
}

TEST_SUITE_END();
