// The telemetry report's model: the figures of report.hpp read from a
// telemetry database (winners and losers, per scope and per source).

#include "apps/pgw-actor/report/report.hpp"

#include "config/json_text.hpp"

#include "backends/sqlite/db.hpp"
#include "backends/sqlite/schema.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>

namespace pgw::report {

namespace {

namespace json = boost::json;

caf::error db_error(const std::string& text) {
  return make_error(error_code::invalid_config, text);
}


// -- rows as the report reads them ---------------------------------------------

struct call_info {
  std::string call_id;
  std::string scope;
  std::string outcome;
  std::string source;
  double started_at_ms = 0;
  double latency_ms = 0;
  double generation_ms = 0;
  bool cache_hit = false;
  double cost_saved_usd = 0;
};

struct attempt_info {
  std::string call_id;
  int64_t attempt = 0;
  std::string scope;
  std::string source;
  std::string outcome;
  double started_at_ms = 0;
  double latency_ms = 0;
  double generation_ms = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::optional<double> cost_usd;
  bool is_hedge = false;
  std::string operation; ///< chat, embeddings, ocr_text, ocr_layout
  bool won = false;
};

/// The sources of a call row: one, or the comma-separated list of an
/// embedding call's sub-batches (each named once).
std::vector<std::string> sources_of(const std::string& listed) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= listed.size()) {
    auto comma = std::min(listed.find(',', from), listed.size());
    auto name = listed.substr(from, comma - from);
    if (!name.empty()
        && std::find(out.begin(), out.end(), name) == out.end())
      out.push_back(std::move(name));
    from = comma + 1;
  }
  return out;
}

bool in_range(double at_ms, std::optional<double> since_ms) {
  return !since_ms || at_ms >= *since_ms;
}

/// Runs `sql` and hands each row to `f`.
template <class F>
caf::error for_each_row(sqlite::connection& db, const std::string& sql, F f) {
  auto stmt = db.prepare(sql);
  if (!stmt)
    return stmt.error();
  for (;;) {
    auto row = stmt->step();
    if (!row)
      return row.error();
    if (!*row)
      return {};
    f(*stmt);
  }
}

std::optional<quantiles> quantiles_of(std::vector<double> xs) {
  if (xs.empty())
    return std::nullopt;
  std::sort(xs.begin(), xs.end());
  return quantiles{percentile(xs, 50), percentile(xs, 95), percentile(xs, 99)};
}

std::optional<double> waiting_share_of(double generation_sum,
                                       double latency_sum) {
  if (latency_sum <= 0)
    return std::nullopt;
  return 1.0 - generation_sum / latency_sum;
}

group_stats empty_group(const std::string& scope, const std::string& source) {
  group_stats g;
  g.scope = scope;
  g.source = source;
  for (auto& name : attempt_outcomes())
    g.attempts_by_outcome[name] = 0;
  return g;
}

/// Adds one attempt's counters (not the latency samples) to `g`.
void add_attempt(group_stats& g, const attempt_info& a) {
  ++g.attempts;
  ++g.attempts_by_outcome[a.outcome];
  if (a.is_hedge) {
    ++g.hedges_fired;
    if (a.won)
      ++g.hedges_won;
  }
  g.input_tokens += a.input_tokens;
  g.output_tokens += a.output_tokens;
  if (!a.won)
    ++g.losers;
  if (a.cost_usd) {
    g.cost_usd += *a.cost_usd;
    if (!a.won)
      g.losers_cost_usd += *a.cost_usd;
  } else {
    ++g.unpriced_attempts;
    if (!a.won)
      ++g.unpriced_losers;
  }
}

} // namespace

const std::vector<std::string>& attempt_outcomes() {
  static const std::vector<std::string> names = {
    "ok",          "request_rejected", "source_rejected",
    "result_invalid", "source_dead",   "transient",
    "rate_limited", "cancelled",       "hedge_cancelled",
  };
  return names;
}

double percentile(const std::vector<double>& sorted, double p) {
  auto n = sorted.size();
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n);
  return sorted[rank - 1];
}

// -- building -------------------------------------------------------------------

