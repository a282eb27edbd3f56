/// The response cache's backend contract (backends/cache.hpp), run against
/// every backend of backend_fixture.hpp.

#include "backend_fixture.hpp"

#include "backends/cache_value.hpp"

#include <string>

using namespace pgw;
using namespace pgw::contract;

namespace {

template <class Backend>
caf::optional<std::string> get(Backend& fx, cache_backend& c,
                               const std::string& key) {
  auto r = c.get(key, fx.now());
  REQUIRE_MESSAGE(r, "get failed: ", describe(r.error()));
  return *r;
}

template <class Backend>
bool put(Backend& fx, cache_backend& c, const std::string& key,
         const std::string& value) {
  auto r = c.put(key, value, fx.now());
  REQUIRE_MESSAGE(r, "put failed: ", describe(r.error()));
  return *r;
}

std::string valid_value() {
  cached_answer a;
  a.response.content = "hello";
  a.response.finish_reason = "stop";
  a.response.source = "a";
  a.response.model = "m";
  a.response.usage = {3, 2, 5};
  a.stored_at_s = 1.7e9;
  return encode_cached_answer(a);
}

} // namespace

TEST_CASE_TEMPLATE("cache: a stored value reads back until replaced", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  auto c = fx.make_cache({});
  CHECK_FALSE(get(fx, *c, "k1"));
  CHECK(put(fx, *c, "k1", "v1"));
  CHECK(get(fx, *c, "k1") == std::string{"v1"});
  CHECK(put(fx, *c, "k1", "v2"));
  CHECK(get(fx, *c, "k1") == std::string{"v2"});
  CHECK_FALSE(get(fx, *c, "k2"));
  // Binary-safe: the stored bytes come back as they were.
  std::string bin("a\0b\xff", 4);
  CHECK(put(fx, *c, "k3", bin));
  CHECK(get(fx, *c, "k3") == bin);
}

TEST_CASE_TEMPLATE("cache: entries expire after ttl_s", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  cache_limits limits;
  limits.ttl_s = 0.5;
  auto c = fx.make_cache(limits);
  CHECK(put(fx, *c, "k", "v"));
  fx.advance(0.3);
  CHECK(get(fx, *c, "k") == std::string{"v"});
  fx.advance(0.3);
  CHECK_FALSE(get(fx, *c, "k"));
  // Storing again starts a new lifetime.
  CHECK(put(fx, *c, "k", "w"));
  fx.advance(0.3);
  CHECK(get(fx, *c, "k") == std::string{"w"});
}

TEST_CASE_TEMPLATE("cache: a value above max_value_bytes is refused", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  cache_limits limits;
  limits.max_value_bytes = 100;
  auto c = fx.make_cache(limits);
  CHECK(put(fx, *c, "k", std::string(100, 'x')));
  CHECK(get(fx, *c, "k") == std::string(100, 'x'));
  // Refused, and the older value of the key is gone too (a reader must not
  // get an answer older than the one the caller just got).
  CHECK_FALSE(put(fx, *c, "k", std::string(101, 'y')));
  CHECK_FALSE(get(fx, *c, "k"));
  CHECK(c->stats().refused_too_large == 1);
}

TEST_CASE_TEMPLATE("cache: a corrupt value is reported, never served", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  auto c = fx.make_cache({});
  auto good = valid_value();
  CHECK(put(fx, *c, "good", good));
  auto back = get(fx, *c, "good");
  REQUIRE(back);
  auto decoded = decode_cached_answer(*back);
  REQUIRE_MESSAGE(decoded, describe(decoded.error()));
  CHECK(decoded->response.content == "hello");
  CHECK(decoded->response.usage.total_tokens == 5);
  for (const std::string& bad :
       {std::string{"garbage"}, good.substr(0, good.size() / 2),
        std::string{"[1,2]"}, std::string{R"({"v":1})"}}) {
    CAPTURE(bad);
    CHECK(put(fx, *c, "bad", bad));
    auto raw = get(fx, *c, "bad");
    REQUIRE(raw);
    auto d = decode_cached_answer(*raw);
    REQUIRE_FALSE(d);
    CHECK(code_of(d.error()) == error_code::internal);
    CHECK(describe(d.error()).find("corrupt") != std::string::npos);
  }
}

TEST_CASE("cache: memory evicts the least recently used beyond its limits") {
  memory_backend fx;
  cache_limits limits;
  limits.max_entries = 3;
  auto c = fx.make_cache(limits);
  for (auto k : {"a", "b", "c"})
    CHECK(put(fx, *c, k, "v"));
  CHECK(get(fx, *c, "a")); // a is now the most recent
  CHECK(put(fx, *c, "d", "v"));
  CHECK_FALSE(get(fx, *c, "b"));
  CHECK(get(fx, *c, "a"));
  CHECK(get(fx, *c, "c"));
  CHECK(get(fx, *c, "d"));
  CHECK(c->stats().entries == 3);
  CHECK(c->stats().evictions == 1);

  // Bytes count keys and values.
  limits.max_entries = 100;
  limits.max_bytes = 30;
  auto d = fx.make_cache(limits);
  CHECK(put(fx, *d, "k1", std::string(10, 'x'))); // 12 bytes
  CHECK(put(fx, *d, "k2", std::string(10, 'x'))); // 24
  CHECK(put(fx, *d, "k3", std::string(10, 'x'))); // 36 > 30: k1 goes
  CHECK_FALSE(get(fx, *d, "k1"));
  CHECK(get(fx, *d, "k2"));
  CHECK(d->stats().bytes == 24);
  CHECK(d->stats().entries == 2);
}

