#pragma once

/// The `gateway` actor: one per scope (SPEC §2).

#include "actors/interfaces.hpp"
#include "actors/call_supervisor.hpp"
#include "actors/selector.hpp"
#include "actors/structured_ladder.hpp"
#include "actors/telemetry.hpp"
#include "actors/timer_table.hpp"
#include "config/pricing.hpp"
#include "backends/breaker.hpp"
#include "backends/governance.hpp"
#include "backends/limiter.hpp"
#include "config/support/io_pool.hpp"
#include "config/settings.hpp"
#include "transport/transport.hpp"

#include <caf/actor_clock.hpp>
#include <caf/expected.hpp>
#include <caf/typed_response_promise.hpp>

#include <functional>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace caf {
class actor_system;
} // namespace caf

namespace pgw {

/// Per-source state the gateway keeps.
struct source_runtime {
  std::shared_ptr<const source_config> config;
  limiter_actor limiter;
  breaker_actor breaker;
  /// The limiter holds a governance pair: admission asks it alone (issue 17).
  bool paired = false;
  /// The breaker let the last entry in, not as a probe: the next admission
  /// asks the breaker and the limiter at once (without a pair).
  bool breaker_closed = true;
  /// Attempts admitted and not yet reported.
  int32_t in_flight = 0;
  /// The 429 cooldown memo: not admitted before this time.
  caf::actor_clock::time_point cool_until{};
  /// 429s in a row without a success, counting those that arrive while
  /// the source cools down once: the default cooldown doubles with each.
  int32_t consecutive_429 = 0;
  /// A Retry-After over BREAKER__MAX_COOLDOWN_S was logged: once per source
  /// in the gateway's lifetime, not on every 429 of a persistent one.
  bool retry_after_cap_logged = false;
  /// The last failure seen ("unauthorized 401"): why its circuit opened.
  std::string last_failure;
  int64_t attempts = 0;
  int64_t ok = 0;
  int64_t failed = 0;
  int64_t rate_limited = 0;
  /// Attempts that ended, by outcome name.
  std::map<std::string, int64_t> outcomes;
};

/// Options of a gateway beyond its scope's settings.
struct gateway_options {
  /// Seeds the selector's randomness and each call's backoff jitter;
  /// 0 = from std::random_device.
  uint64_t seed = 0;
  /// Builds each source's limiter and breaker backends; unset = the memory
  /// backends with the source's and scope's settings.
  std::function<limiter_backend_ptr(const scope_config&, const source_config&)>
    make_limiter;
  std::function<breaker_backend_ptr(const scope_config&, const source_config&)>
    make_breaker;
  /// Builds a source's governance pair (its breaker and limiter in one
  /// store: one call per admission and one per attempt end); unset or null
  /// = none.
  std::function<governance_pair_ptr(const scope_config&, const source_config&)>
    make_governance_pair;
  /// Threads for blocking (remote) governance backends; null for memory.
  std::shared_ptr<io_pool> governance_pool;
  /// Where attempt, call and failure rows go; invalid = no telemetry.
  telemetry_actor telemetry;
  /// Prices for `cost_usd`; null = no costs.
  std::shared_ptr<const price_table> prices;
  /// Wall-clock ms minus actor-clock ms, for row timestamps (actors read
  /// only their own clock).
  double wall_offset_ms = 0;
  /// PGW_TELEMETRY_CONTENT=on: rows carry prompts and answers.
  bool telemetry_content = false;
  /// The gateway made `telemetry` for itself: it is linked and ends with it.
  bool own_telemetry = false;
  /// Where structured-output answers are checked
  /// (actors/check_runner.hpp); null = inside the attempt actors, on CAF's
  /// threads (a check of a large answer may then hold them for up to about
  /// a second). node_builder's `spawn_gateway` gives every gateway one.
  check_runner_ptr check_runner;
  /// The process's response cache (issue 14), used when the scope's
  /// CACHE__ENABLED is true; invalid = calls are not cached.
  cache_actor cache;
};

struct gateway_state {
  static inline const char* name = "gateway";

