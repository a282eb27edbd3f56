#pragma once

/// The Redis breaker (SPEC §6): the state machine of one source kept in
/// Redis, so every gateway process of a fleet sees the same circuit. The
/// logic is backends/redis/breaker.lua, the twin of
/// backends/memory/breaker.cpp; each operation is one atomic script call.

#include "backends/breaker.hpp"
#include "backends/redis/client.hpp"

#include <string>

namespace pgw {

/// A breaker whose state lives in the Redis hash `<key_prefix>:brk` (every
/// node that shares the source passes the same prefix). Keeps every rule of
/// `breaker_backend` and of `memory_breaker`, plus:
/// - Time is Redis `TIME` (all nodes share one clock); `now_s` is ignored.
///   It never runs backwards (a wall-clock step back is read as no time).
/// - The hash holds the state, the rate buckets, the epoch and the
///   counters; its TTL is `redis_retention_s(max(max_cooldown_s, window_s,
///   probe_lease_s))`, refreshed by every call. A breaker unused for that
///   long starts again closed with epoch 0.
/// - Every call returns `governance_unavailable` when Redis cannot be
///   reached; nothing is changed then.
breaker_backend_ptr make_redis_breaker(redis_client_ptr client,
                                       std::string key_prefix,
                                       breaker_settings settings);

} // namespace pgw
