#include "actors/cache.hpp"

#include "backends/cache_value.hpp"
#include "config/log.hpp"
#include "config/settings.hpp"
#include "transport/io_pool.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>

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
      caf::anon_send(strong, atom::done_v, std::move(task));
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
/// older than `max_age_s`, an error or a corrupt value: counted).
caf::optional<cached_answer> answer_of(self_ptr self, maybe_value& res,
                                       const caf::optional<double>& max_age_s) {
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
  if (max_age_s && st.wall_clock() - decoded->stored_at_s > *max_age_s) {
    ++st.counters.misses;
    return caf::none;
  }
  ++st.counters.hits;
  return std::move(*decoded);
}

/// Serves every waiter of `key` with `stored` and ends its flight.
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
    w->second.promise.deliver(std::move(v));
    ++st.counters.coalesced_hits;
    st.waiters.erase(w);
  }
  st.flights.erase(f);
}

/// The flight of `key` lost its leader: the oldest waiter still waiting
/// leads next; without one, the flight ends.
void promote(self_ptr self, const std::string& key) {
  auto& st = self->state;
  auto f = st.flights.find(key);
  if (f == st.flights.end())
    return;
  auto& fl = f->second;
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
    st.waiters.erase(w);
    ++st.counters.promoted;
    return;
  }
  st.flights.erase(f);
}

/// A call waits on the flight of `req.key`.
caf::result<cache_verdict> wait_for(self_ptr self, cache_lookup& req) {
  auto& st = self->state;
  auto id = ++st.next_id;
  // Before the promise: making it takes the sender out of the message.
  auto who = sender_of(self);
  auto rp = self->make_response_promise<cache_verdict>();
  st.waiters.emplace(id, cache_state::waiter{req.key, req.call_id, who, rp});
  st.flights[req.key].waiters.push_back(id);
  ++st.counters.coalesced;
  if (req.wait_s) {
    auto d = std::chrono::duration<double>(std::max(0.0, *req.wait_s));
    self->delayed_send(self,
                       std::chrono::duration_cast<caf::timespan>(d),
                       atom::timer_v, id);
  }
  return rp;
}

/// Reads `req.key`; `lease` is the flight this read opened (0: none).
caf::result<cache_verdict> read(self_ptr self, cache_lookup req,
                                uint64_t lease) {
  auto rp = self->make_response_promise<cache_verdict>();
  auto backend = backend_of(self, req.scope);
  auto now = steady_s(self);
  auto key = req.key;
  run(
    self, *backend, [backend, key, now] { return backend->get(key, now); },
    [self, rp, req, lease](maybe_value res) mutable {
      auto& st = self->state;
      auto stored = answer_of(self, res, req.max_age_s);
      if (stored) {
        auto v = verdict(cache_verdict_kind::hit);
        v.response = hit_response(*stored, req.call_id);
        rp.deliver(std::move(v));
        if (lease != 0)
          serve_waiters(self, req.key, *stored);
        return;
      }
      auto f = st.flights.find(req.key);
      if (lease != 0 && f != st.flights.end() && f->second.lease == lease) {
        rp.deliver(verdict(cache_verdict_kind::lead, lease));
      } else {
        rp.deliver(verdict(cache_verdict_kind::pass));
      }
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
  watch(self, fl.leader);
  return read(self, std::move(req), fl.lease);
}

void offer(self_ptr self, const std::string& key, uint64_t lease,
           const std::string& mode_text, const std::string& scope,
           const chat_response& resp) {
  auto& st = self->state;
  auto mode = parse_cache_mode(mode_text);
  std::string why;
  bool ok = cacheable(resp, &why);
  auto f = st.flights.find(key);
  bool leads = lease != 0 && f != st.flights.end() && f->second.lease == lease;
  if (!ok) {
    ++st.counters.not_stored;
    if (leads)
      promote(self, key);
    return;
  }
  cached_answer stored{resp, st.wall_clock()};
  if (leads)
    serve_waiters(self, key, stored);
  if (!mode || !cache_writes(*mode))
    return;
  auto backend = backend_of(self, scope);
  auto value = encode_cached_answer(stored);
  auto now = steady_s(self);
  run(
    self, *backend, [backend, key, value, now] { return backend->put(key, value, now); },
    [self](caf::expected<bool> res) {
      if (!res)
        warn(self, "cache write failed: " + describe(res.error()));
      else if (*res)
        ++self->state.counters.stores;
      else
        ++self->state.counters.not_stored;
    });
}

void on_down(self_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
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
    [self](atom::timer, uint64_t id) {
      auto& st = self->state;
      auto w = st.waiters.find(id);
      if (w == st.waiters.end())
        return;
      auto f = st.flights.find(w->second.key);
      if (f != st.flights.end()) {
        auto& q = f->second.waiters;
        q.erase(std::remove(q.begin(), q.end(), id), q.end());
      }
      w->second.promise.deliver(
        make_error(error_code::call_deadline_exceeded,
                   "the deadline passed while waiting for an identical call "
                   "in flight"));
      st.waiters.erase(w);
      ++st.counters.waiter_timeouts;
    },
    [](atom::done, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