  scope_ptr scope;
  transport_ptr transport;
  std::optional<selector> picker;
  std::vector<source_runtime> sources;
  /// What every call of this scope gets to know about the sources.
  std::shared_ptr<const std::map<std::string, call_source>> call_sources;
  std::unordered_map<std::string, size_t> index;
  /// Live calls by id (for cancellation).
  std::unordered_map<std::string, call_supervisor_actor> calls;
  /// A live embedding or OCR call: the actor (for cancellation) and how to
  /// answer its caller with an error when the call cannot (it ended
  /// without answering, or the gateway's stop grace ended first).
  struct live_side_call {
    caf::actor actor;
    std::function<void(caf::error)> fail;
  };
  /// Live embedding and OCR calls by id.
  std::unordered_map<std::string, live_side_call> side_calls;
  /// Call id of each live call actor (supervisors, embedding and OCR
  /// calls): who may arm timers.
  std::unordered_map<caf::actor_addr, std::string> call_of;
  /// Live calls by requesting actor (their supervisors): a requester that
  /// goes away cancels its calls (SPEC §8, like a deadline).
  std::unordered_map<caf::actor_addr, std::vector<caf::actor_addr>> calls_of;
  /// Callers waiting for an answer, by the call's supervisor (an address,
  /// not a copy of the call id per table: issue 17).
  std::unordered_map<caf::actor_addr,
                     caf::typed_response_promise<chat_response>>
    pending;
  /// Set once told to exit (a reason other than normal): new calls are
  /// refused, the live ones are cancelled, and the gateway quits with it
  /// once they have answered (their permits settled while the limiters,
  /// linked to it, still run), or at `stop_grace`.
  caf::error stop_reason;
  /// The scope's sources in the cache's keys (backends/cache_key.hpp).
  std::string cache_sources;
  /// The timers of the live calls (stall window, deadline, retry, hedge).
  timer_table timers;
  gateway_options opts;
  /// When the ticks sent and not received yet (delayed messages to self)
  /// fire. CAF 0.17 cannot cancel a delayed message: a tick sent for a
  /// timer that went (its call ended) still comes, so a new tick is sent
  /// only for a timer earlier than every one pending. Keeping only the
  /// earliest sent one here, each retry's short tick left a duplicate of
  /// the stall window's tick in the clock for up to STALL_WINDOW_S: memory
  /// grew with the retry rate times 300 s.
  std::multiset<caf::actor_clock::time_point> ticks;
  std::mt19937_64 rng;
  uint64_t next_call = 0;
  int64_t calls_started = 0;
  int64_t calls_ok = 0;
  int64_t calls_failed = 0;
  /// Structured output: the rung each source is asked with, learned from
  /// 400s that reject the response format; kept for the gateway's life.
  std::shared_ptr<structured_ladder> ladder
    = std::make_shared<structured_ladder>();
};


/// How long a source cools down after a 429 (SPEC §12): `retry_after_s`
/// when the upstream gave one (> 0), else 1 s doubled for each earlier 429
/// in a row (`consecutive` counts this one: 1 → 1 s, 2 → 2 s, ...); both
/// capped at `cap_s` (BREAKER__MAX_COOLDOWN_S).
double rate_limit_cooldown_s(int32_t consecutive,
                             caf::optional<double> retry_after_s,
                             double cap_s);

/// The limits of `src` (SPEC §5): its RPM/TPM/MAX_CONCURRENCY, a lease of
/// TIMEOUT_S + 10 s.
limiter_limits limits_of(const source_config& src);

/// The breaker settings of `src` in `scope` (SPEC §6), threshold lifted.
breaker_settings breaker_settings_of(const scope_config& scope,
                                     const source_config& src);

/// Serves one scope. `chat` checks the request (`invalid_request` before
/// anything starts), spawns a `call_supervisor` and delegates the request to
/// it, so the caller gets exactly one response or error. `admit` orders the
/// sources with the scope's selector, moves sources that failed twice in the
/// call to the tail, skips excluded ones silently and cooling ones (429
/// memo) with reason `cooling`, and admits the first that remains. `report`
/// ends an admitted attempt: in-flight count, selector feed, cooldown memo.
gateway_actor::behavior_type
gateway(gateway_actor::stateful_pointer<gateway_state> self, scope_ptr scope,
        transport_ptr transport, gateway_options opts);

/// Spawns a gateway serving `scope` (validated, at least one source) with
/// the pieces `opts` brings. Programs and embedders start from settings
/// instead: apps/node/node_builder.hpp picks the pieces and calls this.
gateway_actor spawn_gateway(caf::actor_system& sys, scope_ptr scope,
                            transport_ptr transport, gateway_options opts = {});

/// Wall-clock ms minus `sys`'s actor-clock ms (read once, outside actors).
double wall_offset_ms(caf::actor_system& sys);

} // namespace pgw
