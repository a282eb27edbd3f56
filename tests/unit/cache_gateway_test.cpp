/// The response cache through a gateway (issue 14): call supervisors ask
/// the cache actor before admission and offer successes, on the test
/// coordinator with the fake transport.

#include "actors/cache.hpp"
#include "actors/structured_schema.hpp"
#include "backends/cache_value.hpp"

#include "fixtures/actor_fixture.hpp"

#include <caf/all.hpp>

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

struct cached_gateway : actor_fixture {
  cache_actor cache_ref;
  gateway_actor gw;

  cached_gateway() {
    cache_ref = sys.spawn(pgw::cache, std::shared_ptr<cache_backend>(
                                        make_memory_cache({})),
                          "memory", nullptr, nullptr);
    gateway_options opts;
    opts.cache = cache_ref;
    auto sc = test_scope({"a"});
    sc.cache.enabled = true;
    gw = spawn_gateway(sc, 42, opts);
  }

  ~cached_gateway() {
    caf::anon_send_exit(cache_ref, caf::exit_reason::user_shutdown);
    settle();
  }

  void cancel(const std::string& call_id) {
    caf::anon_send(gw, atom::cancel_v, call_id);
    sched.run();
  }

  cache_status cache_counters() {
    auto out = std::make_shared<cache_status>();
    auto c = cache_ref;
    sys.spawn([c, out](caf::event_based_actor* self) {
      self->request(c, caf::infinite, atom::status_v)
        .then([out](cache_status& st) { *out = std::move(st); });
    });
    sched.run();
    return *out;
  }
};

chat_request with_id(chat_request req, const std::string& id) {
  req.call_id = id;
  return req;
}

void check_answer(const call_outcome& out, bool hit) {
  REQUIRE(out.answers == 1);
  REQUIRE_MESSAGE(out.response, describe(out.error));
  CHECK(out.response->content == "hello");
  CHECK(out.response->stats.cache_hit == hit);
  CHECK(out.response->stats.attempts == (hit ? 0 : 1));
  CHECK(out.response->usage.prompt_tokens == 10);
  CHECK(out.response->source == "a");
  if (hit)
    CHECK(out.response->stats.generation_ms == 0);
}

} // namespace

