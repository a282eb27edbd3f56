#pragma once

/// The soak runner shared by `pgw-actor soak` and the scenario runner
/// (`pgw-actor soak --scenario NAME`): N calls through one gateway with C
/// callers, progress lines, then a report whose invariants fail the run.

#include "apps/cli/cli.hpp"

#include "messages/embed.hpp"
#include "messages/gateway.hpp"

#include <boost/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pgw::cli {

/// How a soak runs.
struct soak_params {
  int64_t calls = 1000;
  /// `--seconds`: no call starts after this long; the calls in flight
  /// finish and the report covers the calls made. Unset: every call.
  std::optional<double> seconds;
  int concurrency = 16;
  std::string scope = "LLM";
  caf::optional<bool> stream;        ///< unset: the scope's STREAM
  caf::optional<double> deadline_s;  ///< per-call deadline, unset: none
  std::optional<std::string> publish; ///< --publish H:P
  std::string title;                 ///< shown in the report's first line
  /// Seconds between progress lines; unset: 0.2 on a terminal, else 1.
  std::optional<double> progress_s;
  /// Structured output: every call carries this JSON Schema (empty: none).
  std::string schema;
  /// What each call does: chat, embeddings (`inputs` texts per call) or
  /// ocr_text / ocr_layout (one small PNG per call) (issue 16).
  std::string operation = "chat";
  int64_t inputs = 1;
  /// Embeddings: called on the caller's thread with every answer and the
  /// inputs it embedded (the scenario checks the vectors' order).
  std::function<void(int64_t, const std::vector<std::string>&,
                     const embed_response&)>
    embed_hook;
};

/// Latencies in buckets 0.1 % wide from 1 µs to 10^9 ms, so the soak's
/// percentiles take the same memory (~220 KiB) for any number of calls. A
/// percentile is its bucket's geometric midpoint: within 0.05 % of the
/// sample at that rank (ranks as `v[min(n-1, floor(q*n))]` of the sorted
/// samples).
class latency_histogram {
public:
  void add(double ms);
  /// The `q` quantile (0 <= q <= 1), 0 when nothing was added.
  double percentile(double q) const;
  int64_t count() const {
    return count_;
  }

private:
  std::vector<int64_t> buckets_; ///< allocated by the first add
  int64_t count_ = 0;
};

/// What a soak measured; the scenario command checks expectations on it.
/// Nothing in it grows with the number of calls.
struct soak_result {
  int64_t calls = 0;    ///< calls made (fewer than asked when --seconds ended it)
  int64_t ok = 0;
  double wall_s = 0;
  std::map<std::string, int64_t> ok_by_source; ///< ok calls per answering source
  gateway_status status;          ///< after the run, once quiet
  /// By name: holds, broken, or unset when it cannot be known (a limiter
  /// unreadable at the end: Redis down); only all holding passes.
  std::map<std::string, std::optional<bool>> invariants;
  int64_t attempts = 0;     ///< upstream attempts, from the gateway status
  int64_t rate_limited = 0; ///< 429s seen
  int64_t hedges = 0;       ///< hedge legs fired
  int64_t hedges_won = 0;
  double cost_usd = 0;      ///< sum of the answers' cost_usd
  int64_t priced = 0;       ///< answers that carried a cost
  double p50 = 0, p95 = 0, p98 = 0, p99 = 0, p999 = 0; ///< latency, ms
  boost::json::object report; ///< what --json-report writes
};

/// Called on the caller's thread with every answer (call number, when the
/// call started in seconds since the load started, answer).
using answer_hook = std::function<void(int64_t, double,
                                       const caf::expected<chat_response>&)>;

/// Whether every permit this node was granted (`st.own_*`, never the
/// backend's counters, which a Redis namespace shares with other nodes and
/// earlier runs) has ended: released, or its lease ran out before the
/// release (`own_expired`), every permit not settled is one whose lease ran
/// out, and no settle or release is still pending. False when `st` is
/// unavailable.
bool permits_ended(const limiter_status& st);

/// A node's permit invariants from its status after the load, each holding
/// (true), broken (false) or unknown (unset: a limiter could not be read,
/// e.g. Redis down at the end; `unknown_why` says which and why).
struct permit_invariants {
  std::optional<bool> in_flight_zero; ///< no call, attempt or own permit live
  std::optional<bool> permits_ended;  ///< `permits_ended` for every source
  std::optional<uint64_t> leases_expired; ///< own permits ended by expiry
  std::string unknown_why;
};

permit_invariants node_permit_invariants(const gateway_status& st);

/// Runs the soak against a fresh gateway for `cfg`: progress lines, then the
/// report on stdout. Returns exit_ok when every invariant holds, exit_other
/// when one is broken, exit_usage when the gateway cannot start. `out`, when
/// given, receives the figures.
int run_soak(const settings& cfg, const soak_params& params,
             soak_result* out = nullptr, const answer_hook& hook = {});

/// Why `--json-report` could not write `path` (it is a directory, its
/// directory is missing or not writable, ...), empty when it can: asked
/// before the run so a long soak does not end without its report. A file
/// that was not there is not left behind.
std::string report_path_problem(const std::string& path);

/// Writes `doc` as JSON to `path` (`--json-report`): exit_ok, or exit_other
/// after saying on stderr that the file cannot be written.
int write_json_report(const std::string& path, const boost::json::value& doc);

} // namespace pgw::cli
