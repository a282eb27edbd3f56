#pragma once

/// The `call_supervisor` actor: one per logical call (SPEC §2, §7).

#include "actors/call_plan.hpp"
#include "actors/check_runner.hpp"
#include "actors/interfaces.hpp"
#include "actors/structured_ladder.hpp"
#include "actors/telemetry.hpp"
#include "config/pricing.hpp"
#include "config/settings.hpp"
#include "transport/transport.hpp"

#include <caf/actor_clock.hpp>
#include <caf/typed_response_promise.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pgw {

/// A source as a call sees it: its settings and governance actors.
struct call_source {
  std::shared_ptr<const source_config> config;
  limiter_actor limiter;
  breaker_actor breaker;
};

/// What a supervisor needs; built by its gateway.
struct call_args {
  /// The request; its `call_id` names the call (no copy here: issue 17).
  std::shared_ptr<const chat_request> request;
  const std::string& call_id() const {
    return request->call_id;
  }
  scope_ptr scope;
  /// The scope's sources, by name.
  std::shared_ptr<const std::map<std::string, call_source>> sources;
  gateway_actor gateway;
  transport_ptr transport;
  bool stream = true;
  /// Bound of the whole call in seconds (per-call or scope default).
  caf::optional<double> deadline_s;
  uint64_t seed = 0;
  // -- accounting --
  telemetry_actor telemetry;
  std::shared_ptr<const price_table> prices;
  double wall_offset_ms = 0;
  bool telemetry_content = false;
  /// Structured output: the gateway's ladder (rungs learned per source).
  std::shared_ptr<structured_ladder> ladder;
  /// Structured output: where the attempts check their answers; null =
  /// inside them.
  check_runner_ptr check_runner;
  /// The response cache and this call's key (issue 14); invalid = none.
  cache_actor cache;
  std::string cache_key;
  /// Live streaming (issue 13): receives the deltas and one terminal event
  /// (see gateway_actor); invalid = a buffered call.
  caf::actor sink;
};

/// The actor side of one leg (the rest is the plan's `plan_leg`).
struct call_leg_handle {
  attempt_actor actor;
  /// Shared with its attempt and the transport: whether its request left.
  std::shared_ptr<send_gate> gate;
  /// Structured output: the rung it was asked with.
  schema_strategy rung = schema_strategy::auto_select;
};

/// The supervisor performs what its `call_plan` decides: it spawns and
/// stops attempts, asks admission, arms timers, forwards deltas, writes
/// rows, consults the cache and delivers.
struct call_supervisor_state {
  static inline const char* name = "call_supervisor";

  call_args args;
  /// The call's decisions (legs, rounds, hedging, refusals, commit).
  std::optional<call_plan> plan;
  /// Each leg's attempt, by leg id.
  std::map<uint64_t, call_leg_handle> leg_actors;
  caf::typed_response_promise<chat_response> promise;
  bool started = false;
  bool delivered = false;
  /// The answer once decided (on the heap: 470 bytes most of a call's
  /// life does not need; issue 17).
  std::unique_ptr<chat_response> response;
  caf::error failure;
  /// The cache's single-flight lease while this call leads (0: none);
  /// `cache_hit`: the response came from the cache.
  uint64_t cache_lease = 0;
  bool cache_hit = false;

  caf::actor_clock::time_point started_at;

  // -- structured output (SPEC §12) --
  schema_ptr schema; ///< compiled at start; null for a free-text call
  /// The messages of the next round: the caller's, plus after a mismatch
  /// the bad answer and the validator's errors.
  std::vector<chat_message> conversation;
};

/// Runs the retry loop of one call and answers the `start` request exactly
/// once. Hedging (SPEC §9, when `HEDGE__AFTER_S` is set): each round's
/// primary arms a delayed `hedge` message stamped with the round; if it fires
/// while the primary runs without a first token, admission runs again
/// excluding the primary's source (full breaker and limiter path) and a
/// second leg starts — or nothing, silently, when no source is admitted. The
/// first success wins (the primary on a tie); a failed leg waits for the
/// other; the loser is stopped and labelled `hedge_cancelled`. Otherwise: admission through the gateway, one attempt per round, 429 rounds
/// free of budget, backoff with full jitter (Retry-After enforced per source
/// by the gateway's cooldown memo, so a round waits max(backoff,
/// Retry-After) when no other source may run), `request_rejected` ends the
/// call, `source_rejected` excludes the source, the stall window and the
/// deadline bound the call. Structured output (a request with `schema`):
/// the schema is compiled first (`invalid_request` before any upstream
/// call), each leg is asked with its source's ladder rung, a 400 that
/// rejects the response format lowers that rung and runs the attempt again
/// without budget, and a round whose answer does not match is re-asked at
/// once with the bad answer and the validator's errors (one budget unit
/// each, at most `STRUCTURED__MAX_REASKS`, then `result_invalid`). Live
/// attempts are stopped with
/// `exit_reason::user_shutdown` and the answer is delivered only after they
/// are gone. Live streaming (a `sink`, no schema): the call commits to the
/// leg whose first token comes first; every other leg is stopped
/// `hedge_cancelled`; the committed leg's deltas go to the sink; after the
/// commit a failure ends the call `stream_interrupted` (no retry, no other
/// source). The sink always gets exactly one terminal event.
call_supervisor_actor::behavior_type
call_supervisor(call_supervisor_actor::stateful_pointer<call_supervisor_state> self,
                call_args args);

} // namespace pgw
