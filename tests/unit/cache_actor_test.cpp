/// The cache actor (actors/cache.hpp): hits, single-flight and error
/// handling, on the test coordinator with callers that stand in for call
/// supervisors.

#include "actors/cache.hpp"

#include "backends/cache_value.hpp"
#include "config/settings.hpp"
#include "fixtures/actor_fixture.hpp"

#include <caf/all.hpp>

#include <doctest/doctest.h>

using namespace pgw;
using namespace pgw::test;

namespace {

/// What a caller received from the cache.
struct caller_log {
  int answers = 0;
  caf::optional<cache_verdict> verdict;
  caf::error error;

  bool is(cache_verdict_kind k) const {
    return answers == 1 && verdict && verdict->kind == k;
  }

  uint64_t lease() const {
    REQUIRE(is(cache_verdict_kind::lead));
    return verdict->lease;
  }
};

chat_response answer(const std::string& text = "the answer") {
  chat_response r;
  r.content = text;
  r.finish_reason = "stop";
  r.source = "a";
  r.model = "model-a";
  r.usage = {10, 5, 15};
  r.stats.attempts = 2;
  r.stats.generation_ms = 120;
  r.stats.usage_source = "reported";
  r.stats.cost_usd = 0.25;
  return r;
}

/// A backend whose every call fails, or answers `value`.
class scripted_backend : public cache_backend {
public:
  caf::optional<std::string> value;
  bool fail = false;

  caf::expected<caf::optional<std::string>> get(const std::string&,
                                                double) override {
    if (fail)
      return make_error(error_code::governance_unavailable, "redis down");
    return value;
  }
  caf::expected<bool> put(const std::string&, const std::string&,
                          double) override {
    if (fail)
      return make_error(error_code::governance_unavailable, "redis down");
    return true;
  }
  cache_backend_stats stats() const override {
    return {};
  }
  bool blocking() const override {
    return false;
  }
};

struct cache_fixture : actor_fixture {
  double wall = 1.7e9;
  cache_actor cache_ref;

  std::vector<caf::actor> callers;

  /// More cache actors on the same backend: other processes of a fleet.
  std::vector<cache_actor> peers;

