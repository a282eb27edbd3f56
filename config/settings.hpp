#pragma once

/// Validated settings (SPEC §3). Built once by `load_settings`, then shared
/// read-only; a value that reaches an actor has passed `validate`.

#include "pgw/messages/structured.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pgw {

// -- values with a fixed set of names --------------------------------------------

/// SELECTOR: how a scope orders its sources for admission (SPEC §7).
enum class selector_policy { health_aware, round_robin, priority };

/// ON_QUOTA_FULL, ON_CIRCUIT_OPEN: what a call does when every source is
/// refused for that reason.
enum class refusal_policy { wait, fail };

/// PGW_LIMITER_BACKEND, PGW_BREAKER_BACKEND: where governance state lives.
enum class state_backend { memory, redis };

/// PGW_CACHE_BACKEND: where the response cache lives, if anywhere.
enum class cache_store { none, memory, redis };

/// PGW_TRANSPORT: the upstream HTTP client.
enum class transport_kind { beast, httplib };

/// A source's KIND: the kind of call it serves (one per scope).
enum class source_kind { chat, embedding, ocr_vision, ocr_monkey };

/// True for the two OCR kinds.
inline bool is_ocr(source_kind k) {
  return k == source_kind::ocr_vision || k == source_kind::ocr_monkey;
}

/// The name each value has in the configuration (and in `config show`).
const char* to_string(selector_policy x);
const char* to_string(refusal_policy x);
const char* to_string(state_backend x);
const char* to_string(cache_store x);
const char* to_string(transport_kind x);
const char* to_string(source_kind x);

/// Every value of a settings enum, in the order error messages list them.
template <class E>
struct setting_values;

template <>
struct setting_values<selector_policy> {
  static constexpr selector_policy all[] = {selector_policy::health_aware,
                                            selector_policy::round_robin,
                                            selector_policy::priority};
};

template <>
struct setting_values<refusal_policy> {
  static constexpr refusal_policy all[] = {refusal_policy::wait,
                                           refusal_policy::fail};
};

template <>
struct setting_values<state_backend> {
  static constexpr state_backend all[] = {state_backend::memory,
                                          state_backend::redis};
};

template <>
struct setting_values<cache_store> {
  static constexpr cache_store all[] = {cache_store::none, cache_store::memory,
                                        cache_store::redis};
};

template <>
struct setting_values<transport_kind> {
  static constexpr transport_kind all[] = {transport_kind::beast,
                                           transport_kind::httplib};
};

template <>
struct setting_values<source_kind> {
  static constexpr source_kind all[] = {source_kind::chat, source_kind::embedding,
                                        source_kind::ocr_vision,
                                        source_kind::ocr_monkey};
};

/// The value whose name (`to_string`) is exactly `text`; nullopt otherwise.
template <class E>
std::optional<E> parse_setting(const std::string& text) {
  for (auto x : setting_values<E>::all)
    if (text == to_string(x))
      return x;
  return std::nullopt;
}

/// "a, b, c": every name of E, for "must be one of" messages.
template <class E>
std::string setting_names() {
  std::string list;
  for (auto x : setting_values<E>::all) {
    if (!list.empty())
      list += ", ";
    list += to_string(x);
  }
  return list;
}

/// How a provider maps request features onto the upstream body
/// (config/providers.json).
struct provider_profile {
  std::string name;
  /// Dotted body path for the reasoning effort ("reasoning_effort",
  /// "reasoning.effort", ...); empty = the provider takes no effort.
  std::string effort_field;
  /// Effort name → JSON value text to write there ("\"low\"", "false", ...).
  /// A missing name means the effort is not sent for that value.
  std::map<std::string, std::string> effort_values;
  /// Body field for the token limit ("max_tokens" or "max_completion_tokens").
  std::string max_tokens_field = "max_tokens";
  /// Whether to ask for usage on streams (`stream_options.include_usage`).
  bool stream_usage = true;
  /// Structured-output rungs the provider supports, strongest first;
  /// `prompt` is always last (it needs nothing from the provider).
  std::vector<schema_strategy> structured = {schema_strategy::json_schema,
                                             schema_strategy::json_object,
                                             schema_strategy::prompt};
};

/// One upstream source: `{SCOPE}__{PROVIDER}__{NAME}__{FIELD}` keys.
struct source_config {
  std::string scope;    ///< e.g. "LLM"
  std::string provider; ///< profile name, lower case, e.g. "openai"
  std::string name;     ///< lower case, unique in the scope
  std::string base_url; ///< e.g. "https://api.example.com/v1"
  std::string model;
  std::string api_key; ///< never logged, printed or stored
  std::optional<int64_t> rpm;
  std::optional<int64_t> tpm;
  std::optional<int64_t> max_concurrency;
  int64_t est_tokens = 1000;
  double timeout_s = 120;
  double connect_timeout_s = 10;
  std::optional<double> ttft_timeout_s;
  double stream_idle_timeout_s = 30;
  int64_t priority = 0;
  /// JSON object text merged into every request body.
  std::string overlay = "{}";
  /// Extra request headers, parsed from the `HEADERS` JSON object.
  std::vector<std::pair<std::string, std::string>> headers;
  source_kind kind = source_kind::chat;
  /// PEM file of CA certificates trusted for this source's https (instead of
  /// the system store, SSL_CERT_FILE / SSL_CERT_DIR); empty = the system's.
  std::string ca_file;
  /// KIND=embedding: most inputs per upstream request (sub-batch).
  int64_t max_batch_inputs = 2048;
  /// KIND=embedding: most estimated tokens per upstream request.
  int64_t max_batch_tokens = 300000;
  /// KIND=ocr_*: largest image accepted, bytes.
  int64_t max_image_bytes = 20 * 1024 * 1024;
  /// KIND=ocr_vision: the instruction sent with the image; empty = built-in.
  std::string ocr_prompt_text;
  std::string ocr_prompt_layout;
  /// MAX_RESPONSE_BYTES: cap on the whole answer (content, reasoning and
  /// tool-call arguments, after decompression); beyond it the attempt fails
  /// with `response_too_large`.
  int64_t max_response_bytes = 8 * 1024 * 1024;
  /// The resolved provider profile.
  provider_profile profile;
  /// Where each field's value came from: FIELD → "source" (its own key) or
  /// "scope" (the `{SCOPE}__{FIELD}` default); absent = built-in default.
  std::map<std::string, std::string> origin;
};

