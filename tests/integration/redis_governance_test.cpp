// The Redis limiter and breaker as a fleet uses them (SPEC §5, §6): state
// shared by several nodes, leases of a node that died, key TTLs, Redis'
// own clock. The single-node semantics are the contract suite's
// (tests/contracts, backend "redis").

#include "backends/redis/breaker.hpp"
#include "backends/redis/client.hpp"
#include "backends/redis/limiter.hpp"
#include "fixtures/redis_process.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

/// A node's connection to the shared server: its own client (own pool).
redis_client_ptr node_client() {
  auto c = make_redis_client(shared_redis().url());
  REQUIRE_MESSAGE(c, describe(c.error()));
  return *c;
}

/// A prefix no other case uses.
std::string unique_prefix(const char* name) {
  static std::atomic<int> next{0};
  return "pgw-it:" + std::to_string(::getpid()) + ":" + name + ":"
         + std::to_string(++next);
}

limiter_limits limits_1s() {
  limiter_limits l;
  l.source = "src";
  l.window_s = 1;
  l.lease_s = 5;
  return l;
}

acquire_result acquire(limiter_backend& lim, int64_t est, double now_s = 0) {
  auto r = lim.try_acquire(est, now_s);
  REQUIRE_MESSAGE(r, describe(r.error()));
  return *r;
}

permit grant(limiter_backend& lim, int64_t est) {
  auto r = acquire(lim, est);
  INFO("refused: ", r.reason);
  REQUIRE(r.granted);
  return r.granted_permit;
}

limiter_status status(limiter_backend& lim) {
  auto r = lim.status(0);
  REQUIRE_MESSAGE(r, describe(r.error()));
  return *r;
}

bool settle(limiter_backend& lim, const permit& p, int64_t actual) {
  auto r = lim.settle(p.id, actual, 0);
  REQUIRE_MESSAGE(r, describe(r.error()));
  return *r;
}

bool release(limiter_backend& lim, const permit& p) {
  auto r = lim.release(p.id, 0);
  REQUIRE_MESSAGE(r, describe(r.error()));
  return *r;
}

/// Every key under `prefix` with its PTTL in ms (-1: none, -2: gone).
std::map<std::string, int64_t> keys_with_ttl(redis_client& c,
                                             const std::string& prefix) {
  auto r = c.command({"KEYS", prefix + "*"});
  REQUIRE_MESSAGE(r, describe(r.error()));
  std::map<std::string, int64_t> out;
  for (auto& k : r->elements) {
    auto ttl = c.command({"PTTL", k.str});
    REQUIRE(ttl);
    out[k.str.substr(prefix.size())] = ttl->integer;
  }
  return out;
}

/// A client of `server` that gives up on a command after 200 ms.
redis_client_ptr impatient_client(redis_process& server) {
  redis_endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = static_cast<uint16_t>(server.port());
  redis_client_options opts;
  opts.command_timeout = 200ms;
  opts.max_backoff = 100ms;
  return make_redis_client(ep, opts);
}

} // namespace

TEST_SUITE_BEGIN("redis");

// -- sharing ------------------------------------------------------------------

TEST_CASE("redis: two limiter nodes with one prefix share RPM") {
  auto prefix = unique_prefix("rpm");
  auto l = limits_1s();
  l.rpm = 3;
  auto a = make_redis_limiter(node_client(), prefix, l);
  auto b = make_redis_limiter(node_client(), prefix, l);
  grant(*a, 1);
  grant(*a, 1);
  grant(*b, 1);
  for (auto* node : {a.get(), b.get()}) {
    auto r = acquire(*node, 1);
    CHECK_FALSE(r.granted);
    CHECK(r.reason == "rpm");
    CHECK(r.retry_after_s > 0.5);
    CHECK(r.retry_after_s <= 1.0);
  }
  // One set of counters for the fleet.
  for (auto* node : {a.get(), b.get()}) {
    auto st = status(*node);
    CHECK(st.rpm_used == 3);
    CHECK(st.acquired == 3);
    CHECK(st.refused_rpm == 2);
  }
}

