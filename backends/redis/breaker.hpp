#pragma once

/// The Redis breaker (SPEC §6): the state machine of one source kept in
/// Redis, so every gateway process of a fleet sees the same circuit. The
/// logic is backends/redis/breaker.lua, the twin of
/// backends/memory/breaker.cpp; each operation is one atomic script call.

#include "backends/breaker.hpp"
#include "backends/redis/client.hpp"

#include <string>
#include <vector>

namespace pgw {

/// A breaker whose state lives in the Redis hash `<key_prefix>:brk` (every
/// node that shares the source passes the same prefix). Keeps every rule of
/// `breaker_backend` and of `memory_breaker`, plus:
/// - Time is Redis `TIME` (all nodes share one clock); `now_s` is ignored.
///   It never runs backwards (a wall-clock step back is read as no time).
/// - The hash holds the state, the rate buckets, the epoch and the
///   counters; its TTL is `redis_retention_s(max(max_cooldown_s, window_s,
///   probe_lease_s))`, refreshed by a change once half of it has passed.
///   A breaker unused for that long starts again closed with epoch 0.
/// - `enter` while closed reads two fields and writes nothing; a change
///   writes only the fields that moved (issue 17).
/// - Every call returns `governance_unavailable` when Redis cannot be
///   reached; nothing is changed then.
namespace detail {

/// The breaker's script calls as data (shared with the governance pair,
/// backends/redis/governance.hpp).
class redis_breaker_calls {
public:
  redis_breaker_calls(const std::string& prefix, breaker_settings settings);

  const breaker_settings& settings() const noexcept {
    return settings_;
  }

  const std::vector<std::string>& keys() const noexcept {
    return keys_;
  }

  /// breaker.lua's ARGV for `op`, `extra` after the common ones.
  std::vector<std::string> args(const char* op,
                                std::vector<std::string> extra = {}) const;

  /// `record` of `feed` from `epoch`.
  std::vector<std::string> record_args(uint64_t epoch,
                                       breaker_feed feed) const;

  static caf::expected<breaker_entry> enter_reply(const redis_reply& r);

private:
  breaker_settings settings_;
  std::vector<std::string> keys_;
  std::vector<std::string> common_; ///< ARGV[2..9] of every call
};

/// The script text of breaker.lua.
const redis_script& breaker_script();

} // namespace detail

breaker_backend_ptr make_redis_breaker(redis_client_ptr client,
                                       std::string key_prefix,
                                       breaker_settings settings);

} // namespace pgw
