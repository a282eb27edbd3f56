#pragma once

/// The Redis limiter (SPEC §5): the windows and leases of one source kept in
/// Redis, so every gateway process of a fleet shares its RPM, TPM and
/// concurrency limits. The logic is backends/redis/limiter.lua, the twin of
/// backends/memory/limiter.cpp; each operation is one atomic script call.

#include "backends/limiter.hpp"
#include "backends/redis/client.hpp"

#include <string>

namespace pgw {

/// A limiter whose state lives in Redis under `key_prefix` (e.g.
/// "pgw:LLM:openai-a"; every node that shares the source passes the same
/// prefix). Keeps every rule of `limiter_backend`, plus:
/// - Time is Redis `TIME` (all nodes share one clock); `now_s` is ignored.
///   It never runs backwards (a wall-clock step back is read as no time).
/// - Keys: `<prefix>:lim:win` (ZSET permit → acquisition time),
///   `:lim:tok` (HASH permit → tokens, "sum"), `:lim:lease` (ZSET permit →
///   lease expiry), `:lim:seq` (INCR), `:lim:stats` (HASH of the counters,
///   shared by all nodes) and `:lim:p:<n>` (one per permit that is
///   unsettled and not forgotten). TTLs: the window keys window_s + 1 s
///   after the newest acquisition; a permit record max(lease_s, window_s) +
///   1 s (and deleted as soon as it is settled, or its lease ended and its
///   entry aged out); the counters, sequence and leases
///   `redis_retention_s(max(lease_s, window_s))` after the last call.
/// - Permit ids are "<source>-<tag>-<n>": `tag` names the prefix (8 hex
///   digits of its SHA1), `n` comes from the shared sequence, so ids are
///   unique across nodes and a permit of another prefix is unknown here.
///   Any node sharing the prefix may settle or release a permit.
/// - A negative `est` or `actual` counts as 0.
/// - Every call returns `governance_unavailable` when Redis cannot be
///   reached; nothing is changed then (a call either ran whole or not at
///   all, though a call cut off after sending may have run).
limiter_backend_ptr make_redis_limiter(redis_client_ptr client,
                                       std::string key_prefix,
                                       limiter_limits limits);

} // namespace pgw
