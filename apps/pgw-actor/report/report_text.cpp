// The telemetry report as text tables and as JSON.

#include "apps/pgw-actor/report/report.hpp"

#include "config/json_text.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace pgw::report {

namespace json = boost::json;

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

std::string usd_or_unpriced(const std::optional<double>& x) {
  // No attempt had a price: a cost of 0.000000 would claim it was free.
  return x ? usd(*x) : "unpriced";
}

std::vector<std::string> metrics_row(const std::string& label,
                                     const group_stats& g) {
  return {label,
          std::to_string(g.calls),
          percent(g.success_rate),
          std::to_string(g.attempts),
          fmt::format("{}/{}", g.hedges_fired, g.hedges_won),
          triple(g.latency_ms),
          triple(g.generation_ms),
          percent(g.waiting_share),
          fmt::format("{}/{}", g.input_tokens, g.output_tokens),
          usd_or_unpriced(known_cost(g)),
          usd_or_unpriced(known_losers_cost(g))};
}

} // namespace

std::optional<double> known_cost(const group_stats& g) {
  if (g.attempts > 0 && g.unpriced_attempts == g.attempts)
    return std::nullopt;
  return g.cost_usd;
}

std::optional<double> known_losers_cost(const group_stats& g) {
  if (g.losers > 0 && g.unpriced_losers == g.losers)
    return std::nullopt;
  return g.losers_cost_usd;
}

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
         "summed over calls; losers = attempts that did not win.\n"
         "An embedding call counts for each source it used; each of its ok "
         "sub-batches wins.\n";
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
  o["cost_usd"] = optional_number(known_cost(g));
  o["losers_cost_usd"] = optional_number(known_losers_cost(g));
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

} // namespace pgw::report
