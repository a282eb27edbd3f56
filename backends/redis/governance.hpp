#pragma once

/// The Redis governance pair (issue 17): the breaker (backends/redis/
/// breaker.hpp) and the limiter (backends/redis/limiter.hpp) of one source
/// under one key prefix, each step one script call
/// (backends/redis/governance.lua runs breaker.lua and limiter.lua
/// unchanged, as functions, in one script). Same keys, same state: a pair,
/// the breaker and the limiter of one prefix may be used side by side
/// (status, probe release and abandoned permits go through those).

#include "backends/governance.hpp"
#include "backends/redis/client.hpp"

#include <string>

namespace pgw {

governance_pair_ptr make_redis_governance_pair(redis_client_ptr client,
                                               std::string key_prefix,
                                               limiter_limits limits,
                                               breaker_settings settings);

} // namespace pgw
