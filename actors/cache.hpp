#pragma once

/// The response cache actor (issue 14): one per process, owns the cache
/// backend and the single-flight table.
///
/// Single-flight: the first cacheable call of a key that misses leads (it
/// calls upstream under a lease); identical calls arriving meanwhile wait
/// for it, each bounded by its own `wait_s`. The leader's `cache_put`
/// serves every waiter with the answer (as a hit: attempts 0); its
/// `abandon`, or its end without either (the cache monitors leaders),
/// makes the oldest waiter the next leader. A waiter whose wait ends gets
/// `call_deadline_exceeded`; the leader goes on. Calls with `cache: off`
/// or `write_only` never wait and never lead.
///
/// Backend errors and corrupt values are counted and logged (at most every
/// 10 s); the call then proceeds uncached, as a leader (identical calls
/// still coalesce on it).
///
/// Fleet single-flight (a scope whose backend has a lease, `lease_s` > 0:
/// Redis with {S}__CACHE__FLEET_SINGLE_FLIGHT): a key's first miss in this
/// process `claim`s the key in the shared backend, atomically reading the
/// value or taking a lease (owner token, `lease_s`). Holding it, the call
/// leads for the fleet; the cache renews the lease every third of
/// `lease_s` while the flight lasts, and releases it after storing the
/// answer (the value lands first), or when the flight ends without one.
/// When another process holds the lease, the call becomes the first waiter
/// of a flight without a leader, and the cache polls the claim (backoff
/// from `poll_first` doubling to `poll_max`): a value serves every waiter
/// as a hit; a free lease (its holder failed, released it, or died and let
/// it expire) is taken and the oldest waiter leads; a backend error makes
/// the oldest waiter lead uncached. Each waiter stays bounded by its own
/// `wait_s`. So a failed leader elsewhere never fails a call here.

#include "actors/interfaces.hpp"
#include "backends/cache.hpp"

#include <caf/actor_clock.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace pgw {

class io_pool;
struct global_config;
struct settings;

/// The cache of one scope (its TTL, and for memory its own limits).
using cache_backend_factory =
  std::function<std::shared_ptr<cache_backend>(const std::string& scope)>;

struct cache_state {
  static inline const char* name = "cache";

  /// Gives back the fleet leases this process still holds (a shutdown):
  /// the other processes take over at once instead of after `lease_s`.
  ~cache_state();

  struct waiter {
    std::string key;
    std::string call_id;
    caf::actor_addr who;
    caf::typed_response_promise<cache_verdict> promise;
    /// When its wait ends (its `wait_s`); unset = no bound.
    caf::optional<caf::actor_clock::time_point> due;
  };

  /// A key with a call in flight.
  struct flight {
    uint64_t lease = 0;
    caf::actor_addr leader;
    std::deque<uint64_t> waiters;
    /// The scope of the call that opened the flight (its backend).
    std::string scope;
    /// The fleet lease this process holds for the key ("": none).
    std::string token;
    /// Waiting on another process's lease: no local leader; polling.
    bool fleet_wait = false;
    caf::timespan poll_delay{0};
  };

  /// Makes the backend of one scope, once, on the scope's first use.
  cache_backend_factory make_backend;
  std::unordered_map<std::string, std::shared_ptr<cache_backend>> backends;
  std::string backend_name;
  std::shared_ptr<io_pool> offload;
  /// Seconds since the epoch (stored_at of entries, max_age_s checks).
  std::function<double()> wall_clock;
  std::unordered_map<std::string, flight> flights;
  std::unordered_map<uint64_t, waiter> waiters;
  /// The waiters with a bound, earliest first. The cache wakes itself with
  /// one delayed message for the earliest (`ticks`: the times of those sent
  /// and not received yet), not one per waiter: CAF 0.17 cannot cancel a
  /// delayed message, so one per waiter would stay in the clock for the
  /// whole `wait_s` after most waiters are served (memory ~ rate x wait).
  std::set<std::pair<caf::actor_clock::time_point, uint64_t>> dues;
  std::multiset<caf::actor_clock::time_point> ticks;
  uint64_t next_id = 0;
  cache_status counters;
  caf::optional<caf::actor_clock::time_point> last_warning;
  /// Fleet single-flight: this process's part of every lease token, and
  /// the polling backoff of a flight waiting on another process.
  std::string token_base;
  caf::timespan poll_first = std::chrono::milliseconds(10);
  caf::timespan poll_max = std::chrono::milliseconds(100);
};

/// The cache actor over one backend per scope, made by `make_backend`
/// (named `backend_name` in its status, which sums the scopes' figures).
/// A blocking backend's calls run on `offload` (required then). `wall_clock`
/// (seconds since the epoch, for max_age_s across processes) defaults to
/// the actor's clock.
cache_actor::behavior_type
scoped_cache(cache_actor::stateful_pointer<cache_state> self,
             cache_backend_factory make_backend, std::string backend_name,
             std::shared_ptr<io_pool> offload,
             std::function<double()> wall_clock = nullptr);

/// `scoped_cache` with `backend` shared by every scope.
cache_actor::behavior_type
cache(cache_actor::stateful_pointer<cache_state> self,
      std::shared_ptr<cache_backend> backend, std::string backend_name,
      std::shared_ptr<io_pool> offload,
      std::function<double()> wall_clock = nullptr);

/// How long a fleet single-flight lease lasts unless renewed (a leader
/// whose process died delays the others by at most this).
inline constexpr double fleet_lease_s = 10;

/// The limits of `scope`'s cache: its CACHE__TTL_S (unset:
/// PGW_CACHE_TTL_S), CACHE__MAX_ENTRIES, CACHE__MAX_BYTES and
/// CACHE__STORE_LENGTH, and `fleet_lease_s` when the cache is Redis and
/// the scope has CACHE__FLEET_SINGLE_FLIGHT; a scope not in `cfg` gets the
/// defaults.
cache_limits cache_limits_of(const settings& cfg, const std::string& scope);

} // namespace pgw
