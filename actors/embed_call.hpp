#pragma once

/// The `embed_call` actor: one per logical embedding call (issue 16).

#include "actors/call_supervisor.hpp"
#include "actors/embed_batches.hpp"
#include "actors/interfaces.hpp"

#include <caf/actor_clock.hpp>
#include <caf/typed_response_promise.hpp>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace pgw {

/// What an embedding call needs; built by its gateway.
struct embed_call_args {
  std::string call_id;
  std::shared_ptr<const std::vector<std::string>> inputs;
  scope_ptr scope;
  std::shared_ptr<const std::map<std::string, call_source>> sources;
  gateway_actor gateway;
  transport_ptr transport;
  caf::optional<double> deadline_s;
  uint64_t seed = 0;
  /// Who asked: when it goes away, the call is cancelled (like a deadline).
  caf::strong_actor_ptr requester;
  /// Prices for `cost_usd` (input tokens of each sub-batch); null = none.
  std::shared_ptr<const price_table> prices;
  /// Where each sub-batch request's attempt row goes; invalid = nowhere.
  telemetry_actor telemetry;
  double wall_offset_ms = 0;
};

/// One sub-batch and its retry state.
struct embed_batch_state {
  enum class phase { ready, admitting, running, waiting, done };
  embed_batch range;
  phase at = phase::ready;
  uint64_t retry_gen = 0;
  int64_t budget_used = 0;
  int64_t rounds_failed = 0;
  std::map<std::string, int32_t> failures;
  std::vector<std::string> excluded;
  /// The last rejection, for the error when every source rejected it.
  caf::optional<attempt_result> last_rejection;
  // -- the running request --
  uint64_t tag = 0;
  admit_result admitted;
  std::shared_ptr<call_handle> handle;
  // -- the running request, for its telemetry row --
  uint64_t attempt = 0;
  caf::actor_clock::time_point sent_at;
};

struct embed_call_state {
  static inline const char* name = "embed_call";

  embed_call_args args;
  caf::typed_response_promise<embed_response> promise;
  std::vector<embed_batch_state> batches;
  /// Sub-batches admitting or running (bounded by BATCH_CONCURRENCY).
  int64_t busy = 0;
  int64_t admitting = 0;
  uint64_t next_tag = 0;
  bool started = false;
  bool finishing = false;
  bool delivered = false;
  caf::error failure;
  embed_response response;
  /// The vector length fixed by the first sub-batch that succeeded.
  size_t dim = 0;
  bool all_usage_reported = true;
  /// Sum of the sub-batches' costs; unset once one has no price.
  caf::optional<double> cost_usd = 0.0;
  std::vector<std::string> sources_used;
  std::map<std::string, std::string> last_reason;
  caf::actor_clock::time_point started_at;
  std::mt19937_64 rng;
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
/// only. One deadline bounds the whole call; when it passes (or the call is
/// cancelled, or a budget runs out) the running sub-batches are cancelled
/// and settled, and the caller gets one error. Never hedges. The answer
/// keeps input order and sums usage and generation_ms.
embed_call_actor::behavior_type
embed_call(embed_call_actor::stateful_pointer<embed_call_state> self,
           embed_call_args args);

} // namespace pgw
