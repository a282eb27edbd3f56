#pragma once

/// Messages of the response cache actor (issue 14, actors/cache.hpp).

#include "pgw/messages/chat.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>

namespace pgw {

/// A supervisor asks the cache before admission.
struct cache_lookup {
  /// `cache_key(scope, tenant, request)`.
  std::string key;
  /// The call's `cache` control: "", on, off, read_only, write_only.
  std::string mode;
  /// Reads accept only answers stored at most this long ago.
  caf::optional<double> max_age_s;
  /// How long the caller may wait on an identical call in flight (its
  /// remaining deadline); unset = no bound.
  caf::optional<double> wait_s;
  /// The caller's call id (a hit carries it).
  std::string call_id;
  /// The call's scope (its TTL and memory limits apply).
  std::string scope;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_lookup& x) {
  return f(caf::meta::type_name("pgw.cache_lookup"), x.key, x.mode,
           x.max_age_s, x.wait_s, x.call_id, x.scope);
}

/// What the cache tells a caller to do.
enum class cache_verdict_kind : uint8_t {
  /// `response` is the answer: return it, call nothing upstream.
  hit,
  /// Call upstream, then `offer` (or `abandon` on failure) with `lease`:
  /// identical calls wait for this one.
  lead,
  /// Call upstream uncached-by-coalescing: nobody waits on this call (cache
  /// off, read_only miss, write_only); offer the answer if the mode writes.
  pass,
};

const char* to_string(cache_verdict_kind x);

struct cache_verdict {
  cache_verdict_kind kind = cache_verdict_kind::pass;
  uint64_t lease = 0;
  chat_response response;
  /// A hit served to a waiter (its leader's answer, or a value another
  /// process stored while it waited), not read from the store for it.
  bool coalesced = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_verdict& x) {
  return f(caf::meta::type_name("pgw.cache_verdict"), x.kind, x.lease,
           x.response, x.coalesced);
}

/// The cache actor's counters.
struct cache_status {
  std::string backend;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t stores = 0;
  /// Answers offered but not stored (truncated, invalid tool calls, too big).
  uint64_t not_stored = 0;
  /// Calls that waited on an identical call in flight.
  uint64_t coalesced = 0;
  /// Waiters served by their leader's answer.
  uint64_t coalesced_hits = 0;
  /// Waiters whose deadline passed while they waited.
  uint64_t waiter_timeouts = 0;
  /// Hits the caller could not use (a structured call's schema refused the
  /// stored answer): it asked the sources instead. Not in `hits` or
  /// `coalesced_hits`; a refused read counts in `misses`.
  uint64_t unfit_hits = 0;
  /// Waiters that became the leader after their leader failed or left.
  uint64_t promoted = 0;
  /// Waiters whose call ended while they waited (cancelled by its caller):
  /// dropped, neither served nor promoted.
  uint64_t waiters_left = 0;
  /// Backend errors and corrupt values (each a warning; the call went on
  /// uncached).
  uint64_t errors = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
  uint64_t evictions = 0;
  /// Keys with a call in flight now.
  int64_t in_flight = 0;
  /// Fleet single-flight: leases this process took (it called upstream
  /// for the fleet), flights that waited on another process's lease, of
  /// those the ones answered by its stored value, and the ones that took
  /// the lease over (its holder failed, left or expired).
  uint64_t fleet_leads = 0;
  uint64_t fleet_waits = 0;
  uint64_t fleet_hits = 0;
  uint64_t fleet_takeovers = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_status& x) {
  return f(caf::meta::type_name("pgw.cache_status"), x.backend, x.hits,
           x.misses, x.stores, x.not_stored, x.coalesced, x.coalesced_hits,
           x.waiter_timeouts, x.unfit_hits, x.promoted, x.waiters_left,
           x.errors, x.entries, x.bytes, x.evictions, x.in_flight,
           x.fleet_leads, x.fleet_waits, x.fleet_hits, x.fleet_takeovers);
}

} // namespace pgw
