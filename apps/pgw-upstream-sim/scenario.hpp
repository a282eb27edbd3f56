#pragma once

/// Simulator scenarios (SPEC §11.1): the parsed, validated form of a
/// `{"models": {...}}` document, the built-in set, and the per-request
/// decision (which fault, which delays) derived from (seed, model, n).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pgw::sim::detail {

/// The delay before an answer.
struct latency_spec {
  enum class dist { none, fixed, lognormal, uniform };
  dist kind = dist::none;
  double a = 0; ///< fixed: ms; lognormal: median_ms; uniform: min_ms
  double b = 0; ///< lognormal: sigma; uniform: max_ms
};

/// Stream misbehaviour; positions count content tokens.
struct stream_spec {
  std::optional<int> cut_after;
  std::optional<int> stall_after;
  double stall_ms = 0;
  std::optional<int> malformed_at;
  bool omit_done = false;
  /// Hostile endings (SPEC 12): after `[DONE]` the connection stays open
  /// without the chunked terminator; after the `finish_reason` chunk nothing
  /// more comes (no usage, no `[DONE]`) and the connection stays open.
  bool hang_after_done = false;
  bool hang_after_finish = false;
};

/// A fault (`faults[i]`) or the fault part of a script entry (p unused).
struct fault_spec {
  double p = 1.0;
  int status = 0; ///< 0 = no status answer
  std::optional<std::string> code;
  std::optional<std::string> message;
  std::optional<std::string> retry_after;    ///< header text, verbatim
  std::optional<std::string> retry_after_ms; ///< header text, verbatim
  std::optional<double> hang_ms;
  bool reset = false;
  /// A fault that answers 200 with this content (structured-output tests:
  /// schema-violating JSON some of the time). Folded into the plan's
  /// behaviour by `decide`; never an active fault itself.
  std::optional<std::string> content;
  /// The error body's `param` (set by the simulator, not by scenarios).
  std::optional<std::string> param;
  /// The error message repeats the request's Authorization header, as some
  /// proxies do (a leak the gateway must scrub).
  bool echo_auth = false;

  /// True when the fault does something (status, hang or reset).
  bool active() const {
    return status != 0 || hang_ms.has_value() || reset;
  }
};

/// The base fields of a model.
struct behaviour {
  int tokens = 20;
  /// Each generated token's word repeated to at least this many bytes (0:
  /// the word alone): a few events carry megabytes.
  int token_bytes = 0;
  double ttft_ms = 0;
  double token_ms = 0;
  latency_spec latency;
  bool usage = true;
  stream_spec stream;
  /// Answer with two tool calls instead of text: `indexed` (OpenAI's
  /// shape), `no_index` (stream deltas without `index`), `index0` (every
  /// call's deltas at index 0), `bad_args` (arguments that are not JSON);
  /// empty = a text answer.
  std::string tool_calls;
  /// The answer text instead of the generated words.
  std::optional<std::string> content;
  /// The answer text when the request asks for `response_format`
  /// json_object or json_schema (a model that honours JSON mode).
  std::optional<std::string> json_content;
  /// `response_format` types answered with a 400 naming the param.
  std::vector<std::string> reject_formats;
};

/// One `script` entry: overrides for the k-th request.
struct script_entry {
  std::optional<int> tokens;
  std::optional<double> ttft_ms;
  std::optional<double> token_ms;
  std::optional<latency_spec> latency;
  std::optional<bool> usage;
  std::optional<stream_spec> stream;
  std::optional<std::string> content;
  std::optional<std::string> json_content;
  fault_spec fault; ///< inactive when the entry has no fault fields
};

struct outage_spec {
  double first_ms = 0;
  int status = 503;
  /// Header text sent as `Retry-After` during the outage (e.g. a 429 storm).
  std::optional<std::string> retry_after;
};

struct model_spec {
  behaviour base;
  std::vector<fault_spec> faults;
  std::vector<script_entry> script;
  std::optional<outage_spec> outage;
  /// POST /v1/embeddings: vector length, and most inputs per request (more
  /// answers 400); unset = no limit.
  int dim = 8;
  std::optional<int> max_inputs;
  /// `/ocr/text` and `/parse`: answer HTTP 200 `{success: false, message}`
  /// with this message (instead of a result) to a share `ocr_fail_p`.
  std::optional<std::string> ocr_fail;
  double ocr_fail_p = 1.0;
};

/// Model name -> behaviour, sorted by name.
using scenario = std::map<std::string, model_spec>;

/// The SPEC §11.1 JSON block, verbatim.
extern const char* const builtin_scenario_json;

/// Parses and validates scenario text; throws std::invalid_argument naming
/// the JSON path of the first problem.
scenario parse_scenario(const std::string& json);

/// The built-ins, with `json` (if not empty) adding models or replacing
/// built-ins by name.
scenario load_scenario(const std::string& json);

/// What one request does, decided at arrival.
struct plan {
  behaviour b;        ///< base fields after script overrides
  fault_spec fault;   ///< the fault that applies (inactive = none)
  bool outage = false; ///< fault comes from the outage window
  double latency_ms = 0; ///< drawn latency, simulated ms
};

/// Decides request `n` (1-based) for `name`. `since_reset_ms` is real time
/// since the last reset, `time_scale` converts simulated outage windows.
plan decide(const std::string& name, const model_spec& m, uint64_t seed,
            uint64_t n, double since_reset_ms, double time_scale);

/// A uniform draw in [0, 1) that depends only on its arguments.
double draw(uint64_t seed, const std::string& name, uint64_t n, uint64_t salt);

/// The answer's tokens: joined, they equal answer_text(model, seed, count,
/// token_bytes).
std::vector<std::string> answer_tokens(const std::string& model, uint64_t seed,
                                       int count, int token_bytes = 0);

} // namespace pgw::sim::detail