TEST_CASE("redis: two limiter nodes with one prefix share TPM") {
  auto prefix = unique_prefix("tpm");
  auto l = limits_1s();
  l.tpm = 100;
  auto a = make_redis_limiter(node_client(), prefix, l);
  auto b = make_redis_limiter(node_client(), prefix, l);
  auto p = grant(*a, 60);
  auto r = acquire(*b, 50);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "tpm");
  CHECK(settle(*a, p, 10));
  grant(*b, 50);
  CHECK(status(*b).tpm_used == 60);
  // A permit settles once, whichever node tries.
  CHECK_FALSE(settle(*b, p, 0));
}

TEST_CASE("redis: two limiter nodes with one prefix share the in-flight "
          "slots") {
  auto prefix = unique_prefix("conc");
  auto l = limits_1s();
  l.max_concurrency = 2;
  auto a = make_redis_limiter(node_client(), prefix, l);
  auto b = make_redis_limiter(node_client(), prefix, l);
  auto pa = grant(*a, 1);
  auto pb = grant(*b, 1);
  CHECK(acquire(*a, 1).reason == "concurrency");
  CHECK(acquire(*b, 1).reason == "concurrency");
  CHECK(release(*a, pa));
  auto pb2 = grant(*b, 1);
  CHECK(acquire(*a, 1).reason == "concurrency");
  // Any node may release a permit, once.
  CHECK(release(*a, pb));
  CHECK_FALSE(release(*b, pb));
  CHECK(status(*a).in_flight == 1);
  CHECK(release(*b, pb2));
  CHECK(status(*b).in_flight == 0);
}

TEST_CASE("redis: permit ids are unique across nodes, and unknown to "
          "another prefix") {
  auto prefix = unique_prefix("ids");
  auto a = make_redis_limiter(node_client(), prefix, limits_1s());
  auto b = make_redis_limiter(node_client(), prefix, limits_1s());
  std::set<std::string> ids;
  for (int i = 0; i < 50; ++i) {
    ids.insert(grant(*a, 1).id);
    ids.insert(grant(*b, 1).id);
  }
  CHECK(ids.size() == 100);
  auto other = make_redis_limiter(node_client(), unique_prefix("ids"),
                                  limits_1s());
  auto mine = grant(*other, 1);
  // Same source name, same sequence numbers possible: still not theirs.
  CHECK_FALSE(release(*a, mine));
  CHECK_FALSE(settle(*a, mine, 0));
  CHECK(release(*other, mine));
}

