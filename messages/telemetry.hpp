#pragma once

/// Telemetry rows (SPEC §10): one per attempt, one per logical call, one per
/// failed call. Column names follow the OpenTelemetry GenAI semantic
/// conventions where one exists (gen_ai_request_model,
/// gen_ai_usage_input_tokens, ...); the rest are prefixed `pgw_` in the
/// database. Times are wall-clock milliseconds since the Unix epoch.

#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>

namespace pgw {

/// One upstream attempt.
struct attempt_row {
  std::string call_id;        ///< the logical call
  uint64_t attempt = 0;       ///< attempt number within the call (1, 2, ...)
  std::string scope;
  std::string source;
  std::string request_model;  ///< gen_ai_request_model (the source's MODEL)
  std::string response_model; ///< gen_ai_response_model (as answered)
  double started_at_ms = 0;
  double latency_ms = 0;      ///< attempt start to outcome (actor clock)
  caf::optional<double> ttft_ms;
  double generation_ms = 0;   ///< the transport call's own time
  /// SPEC §4 outcome: ok, transient, ..., cancelled, hedge_cancelled.
  std::string outcome;
  std::string reason;         ///< e.g. http_503, stream_cut, total_timeout
  int32_t http_status = 0;
  std::string error_code;     ///< upstream error code
  std::string error_message;  ///< upstream error message (truncated)
  int64_t input_tokens = 0;   ///< gen_ai_usage_input_tokens
  int64_t output_tokens = 0;  ///< gen_ai_usage_output_tokens
  std::string usage_source;   ///< reported / unavailable
  int64_t settled_tokens = 0; ///< what the limiter permit was settled at
  caf::optional<double> cost_usd;
  bool is_hedge = false;
  bool is_probe = false;
  /// The answer text, only when PGW_TELEMETRY_CONTENT=on.
  std::string content;
  /// pgw_operation: chat, embeddings, ocr_text or ocr_layout.
  std::string operation = "chat";
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_row& x) {
  return f(caf::meta::type_name("pgw.attempt_row"), x.call_id, x.attempt,
           x.scope, x.source, x.request_model, x.response_model,
           x.started_at_ms, x.latency_ms, x.ttft_ms, x.generation_ms,
           x.outcome, x.reason, x.http_status, x.error_code, x.error_message,
           x.input_tokens, x.output_tokens, x.usage_source, x.settled_tokens,
           x.cost_usd, x.is_hedge, x.is_probe, x.content, x.operation);
}

/// One logical call.
struct call_row {
  std::string call_id;
  std::string scope;
  double started_at_ms = 0;
  /// "ok" or the SPEC §4 error code (retry_exhausted, cancelled, ...).
  std::string outcome;
  int32_t attempts = 0;
  int32_t hedges = 0;
  bool hedge_won = false;
  bool cache_hit = false;
  double latency_ms = 0;
  double generation_ms = 0;
  /// The winner's when ok; a stream_interrupted call's committed source.
  std::string source;
  std::string model;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  caf::optional<double> cost_usd;  ///< the winning attempt's cost
  double losers_cost_usd = 0;      ///< attempts that did not win
  /// The prompt (last user message), only when PGW_TELEMETRY_CONTENT=on.
  std::string prompt;
  /// A cache hit: the cost of the stored answer when it was made.
  caf::optional<double> cost_saved_usd;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_row& x) {
  return f(caf::meta::type_name("pgw.call_row"), x.call_id, x.scope,
           x.started_at_ms, x.outcome, x.attempts, x.hedges, x.hedge_won,
           x.cache_hit, x.latency_ms, x.generation_ms, x.source, x.model,
           x.input_tokens, x.output_tokens, x.cost_usd, x.losers_cost_usd,
           x.prompt, x.cost_saved_usd);
}

/// Exactly one per failed call.
struct terminal_failure_row {
  std::string call_id;
  std::string scope;
  double at_ms = 0;
  std::string error_code; ///< SPEC §4 name
  std::string message;
  caf::optional<double> retry_after_s;
  int32_t upstream_status = 0;
  std::string upstream_code;
  std::string per_source_json; ///< {"source": "last reason", ...}
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, terminal_failure_row& x) {
  return f(caf::meta::type_name("pgw.terminal_failure_row"), x.call_id,
           x.scope, x.at_ms, x.error_code, x.message, x.retry_after_s,
           x.upstream_status, x.upstream_code, x.per_source_json);
}

/// Counters of a telemetry sink.
struct telemetry_status {
  std::string path;
  uint64_t queued = 0;   ///< rows accepted
  uint64_t written = 0;  ///< rows committed
  uint64_t dropped = 0;  ///< rows lost: queue full or database unwritable
  uint64_t batches = 0;
  uint64_t errors = 0;   ///< failed batches
  bool healthy = true;   ///< the last write succeeded
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, telemetry_status& x) {
  return f(caf::meta::type_name("pgw.telemetry_status"), x.path, x.queued,
           x.written, x.dropped, x.batches, x.errors, x.healthy);
}

} // namespace pgw
