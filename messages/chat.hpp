#pragma once

/// The chat request a caller sends to a gateway and the response it gets back.

#include "pgw/messages/spent.hpp"
#include "pgw/messages/structured.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace pgw {

/// One part of a multi-part message content (OpenAI "content parts").
struct content_part {
  std::string type;      ///< "text" or "image_url"
  std::string text;      ///< for "text"
  std::string image_url; ///< for "image_url": an http(s) or data: URL
  /// For "image_url": OpenAI's `detail` (auto, low, high); empty: not sent.
  std::string detail{};
  /// The part's other members as the caller sent them, passed through: a
  /// JSON object's text (`{"cache_control":{"type":"ephemeral"}}`); empty:
  /// none.
  std::string extra{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, content_part& x) {
  return f(caf::meta::type_name("pgw.content_part"), x.type, x.text,
           x.image_url, x.detail, x.extra);
}

/// One function call the model asked for (OpenAI `tool_calls[i]`).
struct tool_call {
  std::string id;
  std::string type = "function";
  std::string name;
  /// The arguments as JSON text (always a string, as OpenAI sends them).
  std::string arguments;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_call& x) {
  return f(caf::meta::type_name("pgw.tool_call"), x.id, x.type, x.name,
           x.arguments);
}

/// One chat message. `content` is used when `parts` is empty.
struct chat_message {
  std::string role; ///< system, user, assistant, tool
  std::string content;
  std::vector<content_part> parts;
  /// An assistant message's tool calls (sent back in a conversation).
  std::vector<tool_call> tool_calls{};
  /// A `tool` message: the id of the call it answers.
  std::string tool_call_id{};
  /// Optional participant or function name.
  std::string name{};
  /// The message's other members as the caller sent them, passed through:
  /// a JSON object's text (`{"prefix":true}`, `cache_control`,
  /// `reasoning_content`); empty: none.
  std::string extra{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_message& x) {
  return f(caf::meta::type_name("pgw.chat_message"), x.role, x.content,
           x.parts, x.tool_calls, x.tool_call_id, x.name, x.extra);
}

/// A logical chat call. Unset optionals take the scope's defaults.
struct chat_request {
  std::vector<chat_message> messages;
  caf::optional<double> temperature;
  caf::optional<double> top_p;
  caf::optional<int64_t> max_tokens;
  std::vector<std::string> stop;
  /// A JSON object merged into the upstream body (after the source OVERLAY).
  std::string extra_body;
  /// Upstream streaming mode; unset = the scope's `STREAM`.
  caf::optional<bool> stream;
  /// Per-call bound of the whole call in seconds (finite, positive).
  caf::optional<double> deadline_s;
  /// `none`, `low`, `medium`, `high`, or empty for "not set".
  std::string reasoning_effort;
  /// Optional caller-chosen id; used to cancel the call and in telemetry.
  std::string call_id;
  // -- OpenAI fields passed through to the upstream -------------------------
  /// JSON texts (empty = not sent): `tools` an array, `tool_choice` a string
  /// or object, `response_format` an object.
  std::string tools;
  std::string tool_choice;
  std::string response_format;
  caf::optional<bool> parallel_tool_calls;
  caf::optional<int64_t> seed;
  std::string user;
  /// Number of choices: only 1 is supported.
  caf::optional<int64_t> n;
  /// Pins the call to this source of the scope (empty = any source).
  std::string source;
  /// Structured output: a JSON Schema document (draft 7) the answer must
  /// satisfy; empty = free text.
  std::string schema;
  /// Structured output: `auto` walks the source's ladder; another value
  /// forces that rung on every source (never downgraded).
  schema_strategy strategy = schema_strategy::auto_select;
  // -- response cache (issue 14) -------------------------------------------
  /// `on` (or empty), `off` (neither read nor write; never waits on an
  /// identical call), `read_only`, `write_only`.
  std::string cache;
  /// Reads accept only answers stored at most this many seconds ago.
  caf::optional<double> max_age_s;
  /// Whose cache entries the call may read and write (serve: the digest of
  /// the caller's key when auth is on); empty = the process's own.
  std::string tenant;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_request& x) {
  return f(caf::meta::type_name("pgw.chat_request"), x.messages, x.temperature,
           x.top_p, x.max_tokens, x.stop, x.extra_body, x.stream, x.deadline_s,
           x.reasoning_effort, x.call_id, x.tools, x.tool_choice,
           x.response_format, x.parallel_tool_calls, x.seed, x.user, x.n,
           x.source, x.schema, x.strategy,
           x.cache, x.max_age_s, x.tenant);
}

/// Statistics of one logical call (SPEC §9 names).
struct call_stats {
  int32_t attempts = 0;          ///< attempts sent upstream, hedge legs included
  double total_latency_ms = 0;   ///< whole call, as seen by the supervisor
  double generation_ms = 0;      ///< the winning transport call alone
  caf::optional<double> ttft_ms; ///< of the winning attempt (streaming)
  int32_t hedges = 0;
  bool hedge_won = false;
  bool cache_hit = false;
  std::string source;
  std::string model;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string usage_source; ///< "reported" or "unavailable"
  /// When usage_source is "unavailable": the part of prompt_tokens the
  /// sources did report (an embedding call some of whose sub-batches
  /// reported usage and others not; the rest is estimated), else 0.
  int64_t reported_prompt_tokens = 0;
  /// A chat answer without usage: the estimate its permit settled
  /// (EST_TOKENS; serve's /metrics counts it in
  /// `pgw_tokens_estimated_total`), else 0. 0 for embeddings (their
  /// estimate is prompt_tokens − reported_prompt_tokens, by source in
  /// `embed_response::estimated_tokens_by_source`) and OCR (settles 0).
  int64_t estimated_tokens = 0;
  caf::optional<double> cost_usd;
  /// Structured output: the answer passed only after the deterministic
  /// repair (code fences, surrounding text, a trailing comma).
  bool repaired = false;
  /// Structured output: rounds re-asked after a schema mismatch.
  int32_t reasks = 0;
  /// A cache hit: what the stored answer cost when it was made.
  caf::optional<double> cost_saved_usd;
  /// Stream events of the winning attempt skipped as not valid JSON (SPEC
  /// §10: skipped and counted): the answer may lack what they carried.
  int32_t malformed_events = 0;
  /// Work of other attempts that the call did not return, by source:
  /// whole answers as their sources reported them (refused: a schema
  /// mismatch before a re-ask, invalid tool calls before a failover; or a
  /// tie lost to this answer), else the estimates their permits settled
  /// (a hedge loser stopped mid-answer, a failure after the request was
  /// sent): upstream work beyond this answer.
  spent_by_source unreturned;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_stats& x) {
  return f(caf::meta::type_name("pgw.call_stats"), x.attempts,
           x.total_latency_ms, x.generation_ms, x.ttft_ms, x.hedges,
           x.hedge_won, x.cache_hit, x.source, x.model, x.prompt_tokens,
           x.completion_tokens, x.usage_source, x.reported_prompt_tokens,
           x.estimated_tokens, x.cost_usd, x.repaired, x.reasks,
           x.cost_saved_usd, x.malformed_events, x.unreturned);
}

/// Token usage as reported by the winning source (zero when unavailable).
struct token_usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t total_tokens = 0; ///< prompt + completion
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_usage& x) {
  return f(caf::meta::type_name("pgw.token_usage"), x.prompt_tokens,
           x.completion_tokens, x.total_tokens);
}

/// The answer to a successful chat call.
struct chat_response {
  std::string content;
  std::string reasoning_content;
  /// `tool_calls` when the model called tools (whatever the upstream said).
  std::string finish_reason;
  std::string source;
  std::string model;
  token_usage usage;
  call_stats stats;
  std::string call_id;
  /// The tools the model called, normalised (ids, string arguments that
  /// parse as JSON).
  std::vector<tool_call> tool_calls;
  /// Structured output: the validated JSON (after repair), serialized;
  /// empty for a free-text call.
  std::string parsed;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_response& x) {
  return f(caf::meta::type_name("pgw.chat_response"), x.content,
           x.reasoning_content, x.finish_reason, x.source, x.model, x.usage,
           x.stats, x.call_id, x.tool_calls, x.parsed);
}

} // namespace pgw