TEST_CASE("cache: redis errors name the cause") {
  redis_backend fx;
  auto prefix = redis_backend::fresh_prefix();
  auto c = make_redis_cache(redis_backend::client(), prefix, {});
  // Another type at the key: an error, not a value.
  auto r = redis_backend::client()->command({"RPUSH", prefix + ":k", "x"});
  REQUIRE(r);
  auto got = c->get("k", fx.now());
  REQUIRE_FALSE(got);
  CHECK(describe(got.error()).find("WRONGTYPE") != std::string::npos);
  // A server that is not there: get and put fail, nothing thrown.
  auto down = make_redis_client("redis://127.0.0.1:1");
  REQUIRE(down);
  auto dc = make_redis_cache(*down, "x", {});
  CHECK_FALSE(dc->get("k", 0));
  CHECK_FALSE(dc->put("k", "v", 0));
  CHECK(dc->blocking());
}

// -- fleet single-flight leases ------------------------------------------------

namespace {

template <class Backend>
cache_claim::kind claim(Backend& fx, cache_backend& c, const std::string& key,
                        const std::string& token) {
  auto r = c.claim(key, token, fx.now());
  REQUIRE_MESSAGE(r, "claim failed: ", describe(r.error()));
  return r->what;
}

template <class Backend>
bool renew(Backend& fx, cache_backend& c, const std::string& key,
           const std::string& token) {
  auto r = c.renew(key, token, fx.now());
  REQUIRE_MESSAGE(r, "renew failed: ", describe(r.error()));
  return *r;
}

template <class Backend>
bool release(Backend& fx, cache_backend& c, const std::string& key,
             const std::string& token) {
  auto r = c.release(key, token, fx.now());
  REQUIRE_MESSAGE(r, "release failed: ", describe(r.error()));
  return *r;
}

} // namespace

TEST_CASE_TEMPLATE("cache: one token holds a key's lease, a stored value "
                   "answers every claim",
                   B, PGW_CONTRACT_BACKENDS) {
  B fx;
  cache_limits limits;
  limits.lease_s = 30;
  auto c = fx.make_cache(limits);
  CHECK(c->limits().lease_s == 30);
  using kind = cache_claim::kind;
  CHECK(claim(fx, *c, "k", "A") == kind::lead);
  CHECK(claim(fx, *c, "k", "B") == kind::wait);
  CHECK(claim(fx, *c, "k", "A") == kind::lead); // the holder again
  CHECK(claim(fx, *c, "k2", "B") == kind::lead); // another key
  // Only the holder renews or releases.
  CHECK_FALSE(renew(fx, *c, "k", "B"));
  CHECK_FALSE(release(fx, *c, "k", "B"));
  CHECK(claim(fx, *c, "k", "B") == kind::wait);
  CHECK(renew(fx, *c, "k", "A"));
  CHECK(release(fx, *c, "k", "A"));
  CHECK_FALSE(renew(fx, *c, "k", "A"));
  CHECK_FALSE(release(fx, *c, "k", "A"));
  CHECK(claim(fx, *c, "k", "B") == kind::lead);
  // A value wins over any lease.
  CHECK(put(fx, *c, "k", "answer"));
  auto r = c->claim("k", "C", fx.now());
  REQUIRE(r);
  CHECK(r->what == kind::value);
  CHECK(r->value == "answer");
}

TEST_CASE_TEMPLATE("cache: a lease ends after lease_s unless renewed", B,
                   PGW_CONTRACT_BACKENDS) {
  B fx;
  cache_limits limits;
  limits.lease_s = 0.4;
  auto c = fx.make_cache(limits);
  using kind = cache_claim::kind;
  CHECK(claim(fx, *c, "k", "A") == kind::lead);
  fx.advance(0.25);
  CHECK(renew(fx, *c, "k", "A")); // another 0.4 s from here
  fx.advance(0.25);
  CHECK(claim(fx, *c, "k", "B") == kind::wait);
  fx.advance(0.2 + margin_s);
  CHECK_FALSE(renew(fx, *c, "k", "A")); // expired
  CHECK(claim(fx, *c, "k", "B") == kind::lead);
  CHECK_FALSE(release(fx, *c, "k", "A")); // B's lease stays
  CHECK(claim(fx, *c, "k", "C") == kind::wait);
}
