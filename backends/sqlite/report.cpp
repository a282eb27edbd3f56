#include "backends/sqlite/report.hpp"

#include "config/json_text.hpp"

#include "backends/sqlite/db.hpp"
#include "backends/sqlite/schema.hpp"
#include "backends/sqlite/svg.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <unordered_map>

namespace pgw::report {

namespace {

namespace json = boost::json;

caf::error db_error(const std::string& text) {
  return make_error(error_code::invalid_config, text);
}

using sqlite::message_of;

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
  bool won = false;
};

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
  if (a.cost_usd) {
    g.cost_usd += *a.cost_usd;
    if (!a.won)
      g.losers_cost_usd += *a.cost_usd;
  } else {
    ++g.unpriced_attempts;
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
  auto db = sqlite::connection::open(db_path, sqlite::open_mode::read_only);
  if (!db)
    return db_error(message_of(db.error()));
  auto unreadable = [&](const caf::error& err) {
    return db_error(fmt::format("cannot read telemetry database {}: {}",
                                db_path, message_of(err)));
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
    "pgw_is_hedge FROM attempt ORDER BY pgw_call_id, pgw_attempt",
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
      attempts.push_back(std::move(a));
    });
  if (err)
    return unreadable(err);

  // Winners: attempts arrive sorted by call id, then attempt number.
  for (size_t first = 0; first < attempts.size();) {
    auto last = first;
    while (last < attempts.size()
           && attempts[last].call_id == attempts[first].call_id)
      ++last;
    auto call = call_by_id.find(attempts[first].call_id);
    for (auto i = first; i < last; ++i) {
      auto& a = attempts[i];
      if (a.outcome != "ok")
        continue;
      if (call != call_by_id.end()
          && (call->second->outcome != "ok" || call->second->source != a.source))
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
      if (!c.source.empty()) {
        auto& g = source_of(c.scope, c.source);
        ++g.calls;
        ++g.ok_calls;
        auto& src = source_sums[{c.scope, c.source}];
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

// -- text -------------------------------------------------------------------------

namespace {

std::string percent(const std::optional<double>& x) {
  return x ? fmt::format("{:.1f}%", *x * 100) : std::string{"-"};
}

std::string ms(double x) {
  return x >= 100 ? fmt::format("{:.0f}", x) : fmt::format("{:.1f}", x);
}

std::string triple(const std::optional<quantiles>& q) {
  if (!q)
    return "-";
  return fmt::format("{}/{}/{}", ms(q->p50), ms(q->p95), ms(q->p99));
}

std::string usd(double x) {
  return fmt::format("{:.6f}", x);
}

/// Left-aligns the first column, right-aligns the others.
std::string table(const std::vector<std::vector<std::string>>& rows,
                  const std::string& indent) {
  std::vector<size_t> widths;
  for (auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (widths.size() <= i)
        widths.push_back(0);
      widths[i] = std::max(widths[i], r[i].size());
    }
  std::string out;
  for (auto& r : rows) {
    std::string line = indent;
    for (size_t i = 0; i < r.size(); ++i) {
      if (i > 0)
        line += "  ";
      if (i == 0)
        line += fmt::format("{:<{}}", r[i], widths[i]);
      else
        line += fmt::format("{:>{}}", r[i], widths[i]);
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + '\n';
  }
  return out;
}

std::vector<std::string> metrics_row(const std::string& label,
                                     const group_stats& g) {
  // No attempt had a price: a cost of 0.000000 would claim it was free.
  bool priced = g.attempts == 0 || g.unpriced_attempts < g.attempts;
  return {label,
          std::to_string(g.calls),
          percent(g.success_rate),
          std::to_string(g.attempts),
          fmt::format("{}/{}", g.hedges_fired, g.hedges_won),
          triple(g.latency_ms),
          triple(g.generation_ms),
          percent(g.waiting_share),
          fmt::format("{}/{}", g.input_tokens, g.output_tokens),
          priced ? usd(g.cost_usd) : "n/a",
          priced ? usd(g.losers_cost_usd) : "n/a"};
}

} // namespace

std::string render_text(const report& r) {
  std::string out = fmt::format("telemetry report: {} (schema version {})\n",
                                r.db_path, r.schema_version);
  out += r.since_ms ? fmt::format("since {}\n", format_utc(*r.since_ms))
                    : std::string{"all rows\n"};
  if (r.scopes.empty()) {
    out += "\nno calls or attempts recorded\n";
    return out;
  }
  for (auto& sc : r.scopes) {
    auto& t = sc.total;
    out += fmt::format("\nscope {}: {} calls, {} ok ({})", t.scope, t.calls,
                       t.ok_calls, percent(t.success_rate));
    if (!sc.failed_calls_by_error.empty()) {
      std::string failed;
      for (auto& [code, n] : sc.failed_calls_by_error)
        failed += fmt::format("{}{} {}", failed.empty() ? "" : ", ", code, n);
      out += fmt::format("; failed: {}", failed);
    }
    out += fmt::format("; {} terminal_failure rows\n", sc.terminal_failures);
    out += fmt::format("  cache: {} hits ({} of calls), {} USD saved\n",
                       sc.cache_hits, percent(sc.cache_hit_rate),
                       usd(sc.cost_saved_usd));
    std::vector<std::vector<std::string>> rows = {
      {"source", "calls", "ok%", "attempts", "hedges fired/won",
       "latency ms p50/p95/p99", "generation ms p50/p95/p99", "waiting",
       "tokens in/out", "cost USD", "losers USD"},
    };
    rows.push_back(metrics_row("(all)", t));
    for (auto& g : sc.sources)
      rows.push_back(metrics_row(g.source, g));
    out += table(rows, "  ");
    // Attempts by outcome: ok always, the others when they occurred.
    std::vector<std::string> shown;
    for (auto& name : attempt_outcomes())
      if (name == "ok" || t.attempts_by_outcome.at(name) > 0)
        shown.push_back(name);
    for (auto& [name, n] : t.attempts_by_outcome)
      if (n > 0
          && std::find(shown.begin(), shown.end(), name) == shown.end())
        shown.push_back(name);
    std::vector<std::vector<std::string>> outcome_rows;
    std::vector<std::string> header = {"attempts by outcome"};
    header.insert(header.end(), shown.begin(), shown.end());
    outcome_rows.push_back(header);
    auto add = [&](const std::string& label, const group_stats& g) {
      std::vector<std::string> row = {label};
      for (auto& name : shown) {
        auto i = g.attempts_by_outcome.find(name);
        row.push_back(std::to_string(i != g.attempts_by_outcome.end()
                                       ? i->second
                                       : 0));
      }
      outcome_rows.push_back(std::move(row));
    };
    add("(all)", t);
    for (auto& g : sc.sources)
      add(g.source, g);
    out += '\n';
    out += table(outcome_rows, "  ");
    uint64_t unpriced = t.unpriced_attempts;
    if (unpriced > 0)
      out += fmt::format("  cost leaves out {} unpriced attempts\n", unpriced);
  }
  out += "\n(all): calls of the scope; ok% = ok calls / calls; percentiles "
         "over calls (generation: ok calls).\n"
         "sources: calls = calls served; ok% = ok attempts / attempts not "
         "cancelled; latency over all attempts,\n"
         "generation over ok attempts; waiting = 1 - generation / latency "
         "summed over calls; losers = attempts that did not win.\n";
  return out;
}

// -- JSON -----------------------------------------------------------------------

namespace {

json::value optional_number(const std::optional<double>& x) {
  return x ? json::value(*x) : json::value(nullptr);
}

json::value quantiles_json(const std::optional<quantiles>& q) {
  if (!q)
    return nullptr;
  return json::object{{"p50", round_us(q->p50)},
                      {"p95", round_us(q->p95)},
                      {"p99", round_us(q->p99)}};
}

json::object group_json(const group_stats& g, bool is_total) {
  json::object o;
  if (!is_total)
    o["source"] = g.source;
  o["calls"] = g.calls;
  o["ok_calls"] = g.ok_calls;
  o["success_rate"] = optional_number(g.success_rate);
  o["success_rate_basis"] = is_total ? "calls" : "attempts";
  o["attempts"] = g.attempts;
  json::object outcomes;
  for (auto& [name, n] : g.attempts_by_outcome)
    outcomes[name] = n;
  o["attempts_by_outcome"] = std::move(outcomes);
  o["hedges_fired"] = g.hedges_fired;
  o["hedges_won"] = g.hedges_won;
  o["latency_ms"] = quantiles_json(g.latency_ms);
  o["generation_ms"] = quantiles_json(g.generation_ms);
  o["waiting_share"] = optional_number(g.waiting_share);
  o["input_tokens"] = g.input_tokens;
  o["output_tokens"] = g.output_tokens;
  o["cost_usd"] = g.cost_usd;
  o["losers_cost_usd"] = g.losers_cost_usd;
  o["unpriced_attempts"] = g.unpriced_attempts;
  return o;
}

} // namespace

std::string render_json(const report& r) {
  json::object root;
  root["db"] = r.db_path;
  root["schema_version"] = r.schema_version;
  root["since"] = r.since_ms ? json::value(format_utc(*r.since_ms))
                             : json::value(nullptr);
  root["since_ms"] = optional_number(r.since_ms);
  json::array scopes;
  for (auto& sc : r.scopes) {
    json::object s;
    s["scope"] = sc.total.scope;
    s["total"] = group_json(sc.total, true);
    json::array sources;
    for (auto& g : sc.sources)
      sources.push_back(group_json(g, false));
    s["sources"] = std::move(sources);
    json::object failed;
    for (auto& [code, n] : sc.failed_calls_by_error)
      failed[code] = n;
    s["failed_calls_by_error"] = std::move(failed);
    s["terminal_failures"] = sc.terminal_failures;
    s["cache"] = json::object{{"hits", sc.cache_hits},
                              {"hit_rate", optional_number(sc.cache_hit_rate)},
                              {"cost_saved_usd", sc.cost_saved_usd}};
    scopes.push_back(std::move(s));
  }
  root["scopes"] = std::move(scopes);
  return json_text(root) + "\n";
}

// -- SVG ------------------------------------------------------------------------

namespace {

const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                         "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                         "#bcbd22", "#17becf"};

/// "0.5 ms", "20 ms", "2 s": a tick value in plain words.
std::string tick_label(double ms) {
  if (ms < 1000)
    return fmt::format("{:g} ms", ms);
  return fmt::format("{:g} s", ms / 1000);
}

/// 1-2-5 tick values inside [lo, hi] (at least the two ends' neighbours).
std::vector<double> ticks_125(double lo, double hi) {
  std::vector<double> out;
  auto first = static_cast<int>(std::floor(std::log10(lo)));
  auto last = static_cast<int>(std::ceil(std::log10(hi)));
  for (int e = first; e <= last; ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      auto v = m * std::pow(10.0, e);
      if (v >= lo * 0.999 && v <= hi * 1.001)
        out.push_back(v);
    }
  return out;
}

} // namespace

std::string render_latency_cdf_svg(const report& r) {
  struct series {
    std::string label;
    const std::vector<double>* samples;
    size_t color = 0;
    bool failed = false; ///< drawn dashed
  };
  std::vector<series> all;
  size_t sources = 0;
  for (auto& sc : r.scopes)
    for (auto& g : sc.sources) {
      if (g.ok_latencies.empty() && g.failed_latencies.empty())
        continue;
      if (!g.ok_latencies.empty())
        all.push_back({fmt::format("{}/{} ok (n={})", g.scope, g.source,
                                   g.ok_latencies.size()),
                       &g.ok_latencies, sources, false});
      if (!g.failed_latencies.empty())
        all.push_back({fmt::format("{}/{} failed (n={})", g.scope, g.source,
                                   g.failed_latencies.size()),
                       &g.failed_latencies, sources, true});
      ++sources;
    }
  // The axis fits the data (a 10 % margin each side), 1-2-5 ticks; zero
  // latencies sit on the left edge.
  double lo = std::numeric_limits<double>::infinity();
  double hi = 0;
  for (auto& s : all)
    for (auto x : *s.samples) {
      if (x > 0)
        lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  if (!std::isfinite(lo) || hi <= 0) {
    lo = 1;
    hi = 10;
  }
  lo /= 1.1;
  hi *= 1.1;
  if (hi / lo < 2.5) { // a narrow range still gets a few ticks
    auto mid = std::sqrt(lo * hi);
    lo = mid / 1.6;
    hi = mid * 1.6;
  }
  auto log_lo = std::log10(lo);
  auto log_hi = std::log10(hi);

  const double width = 860;
  const double left = 70, right = 250, top = 40, bottom = 60;
  const double height = 480;
  const double plot_w = width - left - right;
  const double plot_h = height - top - bottom;
  auto x_of = [&](double ms) {
    auto v = std::max(ms, lo);
    auto t = (std::log10(v) - log_lo) / (log_hi - log_lo);
    return left + t * plot_w;
  };
  auto y_of = [&](double fraction) { return top + (1 - fraction) * plot_h; };

  svg::document doc{width, height};
  doc.rect(0, 0, width, height, "white");
  doc.text(left, 24, fmt::format("attempt latency CDF per source — {}",
                                 r.db_path),
           "start", 14);
  // Grid and ticks.
  for (auto v : ticks_125(lo, hi)) {
    auto x = x_of(v);
    doc.line(x, top, x, top + plot_h, "#dddddd", 1);
    doc.text(x, top + plot_h + 18, tick_label(v), "middle", 11);
  }
  for (int i = 0; i <= 4; ++i) {
    auto f = i / 4.0;
    auto y = y_of(f);
    doc.line(left, y, left + plot_w, y, "#dddddd", 1);
    doc.text(left - 8, y + 4, fmt::format("{:.2f}", f), "end", 11);
  }
  doc.line(left, top + plot_h, left + plot_w, top + plot_h, "#333333", 1);
  doc.line(left, top, left, top + plot_h, "#333333", 1);
  doc.text(left + plot_w / 2, height - 16, "latency (log scale)", "middle",
           12);
  doc.text(18, top + plot_h / 2,
           "fraction of attempts <= latency (failed: dashed)", "middle", 12,
           -90);
  if (all.empty())
    doc.text(left + plot_w / 2, top + plot_h / 2, "no attempts recorded",
             "middle", 14);
  // One step curve per source; long samples are thinned to <= 1000 steps.
  for (size_t k = 0; k < all.size(); ++k) {
    auto& xs = *all[k].samples;
    auto color = palette[all[k].color % (sizeof(palette) / sizeof(palette[0]))];
    auto n = xs.size();
    auto steps = std::min<size_t>(n, 1000);
    std::vector<std::pair<double, double>> points;
    points.emplace_back(x_of(xs.front()), y_of(0));
    for (size_t j = 1; j <= steps; ++j) {
      auto rank = (j * n + steps - 1) / steps; // ceil(j * n / steps)
      auto x = x_of(xs[rank - 1]);
      if (x != points.back().first)
        points.emplace_back(x, points.back().second);
      points.emplace_back(x, y_of(static_cast<double>(rank)
                                  / static_cast<double>(n)));
    }
    points.emplace_back(left + plot_w, y_of(1));
    doc.polyline_path(points, color, 2, all[k].failed ? "cdf failed" : "cdf",
                      all[k].failed ? "6 4" : "");
    auto ly = top + 10 + static_cast<double>(k) * 20;
    doc.line(left + plot_w + 20, ly, left + plot_w + 44, ly, color, 3,
             all[k].failed ? "6 4" : "");
    doc.text(left + plot_w + 50, ly + 4, all[k].label, "start", 12);
  }
  return doc.str();
}

// -- time -----------------------------------------------------------------------

namespace {

/// Reads exactly `digits` digits at `pos`.
bool read_int(const std::string& s, size_t& pos, size_t digits, int& out) {
  if (pos + digits > s.size())
    return false;
  out = 0;
  for (size_t i = 0; i < digits; ++i) {
    auto ch = s[pos + i];
    if (!std::isdigit(static_cast<unsigned char>(ch)))
      return false;
    out = out * 10 + (ch - '0');
  }
  pos += digits;
  return true;
}

bool expect(const std::string& s, size_t& pos, char ch) {
  if (pos < s.size() && s[pos] == ch) {
    ++pos;
    return true;
  }
  return false;
}

std::optional<double> parse_relative(const std::string& text, double now_ms) {
  if (text.size() < 2)
    return std::nullopt;
  double unit = 0;
  switch (text.back()) {
    case 's':
      unit = 1e3;
      break;
    case 'm':
      unit = 60e3;
      break;
    case 'h':
      unit = 3600e3;
      break;
    case 'd':
      unit = 86400e3;
      break;
    case 'w':
      unit = 7 * 86400e3;
      break;
    default:
      return std::nullopt;
  }
  auto number = text.substr(0, text.size() - 1);
  for (char ch : number)
    if (!std::isdigit(static_cast<unsigned char>(ch)) && ch != '.')
      return std::nullopt;
  char* end = nullptr;
  auto x = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(x) || x < 0)
    return std::nullopt;
  return now_ms - x * unit;
}

std::optional<double> parse_iso(const std::string& s) {
  size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  double fraction = 0;
  if (!read_int(s, pos, 4, year) || !expect(s, pos, '-')
      || !read_int(s, pos, 2, month) || !expect(s, pos, '-')
      || !read_int(s, pos, 2, day))
    return std::nullopt;
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == 't' || s[pos] == ' ')) {
    ++pos;
    if (!read_int(s, pos, 2, hour) || !expect(s, pos, ':')
        || !read_int(s, pos, 2, minute))
      return std::nullopt;
    if (expect(s, pos, ':')) {
      if (!read_int(s, pos, 2, second))
        return std::nullopt;
      if (expect(s, pos, '.')) {
        auto start = pos;
        double scale = 0.1;
        while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
          fraction += (s[pos] - '0') * scale;
          scale /= 10;
          ++pos;
        }
        if (pos == start)
          return std::nullopt;
      }
    }
  }
  int offset_minutes = 0;
  if (pos < s.size()) {
    if (s[pos] == 'Z' || s[pos] == 'z') {
      ++pos;
    } else if (s[pos] == '+' || s[pos] == '-') {
      int sign = s[pos] == '+' ? 1 : -1;
      ++pos;
      int oh = 0, om = 0;
      if (!read_int(s, pos, 2, oh))
        return std::nullopt;
      expect(s, pos, ':');
      if (!read_int(s, pos, 2, om) || oh > 23 || om > 59)
        return std::nullopt;
      offset_minutes = sign * (oh * 60 + om);
    }
  }
  if (pos != s.size())
    return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23
      || minute > 59 || second > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  auto t = ::timegm(&tm);
  // timegm normalizes 2026-02-30 into March: reject dates that moved.
  if (tm.tm_mday != day || tm.tm_mon != month - 1)
    return std::nullopt;
  return (static_cast<double>(t) - offset_minutes * 60.0 + fraction) * 1000.0;
}

} // namespace

std::optional<double> parse_since(const std::string& text, double now_ms) {
  if (text.empty())
    return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(text.front()))
      && !std::isdigit(static_cast<unsigned char>(text.back())))
    if (auto rel = parse_relative(text, now_ms))
      return rel;
  return parse_iso(text);
}

std::string format_utc(double epoch_ms) {
  auto t = static_cast<std::time_t>(std::floor(epoch_ms / 1000.0));
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
}

} // namespace pgw::report
