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
#include "backends/redis/pipeline.hpp"

#include <memory>
#include <string>

namespace pgw {

/// With a `pipeline`, the pair is `pipelined`: its `_async` steps go
/// through it (many callers' script calls share one write and one read);
/// without, they block the caller like the plain steps.
governance_pair_ptr
make_redis_governance_pair(redis_client_ptr client, std::string key_prefix,
                           limiter_limits limits, breaker_settings settings,
                           std::shared_ptr<redis_pipeline> pipeline = nullptr);

} // namespace pgw
