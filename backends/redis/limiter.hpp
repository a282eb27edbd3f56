#pragma once

/// The Redis limiter (SPEC §5): the windows and leases of one source kept in
/// Redis, so every gateway process of a fleet shares its RPM, TPM and
/// concurrency limits. The logic is backends/redis/limiter.lua, the twin of
/// backends/memory/limiter.cpp; each operation is one atomic script call.

#include "backends/limiter.hpp"
#include "backends/redis/client.hpp"

#include <string>
#include <utility>
#include <vector>

namespace pgw {

/// A limiter whose state lives in Redis under `key_prefix` (e.g.
/// "pgw:LLM:openai-a"; every node that shares the source passes the same
/// prefix). Keeps every rule of `limiter_backend`, plus:
/// - Time is Redis `TIME` (all nodes share one clock); `now_s` is ignored.
///   It never runs backwards (a wall-clock step back is read as no time).
/// - Keys: `<prefix>:lim:win` (ZSET permit → acquisition time),
///   `:lim:tok` (HASH permit → tokens, "sum"), `:lim:lease` (ZSET permit →
///   lease expiry), `:lim:seq` (INCR), `:lim:stats` (HASH of the counters,
///   shared by all nodes) and `:lim:open` (ZSET permit → when it may be
///   forgotten, for the permits not settled yet: the score is the expiry,
///   so a permit of a node that died goes at the next pruning; no key per
///   permit). `:lim:lease` and `:lim:open` also hold the member "k"
///   scored +inf, so they never empty (Redis would delete them, and the
///   next acquire make them again without a TTL). TTLs: the window keys between window_s + 1 s and window_s +
///   2 s after the newest acquisition; the counters, sequence, leases and
///   unsettled permits `redis_retention_s(max(lease_s, window_s))` after
///   the last call.
/// - The acquire script is lean (issue 17): it counts the window and the
///   leases without pruning them, which can only overstate the usage, and
///   prunes (then decides on exact figures) only when a limit looks
///   reached, every 64th permit, and on status.
/// - Permit ids are "<source>-<tag>-<n>": `tag` names the prefix (8 hex
///   digits of its SHA1), `n` comes from the shared sequence, so ids are
///   unique across nodes and a permit of another prefix is unknown here.
///   Any node sharing the prefix may settle or release a permit.
/// - A negative `est` or `actual` counts as 0.
/// - Every call returns `governance_unavailable` when Redis cannot be
///   reached; nothing is changed then (a call either ran whole or not at
///   all, though a call cut off after sending may have run).
namespace detail {

/// The limiter's script calls as data: keys, arguments, and the reading of
/// the replies. The limiter and the governance pair
/// (backends/redis/governance.hpp) make the same calls.
class redis_limiter_calls {
public:
  redis_limiter_calls(const std::string& prefix, limiter_limits limits);

  const limiter_limits& limits() const noexcept {
    return limits_;
  }

  const std::vector<std::string>& keys() const noexcept {
    return keys_;
  }

  /// The arguments of `op` (limiter.lua's ARGV), `extra` after the common
  /// ones.
  std::vector<std::string> args(const char* op,
                                std::vector<std::string> extra = {}) const;

  /// `acquire` of `est` (clamped), not run after `not_after_us` (Unix µs).
  std::vector<std::string> acquire_args(int64_t est,
                                        int64_t not_after_us) const;

  caf::expected<acquire_result> acquire_reply(const redis_reply& r,
                                              int64_t est) const;

  /// The permit number of an id issued under this prefix, as decimal text,
  /// or "" for any other id.
  std::string permit_number(const std::string& id) const;

  /// `settle_release` of permit number `n`.
  std::vector<std::string> settle_release_args(const std::string& n,
                                               int64_t actual) const;

  static caf::expected<std::pair<bool, bool>>
  settle_release_reply(const redis_reply& r);

private:
  limiter_limits limits_;
  std::vector<std::string> keys_;
  std::string id_prefix_; ///< "<source>-<tag>-"
  std::string window_us_;
  std::string lease_us_;
  std::string retention_ms_;
};

/// The script text of limiter.lua.
const redis_script& limiter_script();

/// The Unix time in µs when a command sent now stops being waited for.
int64_t not_after_us(const redis_client& client);

} // namespace detail

limiter_backend_ptr make_redis_limiter(redis_client_ptr client,
                                       std::string key_prefix,
                                       limiter_limits limits);

} // namespace pgw
