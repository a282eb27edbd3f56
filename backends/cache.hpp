#pragma once

/// The response cache's storage contract (issue 14). The memory backend
/// keeps entries in the process (TTL, entry and byte limits, LRU eviction);
/// the Redis backend (backends/redis/cache.hpp) shares them across a fleet
/// with Redis' own TTLs. Both pass the same suite, tests/contracts/cache.cpp.
///
/// Backends store opaque values (an encoded answer, backends/cache_value.hpp);
/// decoding, and so noticing a corrupt value, is the caller's job.

#include <caf/expected.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace pgw {

/// Limits and policy of one scope's cache.
struct cache_limits {
  /// How long an entry is served after it was stored.
  double ttl_s = 3600;
  /// Memory backend: entries kept at most (least recently used go first).
  int64_t max_entries = 10000;
  /// Memory backend: bytes of keys and values kept at most.
  int64_t max_bytes = 64 * 1024 * 1024;
  /// Both: a larger value is refused, not stored.
  int64_t max_value_bytes = 1024 * 1024;
  /// Fleet single-flight ({S}__CACHE__FLEET_SINGLE_FLIGHT): how long a
  /// lease taken by `claim` lasts unless renewed; 0 = the scope does not
  /// coalesce across processes.
  double lease_s = 0;
  /// {S}__CACHE__STORE_LENGTH: answers cut by max_tokens (finish reason
  /// `length`) are stored and served too.
  bool store_length = false;
};

/// What `cache_backend::claim` found.
struct cache_claim {
  enum class kind {
    /// `value` is stored under the key.
    value,
    /// No value and no lease: the caller's token holds the lease now.
    lead,
    /// No value, and another token holds the lease.
    wait,
  };
  kind what = kind::lead;
  std::string value;
};

/// What a cache holds and did.
struct cache_backend_stats {
  int64_t entries = 0; ///< memory backend only (Redis: -1)
  int64_t bytes = 0;   ///< memory backend only (Redis: -1)
  uint64_t evictions = 0;
  uint64_t refused_too_large = 0;
};

/// Semantics every backend keeps:
/// - `put(key, value)` stores `value` for `ttl_s` and returns true, or
///   returns false (storing nothing, and removing an older value of the
///   key) when the value is larger than `max_value_bytes`.
/// - `get(key)` returns the value last stored under `key` if it was stored
///   less than `ttl_s` ago, else nothing.
/// - A backend may forget an entry earlier (memory: LRU eviction beyond
///   `max_entries` / `max_bytes`; Redis: the server's maxmemory policy).
/// - `now_s` is the caller's clock in seconds; the memory backend uses it,
///   the Redis backend ignores it (Redis' own TTLs).
/// Errors only come from remote backends (server down, wrong type at key).
class cache_backend {
public:
  virtual ~cache_backend();

  virtual caf::expected<caf::optional<std::string>> get(const std::string& key,
                                                        double now_s) = 0;

  virtual caf::expected<bool> put(const std::string& key,
                                  const std::string& value, double now_s) = 0;

  virtual cache_backend_stats stats() const = 0;

  /// True when calls block on the network (run them off CAF's scheduler).
  virtual bool blocking() const = 0;

  // -- fleet single-flight (leases) ---------------------------------------------
  //
  // One lease per key, held by an owner token for `lease_s` (limits) unless
  // renewed; gateways sharing a backend coalesce identical misses on it:
  // - `claim(key, token)` atomically returns the stored value if there is
  //   one; else takes the lease for `token` when nobody holds it (lead);
  //   else answers wait. A lease that expired is nobody's.
  // - `renew(key, token)` restarts the lease's `lease_s` and returns true
  //   while `token` holds it; false (and nothing changes) otherwise.
  // - `release(key, token)` ends the lease if `token` holds it (true), and
  //   never touches another token's lease (false).
  // The defaults suit a backend without leases: claim reads (a miss leads),
  // renew and release answer true.

  virtual caf::expected<cache_claim> claim(const std::string& key,
                                           const std::string& token,
                                           double now_s);

  virtual caf::expected<bool> renew(const std::string& key,
                                    const std::string& token, double now_s);

  virtual caf::expected<bool> release(const std::string& key,
                                      const std::string& token, double now_s);

  /// The limits this backend was made with (the defaults unless said).
  virtual cache_limits limits() const;
};

using cache_backend_ptr = std::unique_ptr<cache_backend>;

/// `backend.get(key)` as a claim that takes no lease: the value, or lead
/// on a miss (what `claim` does for a backend without leases).
caf::expected<cache_claim> claim_by_get(cache_backend& backend,
                                        const std::string& key, double now_s);

/// The in-process cache (backends/memory/cache.cpp). Not thread-safe: one
/// owner (the cache actor) calls it.
cache_backend_ptr make_memory_cache(cache_limits limits);

} // namespace pgw
