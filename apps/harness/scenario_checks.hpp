#pragma once

/// Internals of `soak --scenario`: the parsed scenario file, the simulator's
/// request log, and the expectations checked after a run
/// (scenario_checks.cpp), plus the fleet runner (scenario_fleet.cpp).

#include "apps/harness/scenario_runner.hpp"

#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"
#include "config/settings.hpp"

#include <boost/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pgw::cli {

/// A config/scenarios/NAME.json file, parsed and validated.
struct scenario_file {
  std::string path;
  std::string name; ///< file name without .json
  std::string description;
  std::string models_json; ///< {"models": {...}} for the simulator
  sim::detail::scenario models; ///< built-ins plus the file's models
  uint64_t seed = 1;
  double time_scale = 1.0;
  std::string scope = "LLM";
  std::map<std::string, std::string> env; ///< as written (${SIM} unexpanded)
  int64_t calls = 1000;
  /// The file's own `load.calls` (before `--calls`): count expectations
  /// written for it scale by calls / file_calls.
  int64_t file_calls = 1000;
  int concurrency = 16;
  std::optional<double> deadline_s;
  std::optional<bool> stream;
  std::string schema; ///< load.schema, serialized; empty: free text
  /// load.operation: chat, embeddings, ocr_text or ocr_layout; load.inputs:
  /// texts per embeddings call.
  std::string operation = "chat";
  int64_t inputs = 1;
  std::string prices_json; ///< empty: the default price table
  int nodes = 0;           ///< > 0: a fleet of that many processes
  boost::json::object expect;
};

/// `s` with every `from` replaced by `to` (`${SIM}`, `${REDIS}` in a file's
/// env).
std::string replace_all(std::string s, const std::string& from,
                        const std::string& to);

/// The file's simulator, started in this process on a free loopback port;
/// null (and the reason printed) when it cannot start.
std::unique_ptr<sim::server> start_scenario_sim(const scenario_file& f);

/// One row of the simulator's `/_sim/log`.
struct log_row {
  std::string model;
  double arrived_ms = 0;
  double ended_ms = 0; ///< +inf while in progress
  int status = 0;
  std::string action;
  int64_t tokens = 0; ///< prompt tokens + tokens sent
  bool client_closed = false;
};

std::vector<log_row> parse_sim_log(const std::string& log_json);

/// One expectation's verdict.
struct check {
  std::string name;   ///< the expect key (with the source when per source)
  bool ok = false;
  std::string detail; ///< measured vs wanted
};

/// Everything the expectations are checked against.
struct check_context {
  const scenario_file& file;
  const scope_config& scope;
  const soak_result& soak; ///< in a fleet: calls and ok summed, no status
  const std::vector<log_row>& log;
  int64_t answers_checked = 0;
  int64_t answers_truncated = 0;
  const std::vector<std::string>& truncated_examples;
  bool fleet = false;
  // -- structured output (load.schema) --
  int64_t schema_valid = 0;  ///< answers that validate against the schema
  int64_t reasks = 0;        ///< re-asks of the ok calls, summed
  int64_t reasked_calls = 0; ///< ok calls that needed at least one re-ask
  int64_t repaired = 0;      ///< ok answers valid only after repair
  // -- embeddings (load.operation) --
  int64_t vectors_checked = 0; ///< vectors compared with the simulator's
  int64_t vectors_wrong = 0;   ///< ... that were not its input's vector
  // -- when calls started (success_rate_until, share_after) --
  int64_t until_calls = 0; ///< calls started before until_s
  int64_t until_ok = 0;    ///< ... that succeeded
  int64_t after_ok = 0;    ///< ok calls started at or after after_s
  int64_t after_on = 0;    ///< ... answered by share_after's source
};

/// A count expectation (`rate_limited_min`, `hedges_min`, `hedges_max`,
/// `sim_actions_min`) as written for the file's own `load.calls`, scaled to
/// the calls of this run (`--calls`): written * calls / file_calls, a
/// minimum rounded up and a maximum down, so the proportion holds either
/// way.
int64_t scaled_count(const scenario_file& f, double written, bool minimum);

/// Throws std::invalid_argument on an unknown or malformed expectation (or
/// one a fleet cannot check).
void check_expectation_keys(const boost::json::object& expect, bool fleet);

std::vector<check> evaluate(const check_context& ctx);

/// Prints the simulator's figures and the checks; true when all hold.
bool print_checks(const scenario_file& f, const check_context& ctx,
                  const std::vector<check>& checks);

/// The "scenario" member of the JSON report.
boost::json::object checks_json(const scenario_file& f,
                                const check_context& ctx,
                                const std::vector<check>& checks, bool passed);

/// `soak --scenario` for a file with "fleet": Redis, the simulator here,
/// N `pgw-actor soak` processes sharing the limits.
int run_fleet(const scenario_file& f, const scenario_overrides& ov);

} // namespace pgw::cli
