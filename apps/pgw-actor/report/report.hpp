#pragma once

/// The telemetry report (`pgw-actor telemetry report`): reads a telemetry
/// database read-only and answers, per scope and per source, what happened
/// and what it cost. Plain functions, so tests drive them on fixture files.
///
/// Definitions (also printed under the text report):
/// - A call's *winner* is its `ok` attempt on the call's source (the lowest
///   attempt number if there were several); a call without a call row in
///   the database takes its first `ok` attempt. Every other attempt is a
///   *loser*: hedge legs that lost, failed attempts, cancelled ones.
/// - Scope totals are about calls: `calls` are call rows, `success_rate` is
///   ok calls / calls, latency percentiles are over every call's latency,
///   generation percentiles over ok calls, and the waiting share is
///   1 - sum(generation_ms) / sum(latency_ms) over the calls.
/// - Source rows are about that source's attempts: `calls` are the calls it
///   served (won), `success_rate` is ok attempts / attempts that ended on
///   their own (cancelled and hedge_cancelled left out), latency
///   percentiles are over all its attempts (a cancelled leg counts with the
///   time it ran), generation percentiles over its ok attempts, and the
///   waiting share is over the calls it served.
/// - Tokens and cost are summed over attempt rows (what was paid, winners
///   and losers); `losers_cost_usd` is the part of it paid for losers.
///   Attempts without a price are left out (`unpriced_attempts`); when
///   none had one the cost is unknown: null in JSON, "unpriced" in text.
/// - Percentiles are nearest-rank: the p-th percentile of n sorted samples
///   is the sample at rank ceil(p/100 * n).
/// - `--since` keeps calls and attempts that started at or after it and
///   terminal failures recorded at or after it.

#include <caf/expected.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pgw::report {

/// The SPEC §4 attempt outcomes, in the order the report lists them.
const std::vector<std::string>& attempt_outcomes();

/// p50 / p95 / p99 of a sample.
struct quantiles {
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
};

/// The nearest-rank percentile `p` (0 < p <= 100) of `sorted` (ascending,
/// not empty).
double percentile(const std::vector<double>& sorted, double p);

/// Figures for a scope (source empty) or one source in a scope.
struct group_stats {
  std::string scope;
  std::string source; ///< empty for the scope totals
  uint64_t calls = 0;
  uint64_t ok_calls = 0;
  /// Calls (scope totals) or decided attempts (sources); see above.
  std::optional<double> success_rate;
  uint64_t attempts = 0;
  /// Every SPEC §4 outcome (zero when absent) plus any other label seen.
  std::map<std::string, uint64_t> attempts_by_outcome;
  uint64_t hedges_fired = 0;
  uint64_t hedges_won = 0;
  std::optional<quantiles> latency_ms;
  std::optional<quantiles> generation_ms;
  std::optional<double> waiting_share;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  double cost_usd = 0;
  double losers_cost_usd = 0;
  uint64_t unpriced_attempts = 0; ///< attempts without a cost (not in cost)
  uint64_t losers = 0;            ///< attempts that did not win
  uint64_t unpriced_losers = 0;   ///< ... without a cost
  /// The latency samples behind `latency_ms`, ascending (the CDF's data).
  std::vector<double> latencies;
  /// Per source, ascending: attempts that ended ok, and those that failed
  /// (any other outcome but a cancel), drawn apart in the SVG.
  std::vector<double> ok_latencies;
  std::vector<double> failed_latencies;
};

/// `g.cost_usd`, or nothing when attempts were made and none had a price:
/// unknown, not free (JSON null, text "unpriced").
std::optional<double> known_cost(const group_stats& g);

/// `g.losers_cost_usd`, or nothing when there were losers and none had a
/// price.
std::optional<double> known_losers_cost(const group_stats& g);

struct scope_report {
  group_stats total;
  std::vector<group_stats> sources; ///< by name
  std::map<std::string, uint64_t> failed_calls_by_error;
  uint64_t terminal_failures = 0;
  /// Response cache (issue 14): calls answered from the cache, their share
  /// of the calls, and the sum of their call.pgw_cost_saved_usd (schema
  /// v3; older databases: 0).
  uint64_t cache_hits = 0;
  std::optional<double> cache_hit_rate;
  double cost_saved_usd = 0;
};

struct report {
  std::string db_path;
  int64_t schema_version = 0;
  std::optional<double> since_ms;
  std::vector<scope_report> scopes; ///< by name
};

/// Reads the database at `db_path` read-only (it is never created). Errors
/// name the path: missing, unreadable, not a telemetry database.
caf::expected<report> build(const std::string& db_path,
                            std::optional<double> since_ms = std::nullopt);

/// Human-readable tables, one block per scope, and the definitions.
std::string render_text(const report& r);

/// The report as one JSON object: {db, schema_version, since, since_ms,
/// scopes: [{scope, total, sources: [...], failed_calls_by_error,
/// terminal_failures, cache: {hits, hit_rate, cost_saved_usd}}]}; groups
/// carry the group_stats names.
std::string render_json(const report& r);

/// A latency CDF per source (one path each, class "cdf"), log-scaled x axis
/// in milliseconds, with axes and a legend.
std::string render_latency_cdf_svg(const report& r);

/// `--since`: an ISO-8601 timestamp (`2026-11-29`, `2026-11-29T10:00`,
/// `2026-11-29T10:00:00.5Z`, `... +02:00`; no zone means UTC) or a duration
/// back from `now_ms` (`90s`, `15m`, `2h`, `1d`, `1w`, fractions allowed).
/// Returns epoch milliseconds, or nothing for anything else.
std::optional<double> parse_since(const std::string& text, double now_ms);

/// Epoch milliseconds as `2026-11-29T10:00:00Z` (seconds precision).
std::string format_utc(double epoch_ms);

} // namespace pgw::report