TEST_CASE_FIXTURE(cached_gateway,
                  "cache: identical concurrent calls make one upstream call") {
  fake->script("a", {fake_step::ok().after(1s)});
  auto c1 = start_call(gw, with_id(hello(), "c1"));
  auto c2 = start_call(gw, with_id(hello(), "c2"));
  auto c3 = start_call(gw, with_id(hello(), "c3"));
  settle();
  CHECK(fake->count("a") == 1);
  check_answer(*c1, false);
  check_answer(*c2, true);
  check_answer(*c3, true);
  CHECK(c2->response->call_id == "c2");
  // Later: a hit from the store; another request misses; `off` bypasses.
  check_answer(*call(gw, hello()), true);
  CHECK(fake->count("a") == 1);
  auto other = hello();
  other.temperature = 0.7;
  check_answer(*call(gw, other), false);
  CHECK(fake->count("a") == 2);
  auto off = hello();
  off.cache = "off";
  check_answer(*call(gw, off), false);
  CHECK(fake->count("a") == 3);
  auto st = cache_counters();
  CHECK(st.coalesced_hits == 2);
  CHECK(st.hits == 1);
  CHECK(st.stores == 2); // c1 and `other`; an `off` call is never stored
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(cached_gateway,
                  "cache: when the leading call fails, a waiter calls upstream") {
  fake->script("a", {fake_step::http(400, outcome::request_rejected).after(1s),
                     fake_step::ok().after(1s)});
  auto c1 = start_call(gw, with_id(hello(), "c1"));
  auto c2 = start_call(gw, with_id(hello(), "c2"));
  settle();
  REQUIRE(c1->answers == 1);
  CHECK(code_of(c1->error) == error_code::request_rejected);
  check_answer(*c2, false);
  CHECK(fake->count("a") == 2);
  CHECK(cache_counters().promoted == 1);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(cached_gateway,
                  "cache: cancelling the leading call does not cancel the "
                  "waiters' call") {
  fake->script("a", {fake_step::ok().after(5s)});
  auto c1 = start_call(gw, with_id(hello(), "c1"));
  auto c2 = start_call(gw, with_id(hello(), "c2"));
  auto c3 = start_call(gw, with_id(hello(), "c3"));
  advance(1s);
  cancel("c1");
  REQUIRE(c1->answers == 1);
  CHECK(code_of(c1->error) == error_code::cancelled);
  settle();
  check_answer(*c2, false); // the next leader
  check_answer(*c3, true);  // served by it
  CHECK(fake->count("a") == 2);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(cached_gateway,
                  "cache: a cancelled waiter's call ends at once, and the "
                  "leader's answer is not offered to it") {
  fake->script("a", {fake_step::ok().after(5s)});
  auto c1 = start_call(gw, with_id(hello(), "c1"));
  auto c2 = start_call(gw, with_id(hello(), "c2"));
  advance(1s);
  cancel("c2");
  REQUIRE(c2->answers == 1);
  CHECK(code_of(c2->error) == error_code::cancelled);
  // c2's supervisor has ended: it did not stay for the leader's answer.
  CHECK(status(gw).calls_active == 1);
  CHECK(cache_counters().waiters_left == 1);
  settle();
  check_answer(*c1, false);
  CHECK(fake->count("a") == 1);
  auto st = cache_counters();
  CHECK(st.coalesced == 1);
  CHECK(st.coalesced_hits == 0); // nobody was left to serve
  CHECK(st.in_flight == 0);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(cached_gateway,
                  "cache: a waiter's deadline ends its call, the leader goes on") {
  fake->script("a", {fake_step::ok().after(10s)});
  auto c1 = start_call(gw, with_id(hello(), "c1"));
  auto req = with_id(hello(), "c2");
  req.deadline_s = 2;
  auto t0 = now();
  auto c2 = start_call(gw, req);
  run_until_answered(c2);
  CHECK(code_of(c2->error) == error_code::call_deadline_exceeded);
  CHECK(seconds_between(t0, now()) == doctest::Approx(2).epsilon(0.01));
  CHECK(c1->answers == 0);
  settle();
  check_answer(*c1, false);
  CHECK(fake->count("a") == 1);
  check_balanced(status(gw));
}

TEST_CASE_FIXTURE(cached_gateway,
                  "cache: truncated or unfinished answers are never cached") {
  auto truncated = fake_step::ok();
  truncated.result.finish_reason = "length";
  auto unfinished = fake_step::ok();
  unfinished.result.finish_reason.clear();
  fake->script("a", {truncated, truncated, unfinished, unfinished,
                     fake_step::ok()});
  for (int i = 0; i < 4; ++i) {
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK_FALSE(out->response->stats.cache_hit);
  }
  CHECK(fake->count("a") == 4);
  CHECK(cache_counters().stores == 0);
  CHECK(cache_counters().not_stored == 4);
}

TEST_CASE_FIXTURE(actor_fixture,
                  "cache: a scope without CACHE__ENABLED never asks the cache") {
  auto cache_ref = sys.spawn(pgw::cache, std::shared_ptr<cache_backend>(
                                           make_memory_cache({})),
                             "memory", nullptr, nullptr);
  gateway_options opts;
  opts.cache = cache_ref;
  auto gw = spawn_gateway(test_scope({"a"}), 42, opts);
  fake->script("a", {fake_step::ok()});
  for (int i = 0; i < 2; ++i) {
    auto out = call(gw, hello());
    REQUIRE(out->response);
    CHECK_FALSE(out->response->stats.cache_hit);
  }
  CHECK(fake->count("a") == 2);
  caf::anon_send_exit(cache_ref, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(cached_gateway, "cache: tenants never share entries") {
  fake->script("a", {fake_step::ok()});
  auto t1 = hello();
  t1.tenant = "t1";
  auto t2 = hello();
  t2.tenant = "t2";
  check_answer(*call(gw, t1), false);
  check_answer(*call(gw, t2), false);
  check_answer(*call(gw, t1), true);
  CHECK(fake->count("a") == 2);
}

TEST_CASE_FIXTURE(cached_gateway, "cache: a gateway whose source has another model or overlay does not replay the first one's answers") {
  fake->script("a", {fake_step::ok(), fake_step::ok(), fake_step::ok()});
  check_answer(*call(gw, hello()), false);
  check_answer(*call(gw, hello()), true);
  // The same scope on the same cache (a restart with a changed config, or
  // another deployment on one Redis): its own answers only.
  gateway_options opts;
  opts.cache = cache_ref;
  auto changed_model = test_scope({"a"});
  changed_model.cache.enabled = true;
  changed_model.sources[0].model = "model-a-v2";
  auto gw2 = spawn_gateway(changed_model, 42, opts);
  check_answer(*call(gw2, hello()), false);
  auto changed_overlay = test_scope({"a"});
  changed_overlay.cache.enabled = true;
  changed_overlay.sources[0].overlay = R"({"temperature":0})";
  auto gw3 = spawn_gateway(changed_overlay, 42, opts);
  check_answer(*call(gw3, hello()), false);
  CHECK(fake->count("a") == 3);
  // An unchanged one shares them.
  auto same = test_scope({"a"});
  same.cache.enabled = true;
  auto gw4 = spawn_gateway(same, 42, opts);
  check_answer(*call(gw4, hello()), true);
  for (auto& g : {gw2, gw3, gw4})
    caf::anon_send_exit(g, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(cached_gateway, "cache: a structured call's hit carries the validated JSON as the call that stored it did") {
  // A fenced answer: valid only after repair, so `parsed` differs from the
  // stored content.
  auto req = hello("n?");
  req.schema = R"({"type":"object","properties":{"n":{"type":"integer"}},)"
               R"("required":["n"]})";
  fake->script("a", {fake_step::ok("```json\n{\"n\": 7}\n```").after(1s)});
  auto checked = checked_answer_count();
  auto first = call(gw, with_id(req, "s1"));
  REQUIRE_MESSAGE(first->response, describe(first->error));
  CHECK(first->response->parsed == R"({"n":7})");
  CHECK(first->response->stats.repaired);
  // Validated once, by the attempt (the supervisor used its check).
  CHECK(checked_answer_count() - checked == 1);
  // From the store: the caller reads `parsed` (chat --schema prints it,
  // a sink gets it as the answer), as it did from upstream.
  auto second = call(gw, with_id(req, "s2"));
  REQUIRE_MESSAGE(second->response, describe(second->error));
  CHECK(second->response->stats.cache_hit);
  CHECK(fake->count("a") == 1);
  CHECK(second->response->parsed == R"({"n":7})");
  CHECK(second->response->stats.repaired);
  CHECK(second->response->content == first->response->content);
  // The stored answer is validated once too.
  CHECK(checked_answer_count() - checked == 2);
}

namespace {

/// A memory cache that remembers the last value stored, so that a test can
/// write over it as another writer of a shared store would.
struct recording_cache : cache_backend {
  cache_backend_ptr inner = make_memory_cache({});
  std::string last_key;
  std::string last_value;
  double last_now_s = 0;

  caf::expected<caf::optional<std::string>> get(const std::string& key,
                                                double now_s) override {
    return inner->get(key, now_s);
  }
  caf::expected<bool> put(const std::string& key, const std::string& value,
                          double now_s) override {
    last_key = key;
    last_value = value;
    last_now_s = now_s;
    return inner->put(key, value, now_s);
  }
  cache_backend_stats stats() const override {
    return inner->stats();
  }
  bool blocking() const override {
    return false;
  }
};

} // namespace

TEST_CASE_FIXTURE(actor_fixture, "cache: a stored answer that no longer matches the call's schema is not served, and the sources' answer replaces it") {
  auto store = std::make_shared<recording_cache>();
  auto cache_ref = sys.spawn(pgw::cache, std::shared_ptr<cache_backend>(store),
                             "memory", nullptr, nullptr);
  gateway_options opts;
  opts.cache = cache_ref;
  auto sc = test_scope({"a"});
  sc.cache.enabled = true;
  auto gw = spawn_gateway(sc, 42, opts);
  auto req = hello("n?");
  req.schema = R"({"type":"object","properties":{"n":{"type":"integer"}},)"
               R"("required":["n"]})";
  fake->script("a", {fake_step::ok(R"({"n": 7})").after(1s),
                     fake_step::ok(R"({"n": 8})").after(1s)});
  auto first = call(gw, with_id(req, "s1"));
  REQUIRE_MESSAGE(first->response, describe(first->error));
  REQUIRE_FALSE(store->last_key.empty());
  // Another writer of the store (another version, a hand edit) leaves an
  // answer under the same key that the schema refuses.
  auto stored = decode_cached_answer(store->last_value);
  REQUIRE(stored);
  stored->response.content = R"({"n": "seven"})";
  auto key = store->last_key;
  auto put = store->put(key, encode_cached_answer(*stored), store->last_now_s);
  REQUIRE(put);
  REQUIRE(*put);
  // Not served: the call asks the source, whose valid answer it returns.
  auto second = call(gw, with_id(req, "s2"));
  REQUIRE_MESSAGE(second->response, describe(second->error));
  CHECK_FALSE(second->response->stats.cache_hit);
  CHECK(fake->count("a") == 2);
  CHECK(second->response->parsed == R"({"n":8})");
  // The cache counts the refused answer as unfit, not as a hit.
  auto counters = [&] {
    auto out = std::make_shared<cache_status>();
    sys.spawn([cache_ref, out](caf::event_based_actor* self) {
      self->request(cache_ref, caf::infinite, atom::status_v)
        .then([out](cache_status& st) { *out = std::move(st); });
    });
    settle();
    return *out;
  };
  auto after_refusal = counters();
  CHECK(after_refusal.hits == 0);
  CHECK(after_refusal.unfit_hits == 1);
  CHECK(after_refusal.misses == 2);
  // ... and it is stored over the bad entry: the next call hits it.
  CHECK(store->last_key == key);
  auto third = call(gw, with_id(req, "s3"));
  REQUIRE_MESSAGE(third->response, describe(third->error));
  CHECK(third->response->stats.cache_hit);
  CHECK(fake->count("a") == 2);
  CHECK(third->response->parsed == R"({"n":8})");
  CHECK(counters().hits == 1);
  check_balanced(status(gw));
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(cache_ref, caf::exit_reason::user_shutdown);
  settle();
}
