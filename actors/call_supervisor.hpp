#pragma once

/// The `call_supervisor` actor: one per logical call (SPEC §2, §7).

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
#include <random>
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
  std::string call_id;
  std::shared_ptr<const chat_request> request;
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
  /// The response cache and this call's key (issue 14); invalid = none.
  cache_actor cache;
  std::string cache_key;
  /// Live streaming (issue 13): receives the deltas and one terminal event
  /// (see gateway_actor); invalid = a buffered call.
  caf::actor sink;
};

/// One attempt of the call.
struct call_leg {
  uint64_t id = 0;
  attempt_actor actor;
  std::string source;
  bool hedge = false;
  bool done = false;        ///< its outcome arrived
  bool down = false;        ///< the actor is gone
  bool first_token = false; ///< streamed its first token
  uint64_t round = 0;       ///< the round it belongs to
  int64_t est = 0;          ///< its permit's estimate
  std::string model;        ///< the source's MODEL
  caf::actor_clock::time_point started{}; ///< when the supervisor spawned it
  /// Why the supervisor stopped it: "hedge_cancelled" (lost to another
  /// leg) or "cancelled" (deadline, caller, stall); empty when it ended.
  std::string label;
  attempt_result result;
  /// Structured output: the rung it was asked with.
  schema_strategy rung = schema_strategy::auto_select;
};

struct call_supervisor_state {
  static inline const char* name = "call_supervisor";

  call_args args;
  caf::typed_response_promise<chat_response> promise;
  bool started = false;
  /// Set once the call's result is decided; legs are being wound down.
  bool finishing = false;
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
  caf::actor_clock::time_point last_progress;
  uint64_t retry_gen = 0;
  bool admitting = false;

  int64_t budget_used = 0;
  int64_t rounds_failed = 0;
  int32_t attempts = 0;
  std::map<std::string, int32_t> failures;
  std::vector<std::string> excluded;
  std::map<std::string, std::string> last_reason;
  /// The last failure per source with its status and upstream message.
  std::map<std::string, source_error> last_error;
  /// Sources demoted to the tail after one time-costly failure (SPEC §12).
  std::vector<std::string> demoted;
  /// Sources that ended `source_dead` in this call: not asked again in it.
  std::vector<std::string> dead;
  /// The last source_rejected answer, for the error when no source is left.
  std::unique_ptr<attempt_result> last_rejection;

  std::vector<call_leg> legs;
  uint64_t next_leg = 0;

  // -- hedging (SPEC §9) --
  uint64_t round = 0;             ///< generation of the current round
  bool round_first_token = false; ///< a leg of this round streamed a token
  /// Extra legs started in this round (at most HEDGE__MAX_EXTRA).
  int64_t round_extra = 0;
  bool hedge_admitting = false;
  int32_t hedges = 0;             ///< hedge legs actually sent

  /// Cost of attempts that did not win (SPEC §10), accumulated.
  double losers_cost_usd = 0;
  /// Backoff jitter, seeded with `args.seed` at the first backoff: the
  /// engine is 2.5 kB, and most calls never back off (issue 17: RSS per
  /// call in flight).
  std::unique_ptr<std::mt19937_64> rng;

  // -- structured output (SPEC §12) --
  schema_ptr schema; ///< compiled at start; null for a free-text call
  /// The messages of the next round: the caller's, plus after a mismatch
  /// the bad answer and the validator's errors.
  std::vector<chat_message> conversation;
  int32_t reasks = 0;
  std::vector<schema_issue> last_issues;

  // -- live streaming (issue 13) --
  /// The leg whose first token came first (0: not committed yet); only
  /// its deltas reach the sink.
  uint64_t committed = 0;
  /// Answer bytes the sink received.
  int64_t streamed_bytes = 0;
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
