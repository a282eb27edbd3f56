#pragma once

/// The `attempt` actor: one upstream request on one source (SPEC §2).

#include "actors/check_runner.hpp"
#include "actors/interfaces.hpp"
#include "actors/structured_schema.hpp"
#include "actors/telemetry.hpp"
#include "config/pricing.hpp"
#include "config/settings.hpp"
#include "transport/transport.hpp"

#include <caf/actor_clock.hpp>

#include <memory>

namespace pgw {

/// What an attempt needs; built by its supervisor.
struct attempt_args {
  uint64_t leg = 0; ///< the supervisor's id for this attempt
  call_supervisor_actor supervisor;
  gateway_actor gateway;
  transport_ptr transport;
  std::shared_ptr<const source_config> source;
  std::shared_ptr<const chat_request> request;
  bool stream = false;
  /// Live call: the transport's deltas are passed to the supervisor.
  bool forward_deltas = false;
  bool hedge = false;
  /// Governance of this attempt: its limiter permit and breaker entry.
  limiter_actor limiter;
  breaker_actor breaker;
  permit granted_permit;
  uint64_t epoch = 0;
  bool probe = false;
  /// Shared with the supervisor and the transport: whether a stopped
  /// attempt's request left (SPEC §8: settles its estimate) or never will
  /// (settles 0). Null: a stopped attempt counts as sent.
  std::shared_ptr<send_gate> gate;
  // -- telemetry --
  /// The call's id (the request's: no copy per attempt, issue 17).
  const std::string& call_id() const {
    return request->call_id;
  }
  telemetry_actor telemetry;
  std::shared_ptr<const price_table> prices;
  double wall_offset_ms = 0;
  bool telemetry_content = false;
  /// Structured output: an `ok` answer that does not match this schema
  /// (after repair) ends `result_invalid` (reason `invalid_json` or
  /// `schema_mismatch`, the first validation error as the message).
  schema_ptr schema;
  /// Where the check runs (actors/check_runner.hpp); null = inside this
  /// actor.
  check_runner_ptr check_runner;
};

struct attempt_state {
  static inline const char* name = "attempt";
  attempt_args args;
  std::shared_ptr<call_handle> handle;
  /// True once the outcome is known (reported to supervisor and gateway).
  bool finished = false;
  /// The answer is being checked on the check runner; `checked_amount` is
  /// what it settles should the attempt be stopped before the check ends
  /// (the answer is in: its usage, not an estimate).
  bool checking = false;
  int64_t checked_amount = 0;
  /// Why the supervisor stops it, if it does: hedge_cancelled or cancelled.
  outcome stop_label = outcome::cancelled;
  caf::actor_clock::time_point started_at;
};

/// Starts the request at once. Promises: forwards the first token (and,
/// with `forward_deltas`, every delta after it, in order) to the
/// supervisor; when the outcome is known, settles its permit by the SPEC §8
/// rule and releases it, feeds the breaker (stamped with its epoch), reports
/// to the gateway (selector, in-flight, cooldown memo) and to the
/// supervisor, exactly once each, then quits. With a schema and a check
/// runner, the answer is checked there before that (the outcome is known
/// when the check's result comes back). On an exit signal
/// (`user_shutdown`: cancelled or hedge loser) before the outcome is known,
/// it cancels the transport call (closing the connection), settles the
/// estimate (0 if nothing was sent), releases, gives a probe lease back,
/// feeds nothing to the breaker and reports `cancelled` (or
/// `hedge_cancelled`, as the supervisor labelled it) to the gateway.
attempt_actor::behavior_type
attempt(attempt_actor::stateful_pointer<attempt_state> self, attempt_args args);

} // namespace pgw
