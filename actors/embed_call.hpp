#pragma once

/// The `embed_call` actor: one per logical embedding call (issue 16).

#include "actors/embed_batches.hpp"
#include "actors/interfaces.hpp"
#include "actors/side_call.hpp"

#include <memory>
#include <string>
#include <vector>

namespace pgw {

/// What an embedding call needs; built by its gateway.
struct embed_call_args : side_call_args {
  std::shared_ptr<const std::vector<std::string>> inputs;
};

/// How many times a sub-batch whose answer was over its source's
/// MAX_RESPONSE_BYTES may be halved (2048 inputs down to 8).
constexpr int32_t max_embed_halvings = 8;

/// One sub-batch and its retry state.
struct embed_batch_state {
  enum class phase { ready, admitting, running, waiting, done };
  embed_batch range;
  phase at = phase::ready;
  side_retry retry;
  side_request req; ///< the running request
  /// Halvings that made this sub-batch (an answer over MAX_RESPONSE_BYTES).
  int32_t halvings = 0;
  /// Why the last source that left this sub-batch left: its answer was over
  /// its MAX_RESPONSE_BYTES even after halving (names the keys to change);
  /// empty otherwise.
  std::string too_large;
};

struct embed_call_state
  : side_call_state_base<embed_call_args, embed_response> {
  static inline const char* name = "embed_call";

  std::vector<embed_batch_state> batches;
  /// Sub-batches admitting or running (bounded by BATCH_CONCURRENCY).
  int64_t busy = 0;
  int64_t admitting = 0;
  uint64_t next_tag = 0;
  /// The vector length fixed by the first sub-batch that succeeded.
  size_t dim = 0;
  bool all_usage_reported = true;
  /// Sum of the sub-batches' costs; unset once one has no price.
  caf::optional<double> cost_usd = 0.0;
  /// The priced cost of the ok sub-batches (losers' cost if the call fails).
  double won_cost_usd = 0;
  std::vector<std::string> sources_used;
};

/// Splits the inputs by the smallest MAX_BATCH_INPUTS / MAX_BATCH_TOKENS of
/// the scope's sources and runs the sub-batches, at most BATCH_CONCURRENCY
/// at once. Each sub-batch is admitted through the gateway with its own
/// token estimate, runs `POST /embeddings` through the transport, and is
/// settled with its reported usage (the estimate when unknown or cancelled
/// after sending, 0 when nothing was sent), recorded at its breaker and
/// reported to the gateway without feeding the health EWMA. Only failed
/// sub-batches are retried, each with its own MAX_ATTEMPTS budget and
/// backoff; a source that rejects a sub-batch (4xx) or answers a vector
/// length other than the first sub-batch's is excluded for that sub-batch
/// only. A sub-batch whose answer is over its source's MAX_RESPONSE_BYTES
/// is halved and both halves run (at most `max_embed_halvings` times, no
/// budget spent); one that cannot be halved leaves that source, and with
/// no source left the call fails `result_invalid` naming the keys to
/// change. One deadline bounds the whole call; when it passes (or the call is
/// cancelled, or a budget runs out) the running sub-batches are cancelled
/// and settled, and the caller gets one error. Never hedges. The answer
/// keeps input order and sums generation_ms and the settled tokens (the
/// estimate of a sub-batch without reported usage; `usage_source` is then
/// `unavailable` and `cost_usd` unset).
embed_call_actor::behavior_type
embed_call(embed_call_actor::stateful_pointer<embed_call_state> self,
           embed_call_args args);

} // namespace pgw