caf::expected<report> build(const std::string& db_path,
                            std::optional<double> since_ms) {
  std::error_code fs_err;
  if (!std::filesystem::exists(db_path, fs_err))
    return db_error(fmt::format("telemetry database {} does not exist",
                                db_path));
  if (std::filesystem::is_directory(db_path, fs_err))
    return db_error(fmt::format("telemetry database {} is a directory, not "
                                "a SQLite file",
                                db_path));
  // A FIFO would block the open forever; a device or socket is no file.
  if (!std::filesystem::is_regular_file(db_path, fs_err))
    return db_error(fmt::format("telemetry database {} is not a regular "
                                "file (a FIFO, device or socket), not a "
                                "SQLite file",
                                db_path));
  // SQLite's own word for another file is "file is not a database", from
  // the first statement; its header says it before.
  {
    char head[16] = {};
    std::ifstream in{db_path, std::ios::binary};
    in.read(head, sizeof head);
    if (in.gcount() == 0 && in.eof())
      return db_error(fmt::format("telemetry database {} is an empty file, "
                                  "not a pgw telemetry database",
                                  db_path));
    if (in.gcount() > 0
        && std::string(head, static_cast<size_t>(in.gcount()))
             != std::string("SQLite format 3\0", 16))
      return db_error(fmt::format("{} is not a SQLite database, so not a "
                                  "pgw telemetry database",
                                  db_path));
  }
  auto db = sqlite::connection::open(db_path, sqlite::open_mode::read_only);
  if (!db)
    return db_error(words_of(db.error()));
  // Set once the version is read: a database of a later pgw may lack what
  // this report reads.
  int64_t newer_version = 0;
  auto unreadable = [&](const caf::error& err) {
    if (newer_version > 0)
      return db_error(fmt::format(
        "cannot read telemetry database {}: it has schema version {}, newer "
        "than this pgw-actor reads (up to {}); use the pgw-actor that wrote "
        "it ({})",
        db_path, newer_version, sqlite::current_schema_version(),
        words_of(err)));
    return db_error(fmt::format("cannot read telemetry database {}: {}",
                                db_path, words_of(err)));
  };
  for (auto table : {"attempt", "call", "terminal_failure"}) {
    auto has = db->has_table(table);
    if (!has)
      return unreadable(has.error());
    if (!*has)
      return db_error(fmt::format("{} is not a pgw telemetry database (no "
                                  "table {})",
                                  db_path, table));
  }
  report result;
  result.db_path = db_path;
  result.since_ms = since_ms;
  auto version = sqlite::schema_version_of(*db);
  if (!version)
    return unreadable(version.error());
  result.schema_version = *version;
  if (*version > sqlite::current_schema_version())
    newer_version = *version;

  // Every call row (the winner lookup needs calls outside --since too).
  std::vector<call_info> calls;
  auto err = for_each_row(
    *db,
    "SELECT pgw_call_id, pgw_scope, pgw_outcome, pgw_source, "
    "pgw_started_at_ms, pgw_latency_ms, pgw_generation_ms, pgw_cache_hit, "
      + std::string{*version >= 3 ? "pgw_cost_saved_usd" : "NULL"}
      + " FROM call",
    [&](sqlite::statement& s) {
      calls.push_back(call_info{s.column_text(0), s.column_text(1),
                                s.column_text(2), s.column_text(3),
                                s.column_double(4), s.column_double(5),
                                s.column_double(6), s.column_int64(7) != 0,
                                s.is_null(8) ? 0.0 : s.column_double(8)});
    });
  if (err)
    return unreadable(err);
  std::unordered_map<std::string, const call_info*> call_by_id;
  for (auto& c : calls)
    call_by_id.emplace(c.call_id, &c);

  std::vector<attempt_info> attempts;
  err = for_each_row(
    *db,
    "SELECT pgw_call_id, pgw_attempt, pgw_scope, pgw_source, pgw_outcome, "
    "pgw_started_at_ms, pgw_latency_ms, pgw_generation_ms, "
    "gen_ai_usage_input_tokens, gen_ai_usage_output_tokens, pgw_cost_usd, "
    "pgw_is_hedge, "
      + std::string{*version >= 4 ? "pgw_operation" : "'chat'"}
      + " FROM attempt ORDER BY pgw_call_id, pgw_attempt",
    [&](sqlite::statement& s) {
      attempt_info a;
      a.call_id = s.column_text(0);
      a.attempt = s.column_int64(1);
      a.scope = s.column_text(2);
      a.source = s.column_text(3);
      a.outcome = s.column_text(4);
      a.started_at_ms = s.column_double(5);
      a.latency_ms = s.column_double(6);
      a.generation_ms = s.column_double(7);
      a.input_tokens = s.column_int64(8);
      a.output_tokens = s.column_int64(9);
      if (!s.is_null(10))
        a.cost_usd = s.column_double(10);
      a.is_hedge = s.column_int64(11) != 0;
      a.operation = s.column_text(12);
      attempts.push_back(std::move(a));
    });
  if (err)
    return unreadable(err);

  // Winners: attempts arrive sorted by call id, then attempt number. A
  // chat or OCR call has one: its first ok attempt on the call's source.
  // An embedding call's answer is every sub-batch's: each ok attempt wins.
  for (size_t first = 0; first < attempts.size();) {
    auto last = first;
    while (last < attempts.size()
           && attempts[last].call_id == attempts[first].call_id)
      ++last;
    auto call = call_by_id.find(attempts[first].call_id);
    auto known = call != call_by_id.end();
    if (known && call->second->outcome != "ok") {
      first = last;
      continue;
    }
    for (auto i = first; i < last; ++i) {
      auto& a = attempts[i];
      if (a.outcome != "ok")
        continue;
      if (a.operation == "embeddings") {
        a.won = true;
        continue;
      }
      if (known && call->second->source != a.source)
        continue;
      a.won = true;
      break;
    }
    first = last;
  }

  std::map<std::string, scope_report> scopes;
  std::map<std::pair<std::string, std::string>, group_stats> sources;
  // Per scope and per source: call-time sums for the waiting share, and
  // the generation samples.
  struct sums {
    double generation = 0;
    double latency = 0;
    std::vector<double> generation_samples;
    uint64_t decided_attempts = 0;
  };
  std::map<std::string, sums> scope_sums;
  std::map<std::pair<std::string, std::string>, sums> source_sums;
  auto scope_of = [&](const std::string& name) -> scope_report& {
    auto i = scopes.find(name);
    if (i == scopes.end()) {
      i = scopes.emplace(name, scope_report{}).first;
      i->second.total = empty_group(name, "");
    }
    return i->second;
  };
  auto source_of = [&](const std::string& scope,
                       const std::string& name) -> group_stats& {
    auto key = std::make_pair(scope, name);
    auto i = sources.find(key);
    if (i == sources.end())
      i = sources.emplace(key, empty_group(scope, name)).first;
    return i->second;
  };

  for (auto& c : calls) {
    if (!in_range(c.started_at_ms, since_ms))
      continue;
    auto& sc = scope_of(c.scope);
    auto& t = sc.total;
    auto& ss = scope_sums[c.scope];
    ++t.calls;
    if (c.cache_hit) {
      ++sc.cache_hits;
      sc.cost_saved_usd += c.cost_saved_usd;
    }
    t.latencies.push_back(c.latency_ms);
    ss.latency += c.latency_ms;
    ss.generation += c.generation_ms;
    if (c.outcome == "ok") {
      ++t.ok_calls;
      ss.generation_samples.push_back(c.generation_ms);
      for (auto& name : sources_of(c.source)) {
        auto& g = source_of(c.scope, name);
        ++g.calls;
        ++g.ok_calls;
        auto& src = source_sums[{c.scope, name}];
        src.latency += c.latency_ms;
        src.generation += c.generation_ms;
      }
    } else {
      ++sc.failed_calls_by_error[c.outcome];
    }
  }
  for (auto& a : attempts) {
    if (!in_range(a.started_at_ms, since_ms))
      continue;
    auto& t = scope_of(a.scope).total;
    auto& g = source_of(a.scope, a.source);
    add_attempt(t, a);
    add_attempt(g, a);
    g.latencies.push_back(a.latency_ms);
    if (a.outcome == "ok")
      g.ok_latencies.push_back(a.latency_ms);
    else if (a.outcome != "cancelled" && a.outcome != "hedge_cancelled")
      g.failed_latencies.push_back(a.latency_ms);
    auto& src = source_sums[{a.scope, a.source}];
    auto& ss = scope_sums[a.scope];
    if (a.outcome != "cancelled" && a.outcome != "hedge_cancelled") {
      ++src.decided_attempts;
      ++ss.decided_attempts;
    }
    if (a.outcome == "ok")
      src.generation_samples.push_back(a.generation_ms);
  }
  err = for_each_row(*db,
                     "SELECT pgw_scope, pgw_at_ms FROM terminal_failure",
                     [&](sqlite::statement& s) {
                       if (in_range(s.column_double(1), since_ms))
                         ++scope_of(s.column_text(0)).terminal_failures;
                     });
  if (err)
    return unreadable(err);

  for (auto& [name, sc] : scopes) {
    auto& t = sc.total;
    auto& ss = scope_sums[name];
    if (t.calls > 0) {
      t.success_rate = static_cast<double>(t.ok_calls)
                       / static_cast<double>(t.calls);
      sc.cache_hit_rate = static_cast<double>(sc.cache_hits)
                          / static_cast<double>(t.calls);
    }
    t.latency_ms = quantiles_of(t.latencies);
    t.generation_ms = quantiles_of(ss.generation_samples);
    t.waiting_share = waiting_share_of(ss.generation, ss.latency);
    std::sort(t.latencies.begin(), t.latencies.end());
  }
  for (auto& [key, g] : sources) {
    auto& src = source_sums[key];
    if (src.decided_attempts > 0)
      g.success_rate = static_cast<double>(g.attempts_by_outcome["ok"])
                       / static_cast<double>(src.decided_attempts);
    g.latency_ms = quantiles_of(g.latencies);
    g.generation_ms = quantiles_of(src.generation_samples);
    g.waiting_share = waiting_share_of(src.generation, src.latency);
    std::sort(g.latencies.begin(), g.latencies.end());
    std::sort(g.ok_latencies.begin(), g.ok_latencies.end());
    std::sort(g.failed_latencies.begin(), g.failed_latencies.end());
    scope_of(key.first).sources.push_back(std::move(g));
  }
  for (auto& [name, sc] : scopes)
    result.scopes.push_back(std::move(sc));
  return result;
}

} // namespace pgw::report
