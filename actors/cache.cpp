#include "actors/cache.hpp"

#include "backends/cache_value.hpp"
#include "config/support/log.hpp"
#include "config/settings.hpp"
#include "config/support/io_pool.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

namespace pgw {

namespace {

using self_ptr = cache_actor::stateful_pointer<cache_state>;
using maybe_value = caf::expected<caf::optional<std::string>>;

double steady_s(self_ptr self) {
  using seconds = std::chrono::duration<double>;
  return seconds(self->clock().now().time_since_epoch()).count();
}

/// A counted warning, logged at most every 10 s (a Redis outage must not
/// flood the log with one line per call).
void warn(self_ptr self, const std::string& text) {
  ++self->state.counters.errors;
  auto now = self->clock().now();
  auto& last = self->state.last_warning;
  if (last && now - *last < std::chrono::seconds(10))
    return;
  last = now;
  log::warn(self->name(), "{} (the call proceeds uncached)", text);
}

/// The backend of `scope`, made on first use.
std::shared_ptr<cache_backend> backend_of(self_ptr self,
                                          const std::string& scope) {
  auto& slot = self->state.backends[scope];
  if (!slot)
    slot = self->state.make_backend(scope);
  return slot;
}

/// Runs `work` (a call of `backend`) and then `done` with its result inside
/// the actor: inline for the memory backend, on the offload pool for a
/// blocking one.
template <class Work, class Done>
void run(self_ptr self, const cache_backend& backend, Work work, Done done) {
  auto& st = self->state;
  if (!backend.blocking() || !st.offload) {
    done(work());
    return;
  }
  // A weak handle: a pool thread must never hold the last reference (the
  // actor's state owns the pool, whose destructor waits for its threads).
  auto me = caf::actor_cast<caf::actor_addr>(self);
  st.offload->submit([me, work = std::move(work), done = std::move(done)]() {
    auto res = work();
    auto task = std::make_shared<local_task>();
    task->run = [done, res = std::move(res)]() mutable {
      done(std::move(res));
    };
    if (auto strong = caf::actor_cast<caf::actor>(me))
      caf::anon_send(strong, atom::internal_v, std::move(task));
  });
}

caf::actor_addr sender_of(self_ptr self) {
  return caf::actor_cast<caf::actor_addr>(self->current_sender());
}

/// Monitors a leader: its end without an answer hands the flight over.
void watch(self_ptr self, const caf::actor_addr& who) {
  if (who)
    self->monitor(who);
}

cache_verdict verdict(cache_verdict_kind kind, uint64_t lease = 0) {
  cache_verdict v;
  v.kind = kind;
  v.lease = lease;
  return v;
}

/// The stored answer under a read's result, or nothing (a miss, an entry
/// older than `max_age_s`, a `length` answer without `store_length`, an
/// error or a corrupt value: counted).
caf::optional<cached_answer> answer_of(self_ptr self, maybe_value& res,
                                       const caf::optional<double>& max_age_s,
                                       bool store_length) {
  auto& st = self->state;
  if (!res) {
    warn(self, "cache read failed: " + describe(res.error()));
    return caf::none;
  }
  if (!*res) {
    ++st.counters.misses;
    return caf::none;
  }
  auto decoded = decode_cached_answer(**res);
  if (!decoded) {
    warn(self, describe(decoded.error()));
    return caf::none;
  }
  // A `length` answer is served only while the scope stores them.
  bool refused = decoded->response.finish_reason == "length" && !store_length;
  if (refused
      || (max_age_s && st.wall_clock() - decoded->stored_at_s > *max_age_s)) {
    ++st.counters.misses;
    return caf::none;
  }
  ++st.counters.hits;
  return std::move(*decoded);
}

/// Runs `work` on `backend` without a result to wait for (a lease renewal
/// or release): an error is a counted warning.
template <class Work>
void fire(self_ptr self, const std::shared_ptr<cache_backend>& backend,
          const char* what, Work work) {
  run(self, *backend, std::move(work), [self, what](caf::expected<bool> res) {
    if (!res)
      warn(self, std::string{what} + " failed: " + describe(res.error()));
  });
}

/// Ends the fleet lease `token` of `key` (the next process's poll takes it
/// over).
void drop_lease(self_ptr self, const std::shared_ptr<cache_backend>& backend,
                const std::string& key, const std::string& token) {
  auto now = steady_s(self);
  fire(self, backend, "cache lease release",
       [backend, key, token, now] { return backend->release(key, token, now); });
}

/// Ends `fl`'s fleet lease, if it holds one.
void release_lease(self_ptr self, const std::string& key,
                   cache_state::flight& fl) {
  if (!fl.token.empty())
    drop_lease(self, backend_of(self, fl.scope), key,
               std::exchange(fl.token, std::string{}));
}

/// Takes waiter `w` out of the table (and out of `dues`).
void forget(cache_state& st,
            std::unordered_map<uint64_t, cache_state::waiter>::iterator w) {
  if (w->second.due)
    st.dues.erase({*w->second.due, w->first});
  st.waiters.erase(w);
}

/// Serves every waiter of `key` with `stored` and ends its flight (its
/// lease, if any, stays with the caller: see `offer`).
void serve_waiters(self_ptr self, const std::string& key,
                   const cached_answer& stored) {
  auto& st = self->state;
  auto f = st.flights.find(key);
  if (f == st.flights.end())
    return;
  for (auto id : f->second.waiters) {
    auto w = st.waiters.find(id);
    if (w == st.waiters.end())
      continue;
    auto v = verdict(cache_verdict_kind::hit);
    v.response = hit_response(stored, w->second.call_id);
    v.coalesced = true;
    w->second.promise.deliver(std::move(v));
    if (w->second.who)
      self->demonitor(w->second.who);
    ++st.counters.coalesced_hits;
    forget(st, w);
  }
  // The leader has its answer: its end no longer concerns this flight (and
  // a hit's supervisor costs no down message).
  if (f->second.leader)
    self->demonitor(f->second.leader);
  st.flights.erase(f);
}

/// The flight of `key` lost its leader: the oldest waiter still waiting
/// leads next (keeping the flight's fleet lease); without one, the flight
/// ends and its lease is released.
void promote(self_ptr self, const std::string& key) {
  auto& st = self->state;
  auto f = st.flights.find(key);
  if (f == st.flights.end())
    return;
  auto& fl = f->second;
  fl.fleet_wait = false;
  while (!fl.waiters.empty()) {
    auto id = fl.waiters.front();
    fl.waiters.pop_front();
    auto w = st.waiters.find(id);
    if (w == st.waiters.end())
      continue;
    fl.lease = ++st.next_id;
    fl.leader = w->second.who;
    // A leader that is already gone is noticed at once (down_msg).
    watch(self, fl.leader);
    w->second.promise.deliver(verdict(cache_verdict_kind::lead, fl.lease));
    forget(st, w);
    ++st.counters.promoted;
    return;
  }
  release_lease(self, key, fl);
  st.flights.erase(f);
}

void drop_waiter(self_ptr self, uint64_t id);

/// Makes sure a tick comes no later than the earliest waiter's bound (a
/// tick already on its way for an earlier time will do: it sends the next).
void schedule_tick(self_ptr self) {
  auto& st = self->state;
  if (st.dues.empty())
    return;
  auto next = st.dues.begin()->first;
  if (!st.ticks.empty() && *st.ticks.begin() <= next)
    return;
  st.ticks.insert(next);
  auto now = self->clock().now();
  self->delayed_send(self, next > now ? next - now : caf::timespan{0},
                     atom::timer_v);
}

/// Ends the wait of every waiter whose bound has passed.
void on_tick(self_ptr self) {
  auto& st = self->state;
  // Ticks come in the order of their times, each no earlier than the time
  // it was sent for: this one is the first entry.
  if (!st.ticks.empty())
    st.ticks.erase(st.ticks.begin());
  auto now = self->clock().now();
  while (!st.dues.empty() && st.dues.begin()->first <= now) {
    auto id = st.dues.begin()->second;
    auto w = st.waiters.find(id);
    if (w == st.waiters.end()) { // cannot happen: forget() keeps both
      st.dues.erase(st.dues.begin());
      continue;
    }
    w->second.promise.deliver(
      make_error(error_code::call_deadline_exceeded,
                 "the deadline passed while waiting for an identical call "
                 "in flight"));
    if (w->second.who)
      self->demonitor(w->second.who);
    drop_waiter(self, id);
    ++st.counters.waiter_timeouts;
  }
  schedule_tick(self);
}

/// Adds a waiter on the flight of `key` (at the front: the oldest) whose
/// wait ends after `wait_s`.
void add_waiter(self_ptr self, const std::string& key, cache_state::waiter w,
                const caf::optional<double>& wait_s, bool front) {
  auto& st = self->state;
  auto id = ++st.next_id;
  // A waiter whose call ends (cancelled) waits no more: on_down.
  watch(self, w.who);
  if (wait_s) {
    auto d = std::chrono::duration<double>(std::max(0.0, *wait_s));
    w.due = self->clock().now() + std::chrono::duration_cast<caf::timespan>(d);
    st.dues.emplace(*w.due, id);
  }
  st.waiters.emplace(id, std::move(w));
  auto& q = st.flights[key].waiters;
  if (front)
    q.push_front(id);
  else
    q.push_back(id);
  schedule_tick(self);
}

/// A call waits on the flight of `req.key`.
caf::result<cache_verdict> wait_for(self_ptr self, cache_lookup& req) {
  // Before the promise: making it takes the sender out of the message.
  auto who = sender_of(self);
  auto rp = self->make_response_promise<cache_verdict>();
  add_waiter(self, req.key, {req.key, req.call_id, who, rp, {}}, req.wait_s,
             false);
  ++self->state.counters.coalesced;
  return rp;
}

// -- fleet single-flight ------------------------------------------------------

/// Runs `task` inside the actor after `delay`.
template <class Task>
void after(self_ptr self, caf::timespan delay, Task task) {
  auto t = std::make_shared<local_task>();
  t->run = std::move(task);
  self->delayed_send(self, delay, atom::internal_v, std::move(t));
}

/// Renews the lease `token` of `key` every third of its lifetime while the
/// flight holds it.
void keep_lease(self_ptr self, const std::string& key, std::string token,
                double lease_s) {
  auto every = std::chrono::duration<double>(lease_s / 3);
  after(self, std::chrono::duration_cast<caf::timespan>(every),
        [self, key, token, lease_s] {
          auto& st = self->state;
          auto f = st.flights.find(key);
          if (f == st.flights.end() || f->second.token != token)
            return;
          auto backend = backend_of(self, f->second.scope);
          auto now = steady_s(self);
          run(
            self, *backend,
            [backend, key, token, now] {
              return backend->renew(key, token, now);
            },
            [self, key, token, lease_s](caf::expected<bool> res) {
              auto& st = self->state;
              auto f = st.flights.find(key);
              if (f == st.flights.end() || f->second.token != token)
                return;
              if (!res)
                warn(self, "cache lease renewal failed: "
                             + describe(res.error()));
              if (res && !*res) {
                // Lost (it expired): another process may lead now; this
                // call goes on, and still stores its answer.
                f->second.token.clear();
                return;
              }
              keep_lease(self, key, token, lease_s);
            });
        });
}

/// The flight of `key` now holds the fleet lease `token`.
void hold_lease(self_ptr self, const std::string& key, cache_state::flight& fl,
                std::string token) {
  fl.token = token;
  ++self->state.counters.fleet_leads;
  keep_lease(self, key, std::move(token),
             backend_of(self, fl.scope)->limits().lease_s);
}

void poll(self_ptr self, const std::string& key, uint64_t lease);

/// Polls the claim of a flight waiting on another process after its
/// backoff.
void schedule_poll(self_ptr self, const std::string& key,
                   cache_state::flight& fl) {
  auto& st = self->state;
  fl.poll_delay = fl.poll_delay.count() == 0
                    ? st.poll_first
                    : std::min(st.poll_max, fl.poll_delay * 2);
  after(self, fl.poll_delay,
        [self, key, lease = fl.lease] { poll(self, key, lease); });
}

/// The token of the flight `lease` (unique across the fleet).
std::string token_of(self_ptr self, uint64_t lease) {
  return self->state.token_base + ":" + std::to_string(lease);
}

void poll(self_ptr self, const std::string& key, uint64_t lease) {
  auto& st = self->state;
  auto f = st.flights.find(key);
  if (f == st.flights.end() || !f->second.fleet_wait
      || f->second.lease != lease)
    return;
  if (f->second.waiters.empty()) {
    st.flights.erase(f); // every waiter's wait ended
    return;
  }
  auto backend = backend_of(self, f->second.scope);
  auto now = steady_s(self);
  auto token = token_of(self, lease);
  run(
    self, *backend,
    [backend, key, token, now] { return backend->claim(key, token, now); },
    [self, backend, key, lease, token](caf::expected<cache_claim> res) {
      auto& st = self->state;
      auto f = st.flights.find(key);
      if (f == st.flights.end() || !f->second.fleet_wait
          || f->second.lease != lease) {
        // Nobody waits any more: a lease just taken goes back.
        if (res && res->what == cache_claim::kind::lead)
          drop_lease(self, backend, key, token);
        return;
      }
      auto& fl = f->second;
      if (!res) {
        warn(self, "cache lease claim failed: " + describe(res.error()));
        promote(self, key);
        return;
      }
      switch (res->what) {
        case cache_claim::kind::wait:
          schedule_poll(self, key, fl);
          return;
        case cache_claim::kind::lead:
          ++st.counters.fleet_takeovers;
          hold_lease(self, key, fl, token);
          promote(self, key);
          return;
        case cache_claim::kind::value:
          break;
      }
      auto decoded = decode_cached_answer(res->value);
      if (!decoded) {
        warn(self, describe(decoded.error()));
        promote(self, key);
        return;
      }
      ++st.counters.fleet_hits;
      serve_waiters(self, key, *decoded);
    });
}

/// The first call of `key` in this process found another process's lease:
/// it waits (first in line, bounded by its wait) while the cache polls.
void wait_on_fleet(self_ptr self, const cache_lookup& req,
                   caf::typed_response_promise<cache_verdict> rp) {
  auto& st = self->state;
  auto& fl = st.flights[req.key];
  auto who = std::exchange(fl.leader, caf::actor_addr{});
  fl.fleet_wait = true;
  add_waiter(self, req.key, {req.key, req.call_id, who, std::move(rp), {}},
             req.wait_s, true);
  ++st.counters.fleet_waits;
  schedule_poll(self, req.key, fl);
}

// -- reads --------------------------------------------------------------------

/// Reads `req.key`; `lease` is the flight this read opened (0: none). A
/// flight of a scope with a fleet lease claims the key instead.
caf::result<cache_verdict> read(self_ptr self, cache_lookup req,
                                uint64_t lease) {
  auto rp = self->make_response_promise<cache_verdict>();
  auto backend = backend_of(self, req.scope);
  auto now = steady_s(self);
  auto key = req.key;
  bool fleet = lease != 0 && backend->limits().lease_s > 0;
  auto token = fleet ? token_of(self, lease) : std::string{};
  run(
    self, *backend,
    [backend, key, now, token, fleet] {
      return fleet ? backend->claim(key, token, now)
                   : claim_by_get(*backend, key, now);
    },
    [self, rp, req, lease, token](caf::expected<cache_claim> res) mutable {
      auto& st = self->state;
      auto f = st.flights.find(req.key);
      bool ours = lease != 0 && f != st.flights.end()
                  && f->second.lease == lease;
      if (res && res->what == cache_claim::kind::wait && ours) {
        wait_on_fleet(self, req, std::move(rp));
        return;
      }
      if (res && res->what == cache_claim::kind::lead && !token.empty()) {
        if (ours)
          hold_lease(self, req.key, f->second, token);
        else // the flight moved on meanwhile (its leader left)
          drop_lease(self, backend_of(self, req.scope), req.key, token);
      }
      maybe_value value = caf::optional<std::string>{};
      if (!res)
        value = std::move(res.error());
      else if (res->what == cache_claim::kind::value)
        value = caf::optional<std::string>{std::move(res->value)};
      auto limits = backend_of(self, req.scope)->limits();
      auto stored = answer_of(self, value, req.max_age_s, limits.store_length);
      if (stored) {
        auto v = verdict(cache_verdict_kind::hit);
        v.response = hit_response(*stored, req.call_id);
        rp.deliver(std::move(v));
        if (ours)
          serve_waiters(self, req.key, *stored);
        return;
      }
      if (ours)
        rp.deliver(verdict(cache_verdict_kind::lead, lease));
      else
        rp.deliver(verdict(cache_verdict_kind::pass));
    });
  return rp;
}

caf::result<cache_verdict> lookup(self_ptr self, cache_lookup& req) {
  auto& st = self->state;
  auto mode = parse_cache_mode(req.mode);
  if (!mode)
    return mode.error();
  if (!cache_reads(*mode))
    return verdict(cache_verdict_kind::pass);
  if (st.flights.count(req.key) > 0)
    return wait_for(self, req);
  if (*mode == cache_mode::read_only)
    return read(self, std::move(req), 0);
  auto& fl = st.flights[req.key];
  fl.lease = ++st.next_id;
  fl.leader = sender_of(self);
  fl.scope = req.scope;
  watch(self, fl.leader);
  return read(self, std::move(req), fl.lease);
}

void offer(self_ptr self, const std::string& key, uint64_t lease,
           const std::string& mode_text, const std::string& scope,
           const chat_response& resp) {
  auto& st = self->state;
  auto mode = parse_cache_mode(mode_text);
  auto backend = backend_of(self, scope);
  std::string why;
  bool ok = cacheable(resp, &why, backend->limits().store_length);
  auto f = st.flights.find(key);
  bool leads = lease != 0 && f != st.flights.end() && f->second.lease == lease;
  if (!ok) {
    ++st.counters.not_stored;
    if (leads)
      promote(self, key);
    return;
  }
  cached_answer stored{resp, st.wall_clock()};
  // The lease goes back after the value is stored (never before: a poll in
  // between would find neither and call upstream again).
  std::string token;
  if (leads) {
    token = std::exchange(f->second.token, std::string{});
    serve_waiters(self, key, stored);
  }
  if (!mode || !cache_writes(*mode)) {
    if (!token.empty())
      drop_lease(self, backend, key, token);
    return;
  }
  auto now = steady_s(self);
  auto value = encode_cached_answer(stored);
  run(
    self, *backend,
    [backend, key, value, now, token] {
      auto res = backend->put(key, value, now);
      if (!token.empty())
        (void) backend->release(key, token, now);
      return res;
    },
    [self](caf::expected<bool> res) {
      if (!res)
        warn(self, "cache write failed: " + describe(res.error()));
      else if (*res)
        ++self->state.counters.stores;
      else
        ++self->state.counters.not_stored;
    });
}

/// Takes waiter `id` out of its flight; a flight waiting on another
/// process ends with its last waiter.
void drop_waiter(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto w = st.waiters.find(id);
  if (w == st.waiters.end())
    return;
  auto f = st.flights.find(w->second.key);
  forget(st, w);
  if (f == st.flights.end())
    return;
  auto& q = f->second.waiters;
  q.erase(std::remove(q.begin(), q.end(), id), q.end());
  if (f->second.fleet_wait && q.empty())
    st.flights.erase(f);
}

void on_down(self_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  // A waiter whose call ended (cancelled by its caller) is not served nor
  // promoted: nobody would read the answer, and a lead would go to nobody.
  std::vector<uint64_t> gone;
  for (auto& [id, w] : st.waiters)
    if (w.who == msg.source)
      gone.push_back(id);
  for (auto id : gone) {
    drop_waiter(self, id);
    ++st.counters.waiters_left;
  }
  std::vector<std::string> orphaned;
  for (auto& [key, fl] : st.flights)
    if (fl.leader == msg.source)
      orphaned.push_back(key);
  for (auto& key : orphaned)
    promote(self, key);
}

/// The scopes' figures summed (-1: a backend that does not count).
cache_backend_stats backend_stats(self_ptr self) {
  cache_backend_stats sum;
  for (auto& [scope, backend] : self->state.backends) {
    auto b = backend->stats();
    sum.entries = b.entries < 0 || sum.entries < 0 ? -1
                                                   : sum.entries + b.entries;
    sum.bytes = b.bytes < 0 || sum.bytes < 0 ? -1 : sum.bytes + b.bytes;
    sum.evictions += b.evictions;
    sum.refused_too_large += b.refused_too_large;
  }
  return sum;
}

} // namespace

cache_state::~cache_state() {
  for (auto& [key, fl] : flights) {
    auto b = backends.find(fl.scope);
    if (fl.token.empty() || b == backends.end() || !b->second)
      continue;
    auto give_back = [backend = b->second, key = key, token = fl.token] {
      (void) backend->release(key, token, 0);
    };
    // The pool finishes its tasks before it goes (it is destroyed with
    // this state, or later by its last owner).
    if (b->second->blocking() && offload)
      offload->submit(std::move(give_back));
    else
      give_back();
  }
}

cache_limits cache_limits_of(const settings& cfg, const std::string& scope) {
  cache_limits limits;
  limits.ttl_s = cfg.global.cache_ttl_s;
  auto sc = cfg.find(scope);
  if (sc == nullptr)
    return limits;
  limits.ttl_s = sc->cache.ttl_s.value_or(limits.ttl_s);
  limits.max_entries = sc->cache.max_entries;
  limits.max_bytes = sc->cache.max_bytes;
  limits.max_value_bytes = std::min(limits.max_value_bytes, limits.max_bytes);
  limits.store_length = sc->cache.store_length;
  if (sc->cache.fleet_single_flight
      && cfg.global.cache_backend == cache_store::redis)
    limits.lease_s = fleet_lease_s;
  return limits;
}

cache_actor::behavior_type
cache(cache_actor::stateful_pointer<cache_state> self,
      std::shared_ptr<cache_backend> backend, std::string backend_name,
      std::shared_ptr<io_pool> offload, std::function<double()> wall_clock) {
  return scoped_cache(
    self, [backend](const std::string&) { return backend; },
    std::move(backend_name), std::move(offload), std::move(wall_clock));
}

cache_actor::behavior_type
scoped_cache(cache_actor::stateful_pointer<cache_state> self,
             cache_backend_factory make_backend, std::string backend_name,
             std::shared_ptr<io_pool> offload,
             std::function<double()> wall_clock) {
  auto& st = self->state;
  st.make_backend = std::move(make_backend);
  st.backend_name = std::move(backend_name);
  st.offload = std::move(offload);
  // Without one, the actor's own clock (virtual in tests); the node builder
  // passes the actor clock plus the wall offset (wall_offset_ms), as the
  // gateway's rows use: stored times are compared across processes.
  st.wall_clock = wall_clock ? std::move(wall_clock) : [self] {
    using seconds = std::chrono::duration<double>;
    return seconds(self->clock().now().time_since_epoch()).count();
  };
  // Tokens of this process's fleet leases: random, so no two processes
  // (or restarts) share one.
  std::random_device rd;
  st.token_base = fmt::format("{:08x}{:08x}", rd(), rd());
  self->set_down_handler(
    [self](caf::down_msg& msg) { on_down(self, msg); });
  return {
    [self](atom::cache_get, cache_lookup& req) -> caf::result<cache_verdict> {
      return lookup(self, req);
    },
    [self](atom::cache_put, std::string& key, uint64_t lease,
           std::string& mode, std::string& scope, chat_response& resp) {
      offer(self, key, lease, mode, scope, resp);
    },
    [self](atom::unfit, bool coalesced) {
      auto& c = self->state.counters;
      auto& counted = coalesced ? c.coalesced_hits : c.hits;
      if (counted > 0)
        --counted;
      if (!coalesced)
        ++c.misses;
      ++c.unfit_hits;
    },
    [self](atom::abandon, std::string& key, uint64_t lease) {
      auto f = self->state.flights.find(key);
      if (f != self->state.flights.end() && f->second.lease == lease)
        promote(self, key);
    },
    [self](atom::status) {
      auto s = self->state.counters;
      auto b = backend_stats(self);
      s.backend = self->state.backend_name;
      s.entries = b.entries;
      s.bytes = b.bytes;
      s.evictions = b.evictions;
      s.in_flight = static_cast<int64_t>(self->state.flights.size());
      return s;
    },
    [self](atom::timer) { on_tick(self); },
    [](atom::internal, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