struct hedge_config {
  std::optional<double> after_s;
  int64_t max_extra = 1;
};

struct breaker_config {
  int64_t threshold = 5;
  double cooldown_s = 30;
  int64_t min_calls = 10;
  double fail_rate = 0.6;
  double window_s = 60;
  /// Unset = max(300, cooldown_s).
  std::optional<double> max_cooldown_s;
};

/// One scope: a named pool of interchangeable sources.
struct scope_config {
  std::string name; ///< e.g. "LLM"
  std::vector<source_config> sources;
  selector_policy selector = selector_policy::health_aware;
  bool stream = true;
  int64_t max_attempts = 3;
  double backoff_base_s = 0.5;
  double backoff_max_s = 30;
  double stall_window_s = 300;
  std::optional<double> call_deadline_s;
  hedge_config hedge;
  breaker_config breaker;
  refusal_policy on_quota_full = refusal_policy::wait;
  refusal_policy on_circuit_open = refusal_policy::fail;
  int64_t structured_max_reasks = 2;
  /// Embedding scopes: sub-batches of one call in flight at once.
  int64_t batch_concurrency = 4;
  /// Response cache (issue 14): calls of this scope read and write the
  /// process's cache (PGW_CACHE_BACKEND) when true.
  struct cache_keys {
    bool enabled = false;
    /// Redis: identical misses coalesce across the processes sharing the
    /// cache too, through a lease key (actors/cache.hpp).
    bool fleet_single_flight = false;
    /// Answers cut by max_tokens (finish reason `length`) are stored too.
    bool store_length = false;
    /// Entry lifetime; unset = PGW_CACHE_TTL_S.
    std::optional<double> ttl_s;
    /// Memory backend: this scope's entries and bytes kept at most.
    int64_t max_entries = 10000;
    int64_t max_bytes = 64 * 1024 * 1024;
  } cache;

  /// The source with this name, or nullptr.
  const source_config* find(const std::string& source_name) const;

  /// "source 'NAME' is not in scope S (its sources: a, b)": the one message
  /// for a call pinned to a source the scope does not have (chat, embed,
  /// OCR, the CLI before it reads an image). NAME is cut to 64 bytes.
  std::string unknown_source(const std::string& source_name) const;
};

/// `pgw-actor serve` keys (PGW_SERVE_*).
struct serve_config {
  /// One SHA-256 hex digest of an accepted bearer key per line; empty = no
  /// auth.
  std::string keys_file;
  int64_t max_body_bytes = 8 * 1024 * 1024;
  int64_t max_inflight = 256;
  double drain_s = 30;
  double read_timeout_s = 60;
  double write_timeout_s = 60;
};

/// Process-wide keys.
struct global_config {
  state_backend limiter_backend = state_backend::memory;
  state_backend breaker_backend = state_backend::memory;
  cache_store cache_backend = cache_store::none;
  double cache_ttl_s = 3600;
  std::string cache_namespace = "pgw";
  std::string redis_url = "redis://127.0.0.1:6379/0";
  std::string pricing_path = "config/prices.json";
  /// Unset = the program's default (SPEC §3); "off" disables telemetry.
  std::optional<std::string> telemetry_db;
  /// PGW_TELEMETRY_CONTENT: store prompts and answers in telemetry rows.
  bool telemetry_content = false;
  /// PGW_TRANSPORT: the upstream HTTP client, `beast` (event-driven,
  /// transport/beast_transport) or `httplib` (a thread per call).
  transport_kind transport = transport_kind::beast;
  /// PGW_TRANSPORT_THREADS: the beast transport's loop threads; 0 = one
  /// per core.
  int64_t transport_threads = 0;
  serve_config serve;
  /// Read by the logger, the CLI's scheduler and load_providers; kept here
  /// for `config show`. PGW_PROVIDERS_PATH empty = the built-in table.
  std::string log_level = "warn";
  int64_t scheduler_threads = 1;
  std::string providers_path;
};

/// Everything `load_settings` produced.
struct settings {
  global_config global;
  std::map<std::string, scope_config> scopes;
  /// Warnings found while loading (unknown keys, ineffective combinations).
  std::vector<std::string> warnings;

  /// The scope with this name, or nullptr.
  const scope_config* find(const std::string& scope_name) const;
};

using settings_ptr = std::shared_ptr<const settings>;
using scope_ptr = std::shared_ptr<const scope_config>;

} // namespace pgw