  ~cache_fixture() {
    for (auto& c : callers)
      caf::anon_send(c, atom::cancel_v);
    caf::anon_send_exit(cache_ref, caf::exit_reason::user_shutdown);
    for (auto& p : peers)
      caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Another cache actor over `backend` (another gateway process).
  cache_actor spawn_peer(std::shared_ptr<cache_backend> backend) {
    peers.push_back(sys.spawn(pgw::cache, std::move(backend), "memory",
                              nullptr, [this] { return wall; }));
    sched.run();
    return peers.back();
  }

  /// Runs `f` with `ask`, `put`, `abandon` and `status` aimed at `at`.
  template <class F>
  void on(cache_actor at, F f) {
    std::swap(cache_ref, at);
    f();
    std::swap(cache_ref, at);
  }

  explicit cache_fixture(std::shared_ptr<cache_backend> backend = nullptr,
                         cache_backend_factory per_scope = nullptr) {
    if (!backend)
      backend = make_memory_cache({});
    auto clock = [this] { return wall; };
    if (per_scope)
      cache_ref = sys.spawn(pgw::scoped_cache, std::move(per_scope), "memory",
                            nullptr, clock);
    else
      cache_ref = sys.spawn(pgw::cache, std::move(backend), "memory", nullptr,
                            clock);
    sched.run();
  }

  /// A caller that asks the cache and then lives until told to cancel
  /// (a supervisor whose call goes on upstream).
  std::pair<caf::actor, std::shared_ptr<caller_log>>
  ask(const std::string& key, const std::string& mode = "on",
      caf::optional<double> wait_s = caf::none,
      const std::string& call_id = "c",
      caf::optional<double> max_age_s = caf::none,
      const std::string& scope = "llm") {
    auto log = std::make_shared<caller_log>();
    cache_lookup req{key, mode, max_age_s, wait_s, call_id, scope};
    auto c = cache_ref;
    auto a = sys.spawn([c, req, log](caf::event_based_actor* self) {
      self->request(c, caf::infinite, atom::cache_get_v, req)
        .then(
          [log](cache_verdict& v) {
            ++log->answers;
            log->verdict = std::move(v);
          },
          [log](caf::error& err) {
            ++log->answers;
            log->error = std::move(err);
          });
      return caf::behavior{[self](atom::cancel) { self->quit(); }};
    });
    sched.run();
    callers.push_back(a);
    return {a, log};
  }

  void put(const std::string& key, uint64_t lease, chat_response resp,
           const std::string& mode = "on", const std::string& scope = "llm") {
    caf::anon_send(cache_ref, atom::cache_put_v, key, lease, mode, scope,
                   std::move(resp));
    sched.run();
  }

  void abandon(const std::string& key, uint64_t lease) {
    caf::anon_send(cache_ref, atom::abandon_v, key, lease);
    sched.run();
  }

  cache_status status() {
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

void check_hit(const caller_log& log, const std::string& call_id,
               const std::string& content = "the answer") {
  REQUIRE(log.is(cache_verdict_kind::hit));
  const auto& r = log.verdict->response;
  CHECK(r.content == content);
  CHECK(r.call_id == call_id);
  CHECK(r.stats.cache_hit);
  CHECK(r.stats.attempts == 0);
  CHECK(r.stats.generation_ms == 0);
  CHECK(r.usage.prompt_tokens == 10);
  CHECK(r.usage.completion_tokens == 5);
  CHECK(r.source == "a");
  CHECK(r.model == "model-a");
  CHECK(r.finish_reason == "stop");
  CHECK(r.stats.cost_usd == 0.0);
  CHECK(r.stats.cost_saved_usd == 0.25);
}

} // namespace

TEST_CASE("cache actor: a miss leads, waiters get the leader's answer") {
  cache_fixture fx;
  auto [a, la] = fx.ask("k", "on", caf::none, "A");
  auto lease = la->lease();
  auto [b, lb] = fx.ask("k", "on", 30.0, "B");
  auto [c, lc] = fx.ask("k", "read_only", 30.0, "C");
  CHECK(lb->answers == 0);
  CHECK(lc->answers == 0);
  CHECK(fx.status().coalesced == 2);
  CHECK(fx.status().in_flight == 1);
  fx.put("k", lease, answer());
  check_hit(*lb, "B");
  check_hit(*lc, "C");
  auto st = fx.status();
  CHECK(st.stores == 1);
  CHECK(st.coalesced_hits == 2);
  CHECK(st.in_flight == 0);
  CHECK(st.entries == 1);
  // Later calls hit the stored answer; other keys miss.
  auto [d, ld] = fx.ask("k", "on", caf::none, "D");
  check_hit(*ld, "D");
  auto [e, le] = fx.ask("other");
  CHECK(le->is(cache_verdict_kind::lead));
  CHECK(fx.status().hits == 1);
  CHECK(fx.status().misses == 2);
  // The waiters' timers fire later and change nothing.
  fx.settle();
  CHECK(fx.status().waiter_timeouts == 0);
}

TEST_CASE("cache actor: when the leader fails, one waiter leads next") {
  cache_fixture fx;
  auto [a, la] = fx.ask("k");
  auto first = la->lease();
  auto [b, lb] = fx.ask("k", "on", caf::none, "B");
  auto [c, lc] = fx.ask("k", "on", caf::none, "C");
  fx.abandon("k", first);
  REQUIRE(lb->is(cache_verdict_kind::lead));
  CHECK(lc->answers == 0);
  auto second = lb->lease();
  CHECK(second != first);
  // A stale lease changes nothing.
  fx.abandon("k", first);
  CHECK(lc->answers == 0);
  fx.put("k", first, answer("stale")); // stored, but serves nobody
  CHECK(lc->answers == 0);
  fx.put("k", second, answer());
  check_hit(*lc, "C");
  CHECK(fx.status().promoted == 1);
}

TEST_CASE("cache actor: a waiter's deadline ends its wait, the leader goes on") {
  cache_fixture fx;
  auto [a, la] = fx.ask("k");
  auto lease = la->lease();
  auto [b, lb] = fx.ask("k", "on", 1.0, "B");
  auto [c, lc] = fx.ask("k", "on", 5.0, "C");
  fx.advance(std::chrono::milliseconds(999));
  CHECK(lb->answers == 0);
  fx.advance(std::chrono::milliseconds(2));
  REQUIRE(lb->answers == 1);
  CHECK(code_of(lb->error) == error_code::call_deadline_exceeded);
  CHECK(lc->answers == 0);
  CHECK(fx.status().waiter_timeouts == 1);
  fx.put("k", lease, answer());
  check_hit(*lc, "C");
  CHECK(fx.status().stores == 1);
}

TEST_CASE("cache actor: served waiters leave no timer in the clock") {
  // Each waiter's bound was a delayed message of its own, which CAF 0.17
  // cannot cancel: a hot key's waiters, served in milliseconds, left one
  // message each in the clock for their whole wait (memory grew with the
  // rate of coalesced calls times their deadline). Now the cache keeps
  // one message on its way, for the earliest bound.
  cache_fixture fx;
  auto pending_before = fx.sched.clock().schedule().size();
  for (int round = 0; round < 10; ++round) {
    auto [a, la] = fx.ask("k" + std::to_string(round));
    auto lease = la->lease();
    std::vector<std::shared_ptr<caller_log>> logs;
    for (int i = 0; i < 5; ++i)
      logs.push_back(
        fx.ask("k" + std::to_string(round), "on", 60.0 + i, "W").second);
    fx.put("k" + std::to_string(round), lease, answer());
    for (auto& log : logs)
      check_hit(*log, "W");
  }
  auto pending = fx.sched.clock().schedule().size() - pending_before;
  CHECK(pending <= 1); // 50 before
  // A waiter still waiting keeps its bound, and the lone tick ends it.
  auto [a, la] = fx.ask("late");
  auto [b, lb] = fx.ask("late", "on", 2.0, "B");
  fx.advance(std::chrono::seconds(61));
  REQUIRE(lb->answers == 1);
  CHECK(code_of(lb->error) == error_code::call_deadline_exceeded);
  CHECK(fx.status().waiter_timeouts == 1);
  fx.settle();
  CHECK(fx.sched.clock().schedule().empty());
}

TEST_CASE("cache actor: a leader that ends without an answer hands over") {
  cache_fixture fx;
  auto [a, la] = fx.ask("k");
  REQUIRE(la->is(cache_verdict_kind::lead));
  auto [b, lb] = fx.ask("k", "on", caf::none, "B");
  auto [c, lc] = fx.ask("k", "on", caf::none, "C");
  // The leader's caller cancelled: its supervisor ends.
  caf::anon_send(a, atom::cancel_v);
  fx.sched.run();
  REQUIRE(lb->is(cache_verdict_kind::lead));
  CHECK(lc->answers == 0);
  // The new leader ends too: the last waiter leads.
  caf::anon_send(b, atom::cancel_v);
  fx.sched.run();
  REQUIRE(lc->is(cache_verdict_kind::lead));
  fx.put("k", lc->lease(), answer());
  CHECK(fx.status().stores == 1);
  CHECK(fx.status().promoted == 2);
  CHECK(fx.status().in_flight == 0);
}

TEST_CASE("cache actor: cache off and write_only never wait nor lead") {
  cache_fixture fx;
  auto [a, la] = fx.ask("k");
  auto lease = la->lease();
  auto [b, lb] = fx.ask("k", "off");
  CHECK(lb->is(cache_verdict_kind::pass));
  auto [c, lc] = fx.ask("k", "write_only");
  CHECK(lc->is(cache_verdict_kind::pass));
  // A write_only answer is stored (lease 0: it serves no waiter).
  fx.put("k", 0, answer("fresh"), "write_only");
  CHECK(fx.status().stores == 1);
  fx.abandon("k", lease);
  CHECK(fx.status().in_flight == 0);
  // An `off` answer is never stored.
  fx.put("k2", 0, answer(), "off");
  auto [d, ld] = fx.ask("k2", "read_only");
  CHECK(ld->is(cache_verdict_kind::pass));
  auto [e, le] = fx.ask("k", "read_only");
  check_hit(*le, "c", "fresh");
  auto [f, lf] = fx.ask("k", "bogus");
  REQUIRE(lf->answers == 1);
  CHECK(code_of(lf->error) == error_code::invalid_request);
}

TEST_CASE("cache actor: incomplete answers are never stored nor shared") {
  cache_fixture fx;
  auto [a, la] = fx.ask("k");
  auto [b, lb] = fx.ask("k", "on", caf::none, "B");
  auto truncated = answer();
  truncated.finish_reason = "length";
  fx.put("k", la->lease(), truncated);
  // The waiter leads instead of getting a truncated answer.
  REQUIRE(lb->is(cache_verdict_kind::lead));
  auto bad_tool = answer();
  bad_tool.finish_reason = "tool_calls";
  bad_tool.tool_calls.push_back({"call_1", "function", "f", "{\"a\":"});
  fx.put("k", lb->lease(), bad_tool);
  auto no_reason = answer();
  no_reason.finish_reason.clear();
  fx.put("k", 0, no_reason);
  auto st = fx.status();
  CHECK(st.stores == 0);
  CHECK(st.not_stored == 3);
  CHECK(st.entries == 0);
}

TEST_CASE("cache actor: max_age_s limits what a read accepts") {
  cache_fixture fx;
  fx.put("k", 0, answer());
  fx.wall += 20;
  auto [a, la] = fx.ask("k", "on", caf::none, "A", 30.0);
  check_hit(*la, "A");
  auto [b, lb] = fx.ask("k", "on", caf::none, "B", 10.0);
  CHECK(lb->is(cache_verdict_kind::lead));
}

TEST_CASE("cache actor: each scope has its own TTL and memory limits") {
  settings cfg;
  cfg.global.cache_ttl_s = 100;
  cfg.scopes["SHORT"].cache.ttl_s = 10;
  cfg.scopes["SMALL"].cache.max_entries = 1;
  cfg.scopes["TINY"].cache.max_bytes = 1024;
  CHECK(cache_limits_of(cfg, "SHORT").ttl_s == 10);
  CHECK(cache_limits_of(cfg, "SMALL").ttl_s == 100); // PGW_CACHE_TTL_S
  CHECK(cache_limits_of(cfg, "TINY").max_value_bytes == 1024);
  CHECK(cache_limits_of(cfg, "NONE").max_entries == 10000);
  cache_fixture fx{nullptr, [cfg](const std::string& scope) {
                     return std::shared_ptr<cache_backend>(
                       make_memory_cache(cache_limits_of(cfg, scope)));
                   }};
  auto none = caf::none;
  // Same key in two scopes: two caches (keys of real calls differ anyway).
  fx.put("k", 0, answer(), "on", "SHORT");
  fx.put("k", 0, answer(), "on", "SMALL");
  fx.put("k2", 0, answer(), "on", "SHORT");
  fx.advance(std::chrono::seconds(50)); // the backends' (virtual) clock
  auto [a, la] = fx.ask("k", "read_only", none, "A", none, "SHORT");
  CHECK(la->is(cache_verdict_kind::pass)); // 50 s > 10 s: expired
  auto [b, lb] = fx.ask("k", "read_only", none, "B", none, "SMALL");
  check_hit(*lb, "B"); // 50 s < 100 s
  // SMALL keeps one entry: a second one evicts the first.
  fx.put("k2", 0, answer(), "on", "SMALL");
  auto [c, lc] = fx.ask("k", "read_only", none, "C", none, "SMALL");
  CHECK(lc->is(cache_verdict_kind::pass));
  CHECK(fx.status().evictions == 1);
  // TINY refuses an answer larger than its 1 KiB.
  fx.put("big", 0, answer(std::string(2000, 'x')), "on", "TINY");
  auto [d, ld] = fx.ask("big", "read_only", none, "D", none, "TINY");
  CHECK(ld->is(cache_verdict_kind::pass));
}

TEST_CASE("cache actor: backend errors and corrupt values are counted, the "
          "call goes on") {
  auto backend = std::make_shared<scripted_backend>();
  backend->fail = true;
  cache_fixture fx(backend);
  auto [a, la] = fx.ask("k");
  // Proceeds as a leader: identical calls still coalesce on it.
  REQUIRE(la->is(cache_verdict_kind::lead));
  auto [b, lb] = fx.ask("k", "on", caf::none, "B");
  fx.put("k", la->lease(), answer());
  check_hit(*lb, "B");
  CHECK(fx.status().errors == 2); // the read and the write
  backend->fail = false;
  backend->value = std::string{"{\"v\":1,\"content\":"};
  auto [c, lc] = fx.ask("k");
  CHECK(lc->is(cache_verdict_kind::lead));
  CHECK(fx.status().errors == 3);
  CHECK(fx.status().hits == 0);
}

TEST_CASE("cache actor: a length answer is stored and served only with "
          "store_length") {
  cache_limits keep;
  keep.store_length = true;
  cache_fixture fx{nullptr, [keep](const std::string& scope) {
                     return std::shared_ptr<cache_backend>(
                       make_memory_cache(scope == "KEEP" ? keep
                                                         : cache_limits{}));
                   }};
  auto cut = answer();
  cut.finish_reason = "length";
  auto none = caf::none;
  auto [a, la] = fx.ask("k", "on", none, "A", none, "KEEP");
  auto [b, lb] = fx.ask("k", "on", 30.0, "B", none, "KEEP");
  fx.put("k", la->lease(), cut, "on", "KEEP");
  REQUIRE(lb->is(cache_verdict_kind::hit)); // the waiter shares it
  CHECK(lb->verdict->response.finish_reason == "length");
  auto [c, lc] = fx.ask("k", "read_only", none, "C", none, "KEEP");
  REQUIRE(lc->is(cache_verdict_kind::hit));
  CHECK(lc->verdict->response.finish_reason == "length");
  // A scope without it stores none.
  auto [d, ld] = fx.ask("k", "on", none, "D", none, "LLM");
  fx.put("k", ld->lease(), cut, "on", "LLM");
  auto [e, le] = fx.ask("k", "read_only", none, "E", none, "LLM");
  CHECK(le->is(cache_verdict_kind::pass));
  CHECK(fx.status().stores == 1);
  CHECK(fx.status().not_stored == 1);
  settings cfg;
  cfg.scopes["S"].cache.store_length = true;
  CHECK(cache_limits_of(cfg, "S").store_length);
  CHECK_FALSE(cache_limits_of(cfg, "T").store_length);
}

TEST_CASE("cache actor: a stored length answer is a miss once the scope "
          "stops storing them") {
  auto backend = std::make_shared<scripted_backend>();
  auto cut = answer();
  cut.finish_reason = "length";
  backend->value = encode_cached_answer({cut, 1.7e9});
  cache_fixture fx(backend);
  auto [a, la] = fx.ask("k", "read_only");
  CHECK(la->is(cache_verdict_kind::pass));
  CHECK(fx.status().errors == 0); // not corrupt: refused
  CHECK(fx.status().misses == 1);
}

namespace {

/// Lets `total` virtual time pass in 10 ms steps, so timers set by timers
/// (polls, renewals) fire in between.
void walk(cache_fixture& fx, caf::timespan total) {
  auto step = std::chrono::milliseconds(10);
  for (caf::timespan t{0}; t < total; t += step)
    fx.advance(step);
}

/// A memory backend shared by several cache actors, with fleet leases.
std::shared_ptr<cache_backend> fleet_backend(double lease_s) {
  cache_limits limits;
  limits.lease_s = lease_s;
  return std::shared_ptr<cache_backend>(make_memory_cache(limits));
}

/// Two processes: `cache_ref` and `other`, over one backend with leases of
/// `lease_s`; the first process's call of "k" leads (`la`).
struct fleet_pair : cache_fixture {
  cache_actor other;
  std::shared_ptr<caller_log> la;

  explicit fleet_pair(double lease_s = 10)
    : fleet_pair(fleet_backend(lease_s)) {
  }

  explicit fleet_pair(std::shared_ptr<cache_backend> shared)
    : cache_fixture(shared) {
    other = spawn_peer(shared);
    la = ask("k", "on", caf::none, "A").second;
    REQUIRE(la->is(cache_verdict_kind::lead));
  }
};

} // namespace

TEST_CASE("cache actor: fleet single-flight: another process waits for the "
          "lease holder's answer") {
  fleet_pair fx;
  auto& other = fx.other;
  auto lease = fx.la->lease();
  CHECK(fx.status().fleet_leads == 1);
  std::shared_ptr<caller_log> lb, lc;
  fx.on(other, [&] {
    lb = fx.ask("k", "on", 30.0, "B").second;
    lc = fx.ask("k", "on", 30.0, "C").second; // a local waiter behind B
    CHECK(fx.status().fleet_waits == 1);
  });
  // Without the lease both would lead: two upstream calls.
  walk(fx, std::chrono::seconds(2)); // polls: the lease is held
  CHECK(lb->answers == 0);
  CHECK(lc->answers == 0);
  fx.put("k", lease, answer());
  walk(fx, std::chrono::milliseconds(200));
  check_hit(*lb, "B");
  check_hit(*lc, "C");
  fx.on(other, [&] {
    auto st = fx.status();
    CHECK(st.fleet_hits == 1);
    CHECK(st.in_flight == 0);
  });
}

TEST_CASE("cache actor: fleet single-flight: when the holder fails, a "
          "waiting process takes the lease and leads") {
  fleet_pair fx;
  auto& other = fx.other;
  auto& la = fx.la;
  std::shared_ptr<caller_log> lb, lc;
  fx.on(other, [&] {
    lb = fx.ask("k", "on", 30.0, "B").second;
    lc = fx.ask("k", "on", 30.0, "C").second;
  });
  walk(fx, std::chrono::milliseconds(500));
  fx.abandon("k", la->lease()); // no local waiter: the lease goes back
  walk(fx, std::chrono::milliseconds(200));
  REQUIRE(lb->is(cache_verdict_kind::lead));
  CHECK(lc->answers == 0);
  fx.on(other, [&] {
    CHECK(fx.status().fleet_takeovers == 1);
    fx.put("k", lb->lease(), answer());
  });
  check_hit(*lc, "C");
  // The first process reads the stored answer.
  auto [d, ld] = fx.ask("k", "on", caf::none, "D");
  check_hit(*ld, "D");
}

TEST_CASE("cache actor: fleet single-flight: a holder that vanished lets its "
          "lease expire, a waiter whose deadline passes first gives up") {
  auto shared = fleet_backend(3);
  cache_fixture fx(shared);
  // A process that died holding the lease: never renewed, never released.
  using seconds = std::chrono::duration<double>;
  auto now_s = seconds(fx.now().time_since_epoch()).count();
  auto held = shared->claim("k", "a-process-that-died", now_s);
  REQUIRE(held);
  REQUIRE(held->what == cache_claim::kind::lead);
  auto lb = fx.ask("k", "on", 1.0, "B").second;
  auto lc = fx.ask("k", "on", 30.0, "C").second;
  walk(fx, std::chrono::milliseconds(1100));
  REQUIRE(lb->answers == 1);
  CHECK(code_of(lb->error) == error_code::call_deadline_exceeded);
  CHECK(lc->answers == 0);
  walk(fx, std::chrono::seconds(2)); // 3.1 s: the lease expired
  REQUIRE(lc->is(cache_verdict_kind::lead));
}

TEST_CASE("cache actor: fleet single-flight: the holder renews its lease "
          "while its call lasts") {
  fleet_pair fx{3};
  auto& other = fx.other;
  auto& la = fx.la;
  std::shared_ptr<caller_log> lb;
  fx.on(other, [&] { lb = fx.ask("k", "on", 60.0, "B").second; });
  walk(fx, std::chrono::seconds(20)); // far beyond 3 s
  CHECK(lb->answers == 0);
  fx.put("k", la->lease(), answer());
  walk(fx, std::chrono::milliseconds(200));
  check_hit(*lb, "B");
  CHECK(fx.status().errors == 0);
}

TEST_CASE("cache actor: fleet single-flight: a process that shuts down gives "
          "its leases back at once") {
  fleet_pair fx; // leases last 10 s
  std::shared_ptr<caller_log> lb;
  fx.on(fx.other, [&] { lb = fx.ask("k", "on", 30.0, "B").second; });
  walk(fx, std::chrono::milliseconds(200));
  CHECK(lb->answers == 0);
  caf::anon_send_exit(fx.cache_ref, caf::exit_reason::user_shutdown);
  walk(fx, std::chrono::milliseconds(200));
  REQUIRE(lb->is(cache_verdict_kind::lead));
}