TEST_CASE("redis: concurrent acquisitions from many threads and nodes never "
          "exceed the shared limit") {
  auto prefix = unique_prefix("race");
  auto l = limits_1s();
  l.max_concurrency = 5;
  std::vector<limiter_backend_ptr> nodes;
  for (int i = 0; i < 2; ++i)
    nodes.push_back(make_redis_limiter(node_client(), prefix, l));
  std::atomic<int> granted{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      auto& lim = *nodes[static_cast<size_t>(t % 2)];
      for (int i = 0; i < 25; ++i) {
        auto r = lim.try_acquire(1, 0);
        if (!r)
          ++failed;
        else if (r->granted)
          ++granted;
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(failed == 0);
  CHECK(granted == 5);
  auto st = status(*nodes[0]);
  CHECK(st.in_flight == 5);
  CHECK(st.acquired == 5);
  CHECK(st.refused_concurrency == 195);
}

TEST_CASE("redis: the lease of a node that died frees its slot after "
          "lease_s") {
  auto prefix = unique_prefix("dead");
  auto l = limits_1s();
  l.max_concurrency = 1;
  l.lease_s = 0.5;
  {
    // A node acquires and dies without releasing.
    auto doomed = make_redis_limiter(node_client(), prefix, l);
    grant(*doomed, 1);
  }
  auto survivor = make_redis_limiter(node_client(), prefix, l);
  auto r = acquire(*survivor, 1);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "concurrency");
  CHECK(r.retry_after_s <= 0.1); // min(lease end, concurrency_retry_s)
  std::this_thread::sleep_for(550ms);
  auto p = grant(*survivor, 1);
  auto st = status(*survivor);
  CHECK(st.leases_expired == 1);
  CHECK(st.in_flight == 1);
  CHECK(release(*survivor, p));
}

TEST_CASE("redis: two breaker nodes with one prefix share the circuit") {
  auto prefix = unique_prefix("brk");
  breaker_settings s;
  s.source = "src";
  s.threshold = 3;
  s.cooldown_s = 0.2;
  s.window_s = 1;
  s.max_cooldown_s = 0.5;
  s.probe_lease_s = 1;
  auto a = make_redis_breaker(node_client(), prefix, s);
  auto b = make_redis_breaker(node_client(), prefix, s);
  // Failures seen by both nodes add up.
  for (auto* node : {a.get(), b.get(), a.get()}) {
    auto e = node->enter(0);
    REQUIRE(e);
    REQUIRE(e->allowed);
    REQUIRE_FALSE(node->record(e->epoch, breaker_feed::failure, 0));
  }
  auto e = b->enter(0);
  REQUIRE(e);
  CHECK_FALSE(e->allowed);
  CHECK(e->epoch == 1);
  std::this_thread::sleep_for(250ms);
  // One probe for the fleet.
  auto probe = a->enter(0);
  REQUIRE(probe);
  CHECK(probe->probe);
  e = b->enter(0);
  REQUIRE(e);
  CHECK_FALSE(e->allowed);
  auto st = b->status(0);
  REQUIRE(st);
  CHECK(st->state == "half_open");
  CHECK(st->probe_in_flight);
  REQUIRE_FALSE(a->record(probe->epoch, breaker_feed::success, 0));
  e = b->enter(0);
  REQUIRE(e);
  CHECK(e->allowed);
  CHECK_FALSE(e->probe);
  st = a->status(0);
  REQUIRE(st);
  CHECK(st->state == "closed");
  CHECK(st->opens == 1);
  CHECK(st->probes == 1);
}

// -- time ---------------------------------------------------------------------

TEST_CASE("redis: time comes from Redis, not from the caller's now_s") {
  auto prefix = unique_prefix("time");
  auto l = limits_1s();
  l.rpm = 1;
  auto lim = make_redis_limiter(node_client(), prefix, l);
  grant(*lim, 1);
  // A caller an hour ahead (the memory limiter would grant) is refused.
  auto r = acquire(*lim, 1, 3600);
  CHECK_FALSE(r.granted);
  CHECK(r.reason == "rpm");
  CHECK(r.retry_after_s > 0.5);
  breaker_settings s;
  s.source = "src";
  s.threshold = 1;
  s.cooldown_s = 5;
  auto br = make_redis_breaker(node_client(), prefix, s);
  REQUIRE_FALSE(br->record(0, breaker_feed::failure, 0));
  auto e = br->enter(1e9);
  REQUIRE(e);
  CHECK_FALSE(e->allowed);
  CHECK(e->retry_after_s > 4);
}

// -- keys and TTLs ------------------------------------------------------------

TEST_CASE("redis: every key carries a TTL and the layout is as documented") {
  auto client = node_client();
  auto prefix = unique_prefix("ttl");
  auto l = limits_1s();
  l.tpm = 100;
  l.lease_s = 5;
  auto lim = make_redis_limiter(client, prefix, l);
  auto p1 = grant(*lim, 10); // settled and released: not open any more
  auto p2 = grant(*lim, 10); // settled: not open any more
  auto p3 = grant(*lim, 10); // released, unsettled, in the window: open
  auto p4 = grant(*lim, 10); // neither: open
  CHECK(settle(*lim, p1, 5));
  CHECK(release(*lim, p1));
  CHECK(settle(*lim, p2, 5));
  CHECK(release(*lim, p3));
  CHECK_FALSE(acquire(*lim, 90).granted); // counts a refusal
  breaker_settings s;
  s.source = "src";
  s.max_cooldown_s = 300;
  auto br = make_redis_breaker(client, prefix, s);
  auto e = br->enter(0);
  REQUIRE(e);
  REQUIRE_FALSE(br->record(e->epoch, breaker_feed::failure, 0));
  auto number = [](const permit& p) { return p.id.substr(p.id.rfind('-') + 1); };
  auto keys = keys_with_ttl(*client, prefix);
  std::set<std::string> names;
  for (auto& kv : keys)
    names.insert(kv.first);
  // No key per permit: the unsettled ones are members of :lim:open.
  CHECK(names
        == std::set<std::string>{":brk", ":lim:lease", ":lim:open",
                                 ":lim:seq", ":lim:stats", ":lim:tok",
                                 ":lim:win"});
  // (Below +inf: the marker that keeps the set, limiter.lua.)
  auto open = client->command(
      {"ZRANGEBYSCORE", prefix + ":lim:open", "-inf", "(+inf"});
  REQUIRE(open);
  std::set<std::string> unsettled;
  for (auto& m : open->elements)
    unsettled.insert(m.str);
  CHECK(unsettled == std::set<std::string>{number(p3), number(p4)});
  const int64_t day_ms = 86'400'000;
  for (auto& [name, ttl] : keys) {
    CAPTURE(name);
    CAPTURE(ttl);
    CHECK(ttl > 0);
    if (name == ":lim:win" || name == ":lim:tok") {
      // window_s + 1 s after the newest entry, up to 1 s more (refreshed
      // about once a second)
      CHECK(ttl <= 3000);
      CHECK(ttl > 1500);
    } else {
      // counters, sequence, leases, unsettled permits, breaker
      CHECK(ttl <= day_ms);
      CHECK(ttl > day_ms - 60'000);
    }
  }
}

TEST_CASE("redis: the leases and unsettled permits keep a TTL after "
          "their sets emptied") {
  // Redis deletes a sorted set whose last member goes: the next acquire
  // used to create :lim:lease and :lim:open again without a TTL, until the
  // next 32nd number (a node that died then left them forever). Two
  // rounds: two numbers in a row cannot both be a 32nd.
  auto client = node_client();
  auto prefix = unique_prefix("emptied");
  auto lim = make_redis_limiter(client, prefix, limits_1s());
  auto p = grant(*lim, 10);
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    CHECK(settle(*lim, p, 5));
    CHECK(release(*lim, p)); // no lease, nothing unsettled
    p = grant(*lim, 10);
    auto keys = keys_with_ttl(*client, prefix);
    CHECK(keys.count(":lim:lease") == 1);
    CHECK(keys.count(":lim:open") == 1);
    for (auto& [name, ttl] : keys) {
      CAPTURE(name);
      CHECK(ttl > 0);
    }
  }
  auto st = status(*lim);
  CHECK(st.in_flight == 1);
  CHECK(st.released == 2);
}

TEST_CASE("redis: the window's token sum stays exact beyond what a "
          "double holds") {
  // The scripts keep the sum in Lua (a double) and write it back; past
  // 2^53 a double rounds, so there Redis' integer arithmetic takes over.
  // 8,200 odd amounts just under the 2^40 cap pass 2^53.
  auto client = node_client();
  auto prefix = unique_prefix("exact");
  auto l = limits_1s();
  l.window_s = 60;
  l.lease_s = 60;
  auto lim = make_redis_limiter(client, prefix, l);
  constexpr int64_t big = (int64_t{1} << 40) - 1;
  constexpr int64_t expect = 8200 * big - big + 1; // after the settle below
  static_assert(expect > (int64_t{1} << 53));
  std::vector<permit> ps;
  for (int i = 0; i < 8200; ++i)
    ps.push_back(grant(*lim, big));
  CHECK(settle(*lim, ps[0], 1));
  auto sum = client->command({"HGET", prefix + ":lim:tok", "sum"});
  REQUIRE_MESSAGE(sum, describe(sum.error()));
  CHECK(sum->str == std::to_string(expect));
}

TEST_CASE("redis: window keys go away on their own, the rest at the next "
          "pruning") {
  auto client = node_client();
  auto prefix = unique_prefix("gone");
  auto l = limits_1s();
  l.window_s = 0.2;
  l.lease_s = 0.2;
  auto lim = make_redis_limiter(client, prefix, l);
  grant(*lim, 10);
  grant(*lim, 10);
  auto keys = keys_with_ttl(*client, prefix);
  CHECK(keys.count(":lim:win") == 1);
  CHECK(keys.count(":lim:tok") == 1);
  // Nobody calls again: window keys after at most window_s + 2 s.
  std::this_thread::sleep_for(2300ms);
  keys = keys_with_ttl(*client, prefix);
  std::set<std::string> names;
  for (auto& kv : keys)
    names.insert(kv.first);
  CHECK(names == std::set<std::string>{":lim:lease", ":lim:open", ":lim:seq",
                                       ":lim:stats"});
  // The next call counts the leases that ran out meanwhile.
  auto st = status(*lim);
  CHECK(st.leases_expired == 2);
  CHECK(st.in_flight == 0);
  CHECK(st.rpm_used == 0);
  CHECK(st.tpm_used == 0);
  // The permits that were never settled are forgotten (their lease ended
  // and their entry left the window).
  auto open = client->command(
      {"ZCOUNT", prefix + ":lim:open", "-inf", "(+inf"});
  REQUIRE(open);
  CHECK(open->integer == 0);
}

TEST_SUITE_END();

TEST_CASE("redis limiter: an acquire that runs after its client gave up is "
          "a no-op (SPEC 12)") {
  redis_process server;
  auto client = impatient_client(server);
  auto l = limits_1s();
  l.window_s = 60;
  l.max_concurrency = 5;
  auto lim = make_redis_limiter(client, unique_prefix("late"), l);
  grant(*lim, 1); // loads the script
  server.freeze();
  auto late = lim->try_acquire(1, 0);
  CHECK_FALSE(late); // timed out on the client
  // The command sits in Redis' socket buffer; it runs once Redis thaws.
  // Frozen a while longer, Redis runs it well after its not-after instant
  // (a wall-clock protocol: real time has to pass).
  std::this_thread::sleep_for(300ms);
  server.thaw();
  // Later commands run after the buffered one.
  status(*lim);
  auto st = status(*lim);
  CHECK(st.acquired == 1);
  CHECK(st.in_flight == 1);
}

TEST_CASE("redis limiter: a late acquire on a source with no keys leaves "
          "its counter with a TTL") {
  // The late acquire counts itself in :lim:stats and returns; on a source
  // whose keys had expired (or never existed) that made the hash without
  // a TTL.
  redis_process server;
  auto client = impatient_client(server);
  auto l = limits_1s();
  grant(*make_redis_limiter(client, unique_prefix("loads"), l), 1);
  auto prefix = unique_prefix("late-fresh");
  auto lim = make_redis_limiter(client, prefix, l);
  server.freeze();
  CHECK_FALSE(lim->try_acquire(1, 0)); // timed out on the client
  // Runs once Redis thaws, well after its not-after instant (real time).
  std::this_thread::sleep_for(300ms);
  server.thaw();
  auto reader = impatient_client(server);
  auto keys = keys_with_ttl(*reader, prefix);
  for (int i = 0; i < 100 && keys.empty(); ++i) {
    std::this_thread::sleep_for(20ms);
    keys = keys_with_ttl(*reader, prefix);
  }
  CHECK(keys.size() == 1);
  for (auto& [name, ttl] : keys) {
    CAPTURE(name);
    CHECK(ttl > 0);
  }
}
