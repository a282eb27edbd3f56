#pragma once

/// The Redis response cache (issue 14): entries shared by every gateway
/// process of a fleet, under a namespace (PGW_CACHE_NAMESPACE), with Redis'
/// own TTLs.

#include "backends/cache.hpp"
#include "backends/redis/client.hpp"

#include <string>

namespace pgw {

/// A cache whose entries live in Redis at `<key_prefix>:<key>` (SET with PX
/// = ttl_s, GET). Keeps every rule of `cache_backend`, plus:
/// - `max_entries` and `max_bytes` do not apply (the server's maxmemory
///   policy evicts); `max_value_bytes` does, before anything is sent.
/// - `now_s` is ignored: Redis expires entries itself.
/// - Calls block for a round trip: run them off CAF's scheduler threads.
/// - A server that cannot be reached, or a key holding another type, is an
///   error naming the cause; nothing is stored then.
cache_backend_ptr make_redis_cache(redis_client_ptr client,
                                   std::string key_prefix, cache_limits limits);

} // namespace pgw
