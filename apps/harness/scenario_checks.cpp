// The expectations of a scenario file ("expect"), checked after the run
// against the soak's figures, the gateway's status and the simulator's
// request log. The list of keys is in config/scenarios/README.md.

#include "apps/harness/scenario_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

namespace pgw::cli {

namespace json = boost::json;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// Admission happens a few milliseconds before the simulator sees the
/// request: windows of 59.5 s of arrivals stay inside one 60 s window of
/// admissions (as in the fleet test).
constexpr double window_ms = 59500;

/// Requests admitted before a 429 came back may still arrive just after it.
constexpr double retry_after_slack_ms = 100;

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::invalid_argument("expect." + where + ": " + what);
}

double num(const json::value& v, const std::string& where) {
  if (!v.is_number() || !std::isfinite(v.to_number<double>()))
    bad(where, "must be a number");
  return v.to_number<double>();
}

const json::object& obj(const json::value& v, const std::string& where) {
  if (!v.is_object())
    bad(where, "must be an object");
  return v.get_object();
}

std::string str(const json::value& v, const std::string& where) {
  if (!v.is_string())
    bad(where, "must be a string");
  return std::string(v.get_string());
}

std::string pct(double x) {
  return fmt::format("{:.3f} %", 100 * x);
}

/// Attempts per source from the gateway status, and the total.
std::map<std::string, int64_t> attempts_by_source(const gateway_status& st,
                                                  int64_t& total) {
  std::map<std::string, int64_t> out;
  total = 0;
  for (auto& s : st.sources) {
    int64_t n = 0;
    for (auto& [name, k] : s.outcomes)
      n += k;
    out[s.name] = n;
    total += n;
  }
  return out;
}

const source_status* find_source(const gateway_status& st,
                                 const std::string& name) {
  for (auto& s : st.sources)
    if (s.name == name)
      return &s;
  return nullptr;
}

// -- the simulator's log ---------------------------------------------------------

/// What the simulator saw of one source.
struct limit_figures {
  std::string source;
  std::string model;
  int sharing = 1; ///< sources using this model (figures combine them)
  int64_t requests = 0;
  int64_t window_requests = 0; ///< the busiest 59.5 s window of arrivals
  int64_t window_tokens = 0;   ///< the most tokens in such a window
  int64_t peak_concurrency = 0;
  std::optional<int64_t> rpm, tpm, max_concurrency;
  int64_t est_tokens = 0;
};

std::vector<limit_figures> limits_from_log(const scope_config& scope,
                                           const std::vector<log_row>& log) {
  std::map<std::string, int> sharing;
  for (auto& s : scope.sources)
    ++sharing[s.model];
  std::vector<limit_figures> out;
  for (auto& s : scope.sources) {
    limit_figures f;
    f.source = s.name;
    f.model = s.model;
    f.sharing = sharing[s.model];
    f.rpm = s.rpm;
    f.tpm = s.tpm;
    f.max_concurrency = s.max_concurrency;
    f.est_tokens = s.est_tokens;
    std::vector<const log_row*> rows;
    for (auto& r : log)
      if (r.model == s.model)
        rows.push_back(&r);
    std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) {
      return a->arrived_ms < b->arrived_ms;
    });
    f.requests = static_cast<int64_t>(rows.size());
    size_t j = 0;
    int64_t tokens = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      while (j < rows.size()
             && rows[j]->arrived_ms < rows[i]->arrived_ms + window_ms)
        tokens += rows[j++]->tokens;
      f.window_requests = std::max<int64_t>(f.window_requests,
                                            static_cast<int64_t>(j - i));
      f.window_tokens = std::max(f.window_tokens, tokens);
      tokens -= rows[i]->tokens;
    }
    std::vector<std::pair<double, int>> events;
    for (auto* r : rows) {
      events.emplace_back(r->arrived_ms, +1);
      events.emplace_back(r->ended_ms, -1);
    }
    std::sort(events.begin(), events.end());
    int64_t live = 0;
    for (auto& [at, d] : events)
      f.peak_concurrency = std::max(f.peak_concurrency, live += d);
    out.push_back(std::move(f));
  }
  return out;
}

/// Retry-After seconds of a model's 429 answers (the smallest when several).
std::map<std::string, double> retry_after_of(const scenario_file& f) {
  std::map<std::string, double> out;
  auto note = [&](const std::string& model, int status,
                  const std::optional<std::string>& header) {
    if (status != 429 || !header)
      return;
    auto s = parse_number(*header);
    if (!s || *s <= 0)
      return;
    auto it = out.find(model);
    if (it == out.end() || *s < it->second)
      out[model] = *s;
  };
  for (auto& [name, m] : f.models) {
    for (auto& fault : m.faults)
      note(name, fault.status, fault.retry_after);
    for (auto& e : m.script)
      note(name, e.fault.status, e.fault.retry_after);
    if (m.outage)
      note(name, m.outage->status, m.outage->retry_after);
  }
  return out;
}

struct retry_after_figures {
  int64_t answers = 0;    ///< 429s with a Retry-After the scenario sets
  int64_t violations = 0; ///< requests to the same model inside the window
  std::string example;
};

retry_after_figures retry_after_check(const scenario_file& f,
                                      const std::vector<log_row>& log) {
  retry_after_figures out;
  auto ra = retry_after_of(f);
  std::map<std::string, std::vector<double>> arrivals;
  for (auto& r : log)
    arrivals[r.model].push_back(r.arrived_ms);
  for (auto& [m, v] : arrivals)
    std::sort(v.begin(), v.end());
  for (auto& r : log) {
    if (r.status != 429)
      continue;
    auto it = ra.find(r.model);
    if (it == ra.end())
      continue;
    ++out.answers;
    double end = std::isfinite(r.ended_ms) ? r.ended_ms : r.arrived_ms;
    double from = end + retry_after_slack_ms;
    double to = end + it->second * 1000 - retry_after_slack_ms;
    auto& v = arrivals[r.model];
    auto lo = std::upper_bound(v.begin(), v.end(), from);
    auto hi = std::lower_bound(v.begin(), v.end(), to);
    if (hi > lo) {
      out.violations += hi - lo;
      if (out.example.empty())
        out.example = fmt::format(
          "{}: a 429 (Retry-After {} s) ended at {:.0f} ms, then a request "
          "arrived at {:.0f} ms",
          r.model, it->second, end, *lo);
    }
  }
  return out;
}

const std::set<std::string> single_keys{
  "success_rate_min", "p50_ms_max", "p95_ms_max", "p99_ms_max",
  "max_share", "min_share", "rate_limited_min", "hedges_min", "hedges_max",
  "breakers", "success_rate_until", "share_after", "complete_answers",
  "limits_respected", "limits_reached", "retry_after_honoured",
  "upstream_requests_per_call_max", "sim_actions_min", "schema_valid_min",
  "reask_rate_min", "reask_rate_max", "embeddings_in_order"};

const std::set<std::string> fleet_keys{
  "success_rate_min", "limits_respected", "limits_reached",
  "retry_after_honoured", "upstream_requests_per_call_max",
  "sim_actions_min"};

/// The simulator's log by action ("ok", "hang", "cut", ...; error answers
/// as "http_NNN").
std::map<std::string, int64_t> actions_of(const std::vector<log_row>& log) {
  std::map<std::string, int64_t> out;
  for (auto& r : log)
    ++out[r.action == "error" ? fmt::format("http_{}", r.status) : r.action];
  return out;
}

} // namespace

int64_t scaled_count(const scenario_file& f, double written, bool minimum) {
  auto x = written * static_cast<double>(f.calls)
           / static_cast<double>(std::max<int64_t>(f.file_calls, 1));
  // 1e-9: 150 * 200 / 2000 is 15 exactly, not 15.000000000000002.
  return static_cast<int64_t>(minimum ? std::ceil(x - 1e-9)
                                      : std::floor(x + 1e-9));
}

std::vector<log_row> parse_sim_log(const std::string& log_json) {
  std::vector<log_row> out;
  auto doc = json::parse(log_json).as_object();
  for (auto& e : doc.at("requests").as_array()) {
    auto& o = e.as_object();
    log_row r;
    r.model = std::string(o.at("model").as_string());
    r.arrived_ms = o.at("arrived_ms").to_number<double>();
    r.ended_ms = o.at("ended_ms").is_null() ? inf
                                            : o.at("ended_ms").to_number<double>();
    r.status = static_cast<int>(o.at("status").to_number<int64_t>());
    r.action = std::string(o.at("action").as_string());
    r.tokens = o.at("prompt_tokens").to_number<int64_t>()
               + o.at("tokens_sent").to_number<int64_t>();
    r.client_closed = o.at("client_closed").as_bool();
    out.push_back(std::move(r));
  }
  return out;
}

void check_expectation_keys(const json::object& expect, bool fleet) {
  for (auto& kv : expect) {
    std::string key(kv.key());
    if (!key.empty() && key[0] == '_')
      continue;
    if (!single_keys.count(key))
      bad(key, "unknown expectation (see config/scenarios/README.md)");
    if (fleet && !fleet_keys.count(key))
      bad(key, "not checked in a fleet scenario");
    auto& v = kv.value();
    if (key == "max_share" || key == "min_share"
        || key == "sim_actions_min") {
      for (auto& s : obj(v, key))
        num(s.value(), key + "." + std::string(s.key()));
    } else if (key == "breakers") {
      for (auto& s : obj(v, key)) {
        auto where = key + "." + std::string(s.key());
        for (auto& c : obj(s.value(), where)) {
          std::string k(c.key());
          if (k == "state")
            str(c.value(), where + ".state");
          else if (k == "opens_min" || k == "opens_max" || k == "probes_min"
                   || k == "probes_max" || k == "probes_succeeded"
                   || k == "probe_failures_min")
            num(c.value(), where + "." + k);
          else
            bad(where + "." + k, "unknown (state, opens_min, opens_max, "
                                 "probes_min, probes_max, probes_succeeded, "
                                 "probe_failures_min)");
        }
      }
    } else if (key == "success_rate_until") {
      auto& o = obj(v, key);
      num(o.contains("until_s") ? o.at("until_s") : json::value(), key + ".until_s");
      num(o.contains("min") ? o.at("min") : json::value(), key + ".min");
    } else if (key == "share_after") {
      auto& o = obj(v, key);
      str(o.contains("source") ? o.at("source") : json::value(), key + ".source");
      num(o.contains("after_s") ? o.at("after_s") : json::value(), key + ".after_s");
      num(o.contains("min") ? o.at("min") : json::value(), key + ".min");
    } else if (key == "complete_answers" || key == "limits_respected"
               || key == "retry_after_honoured"
               || key == "embeddings_in_order") {
      if (!v.is_bool())
        bad(key, "must be true or false");
    } else if (key == "limits_reached") {
      for (auto& s : obj(v, key)) {
        auto where = key + "." + std::string(s.key());
        if (!s.value().is_array())
          bad(where, "must be an array of \"rpm\", \"tpm\", \"concurrency\"");
        for (auto& x : s.value().as_array()) {
          auto k = str(x, where);
          if (k != "rpm" && k != "tpm" && k != "concurrency")
            bad(where, "must be an array of \"rpm\", \"tpm\", \"concurrency\"");
        }
      }
    } else {
      num(v, key);
    }
  }
}

namespace {

/// One run of the checks: what they share (computed once) and the verdicts
/// so far.
struct check_run {
  const check_context& ctx;
  std::vector<check>& out;
  double rate = 0;       ///< calls that succeeded
  double reask_rate = 0; ///< re-asks per call
  int64_t total = 0;     ///< upstream attempts
  std::map<std::string, int64_t> by_source; ///< attempts by source
  std::vector<limit_figures> limits;

  void add(std::string name, bool ok, std::string detail) {
    out.push_back({std::move(name), ok, std::move(detail)});
  }
};

/// Checks expectation `key` (present in the file, value `x`).
using check_fn = void (*)(check_run& r, const std::string& key,
                          const json::value& x);

void success_rate_min(check_run& r, const std::string&, const json::value& x) {
  auto want = x.to_number<double>();
  r.add("success_rate_min", r.rate >= want,
        fmt::format("success {} (want >= {})", pct(r.rate), pct(want)));
}

void latency_max(check_run& r, const std::string& key, const json::value& x) {
  auto& soak = r.ctx.soak;
  auto value = key == "p50_ms_max" ? soak.p50
               : key == "p95_ms_max" ? soak.p95
                                     : soak.p99;
  auto want = x.to_number<double>();
  r.add(key, value <= want,
        fmt::format("{} {:.1f} ms (want <= {:.1f} ms)", key.substr(0, 3),
                    value, want));
}

void share(check_run& r, const std::string& key, const json::value& x) {
  bool max = key == "max_share";
  for (auto& kv : x.as_object()) {
    std::string src(kv.key());
    auto want = kv.value().to_number<double>();
    auto it = r.by_source.find(src);
    if (it == r.by_source.end()) {
      r.add(key + "." + src, false, "no source " + src);
      continue;
    }
    auto got = r.total ? static_cast<double>(it->second) / r.total : 0.0;
    r.add(key + "." + src, max ? got < want : got >= want,
          fmt::format("{} got {} of {} attempts = {} (want {} {})", src,
                      it->second, r.total, pct(got), max ? "<" : ">=",
                      pct(want)));
  }
}

/// ", scaled to N calls" when `--calls` changed the file's load.
std::string scaled_note(const scenario_file& f) {
  return f.calls != f.file_calls
           ? fmt::format(", scaled to {} calls", f.calls)
           : std::string{};
}

void rate_limited_min(check_run& r, const std::string&, const json::value& x) {
  auto& file = r.ctx.file;
  auto want = scaled_count(file, x.to_number<double>(), true);
  auto got = r.ctx.soak.rate_limited;
  r.add("rate_limited_min", got >= want,
        fmt::format("{} upstream 429s seen (want >= {}{})", got, want,
                    scaled_note(file)));
}

void hedges(check_run& r, const std::string& key, const json::value& x) {
  auto& file = r.ctx.file;
  bool min = key == "hedges_min";
  auto want = scaled_count(file, x.to_number<double>(), min);
  auto got = r.ctx.soak.hedges;
  r.add(key, min ? got >= want : got <= want,
        fmt::format("{} hedge legs fired (want {} {}{})", got,
                    min ? ">=" : "<=", want, scaled_note(file)));
}

/// One `breakers.SOURCE.KEY` expectation of the breaker `b` of `src`.
void breaker_figure(check_run& r, const std::string& src,
                    const breaker_status& b, const std::string& k,
                    const json::value& v) {
  auto name = "breakers." + src + "." + k;
  if (k == "state") {
    auto want = std::string(v.as_string());
    r.add(name, b.state == want,
          fmt::format("{}'s breaker is {} (want {})", src, b.state, want));
    return;
  }
  auto want = v.to_number<int64_t>();
  auto opens = static_cast<int64_t>(b.opens);
  auto probes = static_cast<int64_t>(b.probes);
  auto failures = static_cast<int64_t>(b.probe_failures);
  auto succeeded = probes - failures;
  if (k == "opens_min")
    r.add(name, opens >= want,
          fmt::format("{}'s breaker opened {} times (want >= {})", src,
                      b.opens, want));
  else if (k == "opens_max")
    r.add(name, opens <= want,
          fmt::format("{}'s breaker opened {} times (want <= {})", src,
                      b.opens, want));
  else if (k == "probes_min")
    r.add(name, probes >= want,
          fmt::format("{}'s breaker sent {} probes (want >= {})", src,
                      b.probes, want));
  else if (k == "probes_max")
    r.add(name, probes <= want,
          fmt::format("{}'s breaker sent {} probes (want <= {})", src,
                      b.probes, want));
  else if (k == "probe_failures_min")
    r.add(name, failures >= want,
          fmt::format("{} of {}'s probes failed (want >= {})",
                      b.probe_failures, src, want));
  else if (k == "probes_succeeded")
    r.add(name, succeeded == want,
          fmt::format("{} of {}'s {} probes did not fail (want {}): "
                      "{} closed it",
                      succeeded, src, b.probes, want,
                      succeeded == 1 ? "one probe" : "not exactly one "
                                                     "probe"));
}

void breakers(check_run& r, const std::string&, const json::value& x) {
  for (auto& kv : x.as_object()) {
    std::string src(kv.key());
    auto* s = find_source(r.ctx.soak.status, src);
    if (!s) {
      r.add("breakers." + src, false, "no source " + src);
      continue;
    }
    for (auto& c : kv.value().as_object())
      breaker_figure(r, src, s->breaker, std::string(c.key()), c.value());
  }
}

void success_rate_until(check_run& r, const std::string&,
                        const json::value& x) {
  auto until = x.at("until_s").to_number<double>();
  auto want = x.at("min").to_number<double>();
  auto n = r.ctx.until_calls, ok = r.ctx.until_ok;
  auto got = n ? static_cast<double>(ok) / n : 0.0;
  r.add("success_rate_until", n > 0 && got >= want,
        fmt::format("{} of {} calls started in the first {} s succeeded = {} "
                    "(want >= {})",
                    ok, n, until, pct(got), pct(want)));
}

void share_after(check_run& r, const std::string&, const json::value& x) {
  auto src = std::string(x.at("source").as_string());
  auto after = x.at("after_s").to_number<double>();
  auto want = x.at("min").to_number<double>();
  auto n = r.ctx.after_ok, on = r.ctx.after_on;
  auto got = n ? static_cast<double>(on) / n : 0.0;
  r.add("share_after", n > 0 && got >= want,
        fmt::format("{} answered {} of the {} calls started after {} s = {} "
                    "(want >= {})",
                    src, on, n, after, pct(got), pct(want)));
}

// Structured output (load.schema).

void schema_valid_min(check_run& r, const std::string&, const json::value& x) {
  auto& ctx = r.ctx;
  auto calls = ctx.soak.calls;
  auto want = x.to_number<double>();
  auto got = calls ? static_cast<double>(ctx.schema_valid) / calls : 0.0;
  r.add("schema_valid_min", !ctx.file.schema.empty() && got >= want,
        fmt::format("{} of {} calls returned JSON valid against load.schema "
                    "= {} (want >= {})",
                    ctx.schema_valid, calls, pct(got), pct(want)));
}

void reask_rate(check_run& r, const std::string& key, const json::value& x) {
  auto want = x.to_number<double>();
  bool min = key == "reask_rate_min";
  r.add(key, min ? r.reask_rate >= want : r.reask_rate <= want,
        fmt::format("{} re-asks over {} calls = {:.3f} per call (want {} "
                    "{})",
                    r.ctx.reasks, r.ctx.soak.calls, r.reask_rate,
                    min ? ">=" : "<=", want));
}

void complete_answers(check_run& r, const std::string&, const json::value& x) {
  if (!x.as_bool())
    return;
  auto& ctx = r.ctx;
  auto detail = fmt::format("{} ok answers compared with the simulator's "
                            "text for their model: {} truncated or wrong",
                            ctx.answers_checked, ctx.answers_truncated);
  for (auto& ex : ctx.truncated_examples)
    detail += "\n            " + ex;
  r.add("complete_answers",
        ctx.answers_truncated == 0 && ctx.answers_checked == ctx.soak.ok,
        detail);
}

void embeddings_in_order(check_run& r, const std::string&,
                         const json::value& x) {
  if (!x.as_bool())
    return;
  auto& ctx = r.ctx;
  r.add("embeddings_in_order",
        ctx.vectors_wrong == 0 && ctx.vectors_checked > 0
          && ctx.soak.ok == ctx.soak.calls,
        fmt::format("{} vectors of {} ok calls compared with the "
                    "simulator's vector of their input: {} wrong",
                    ctx.vectors_checked, ctx.soak.ok, ctx.vectors_wrong));
}

void limits_respected(check_run& r, const std::string&, const json::value& x) {
  if (!x.as_bool())
    return;
  for (auto& f : r.limits) {
    if (!f.rpm && !f.tpm && !f.max_concurrency)
      continue;
    auto name = "limits_respected." + f.source;
    if (f.sharing > 1) {
      r.add(name, false,
            fmt::format("{} shares model {} with another source: the "
                        "simulator's log cannot tell them apart",
                        f.source, f.model));
      continue;
    }
    bool ok = true;
    std::string detail = f.source + ":";
    if (f.rpm) {
      ok = ok && f.window_requests <= *f.rpm;
      detail += fmt::format(" {} requests in the busiest minute (RPM {})",
                            f.window_requests, *f.rpm);
    }
    if (f.tpm) {
      ok = ok && f.window_tokens <= *f.tpm;
      detail += fmt::format(", {} tokens (TPM {})", f.window_tokens, *f.tpm);
    }
    if (f.max_concurrency) {
      ok = ok && f.peak_concurrency <= *f.max_concurrency;
      detail += fmt::format(", {} at once (MAX_CONCURRENCY {})",
                            f.peak_concurrency, *f.max_concurrency);
    }
    r.add(name, ok, detail);
  }
}

/// One `limits_reached.SOURCE` entry (`which`: rpm, tpm or concurrency).
void limit_reached(check_run& r, const std::string& src,
                   const limit_figures& f, const std::string& which) {
  auto name = "limits_reached." + src + "." + which;
  if (which == "rpm")
    r.add(name, f.rpm && f.window_requests == *f.rpm,
          fmt::format("{}: {} requests in the busiest minute (RPM {})", src,
                      f.window_requests,
                      f.rpm ? std::to_string(*f.rpm) : "unset"));
  else if (which == "tpm")
    // Reached: one more reservation of EST_TOKENS would not have fit.
    r.add(name, f.tpm && f.window_tokens + f.est_tokens > *f.tpm,
          fmt::format("{}: {} tokens in the busiest minute, one more "
                      "estimate of {} would exceed TPM {}",
                      src, f.window_tokens, f.est_tokens,
                      f.tpm ? std::to_string(*f.tpm) : "unset"));
  else
    r.add(name, f.max_concurrency && f.peak_concurrency == *f.max_concurrency,
          fmt::format("{}: {} requests at once (MAX_CONCURRENCY {})", src,
                      f.peak_concurrency,
                      f.max_concurrency ? std::to_string(*f.max_concurrency)
                                        : "unset"));
}

void limits_reached(check_run& r, const std::string&, const json::value& x) {
  for (auto& kv : x.as_object()) {
    std::string src(kv.key());
    auto it = std::find_if(r.limits.begin(), r.limits.end(),
                           [&](auto& f) { return f.source == src; });
    for (auto& lim : kv.value().as_array()) {
      auto which = std::string(lim.as_string());
      if (it == r.limits.end())
        r.add("limits_reached." + src + "." + which, false, "no source " + src);
      else
        limit_reached(r, src, *it, which);
    }
  }
}

void retry_after_honoured(check_run& r, const std::string&,
                          const json::value& x) {
  if (!x.as_bool())
    return;
  auto f = retry_after_check(r.ctx.file, r.ctx.log);
  r.add("retry_after_honoured", f.answers > 0 && f.violations == 0,
        fmt::format("{} upstream 429s with Retry-After; {} requests reached "
                    "the same source inside its Retry-After{}{}",
                    f.answers, f.violations, f.example.empty() ? "" : ": ",
                    f.example));
}

void sim_actions_min(check_run& r, const std::string&, const json::value& x) {
  auto& file = r.ctx.file;
  auto actions = actions_of(r.ctx.log);
  for (auto& kv : x.as_object()) {
    std::string a(kv.key());
    auto want = scaled_count(file, kv.value().to_number<double>(), true);
    auto got = actions.count(a) ? actions[a] : 0;
    r.add("sim_actions_min." + a, got >= want,
          fmt::format("the simulator answered {} requests with {} (want >= "
                      "{}{})",
                      got, a, want, scaled_note(file)));
  }
}

void upstream_requests_per_call_max(check_run& r, const std::string&,
                                    const json::value& x) {
  auto& ctx = r.ctx;
  auto want = x.to_number<double>();
  auto got = ctx.soak.calls
               ? static_cast<double>(ctx.log.size()) / ctx.soak.calls
               : 0.0;
  r.add("upstream_requests_per_call_max", got <= want,
        fmt::format("{} upstream requests for {} calls = {:.3f} per call "
                    "(want <= {})",
                    ctx.log.size(), ctx.soak.calls, got, want));
}

/// Every expectation with its check, in the order the verdicts are listed
/// (config/scenarios/README.md describes each).
const std::pair<const char*, check_fn> check_table[] = {
  {"success_rate_min", success_rate_min},
  {"p50_ms_max", latency_max},
  {"p95_ms_max", latency_max},
  {"p99_ms_max", latency_max},
  {"max_share", share},
  {"min_share", share},
  {"rate_limited_min", rate_limited_min},
  {"hedges_min", hedges},
  {"hedges_max", hedges},
  {"breakers", breakers},
  {"success_rate_until", success_rate_until},
  {"share_after", share_after},
  {"schema_valid_min", schema_valid_min},
  {"reask_rate_min", reask_rate},
  {"reask_rate_max", reask_rate},
  {"complete_answers", complete_answers},
  {"embeddings_in_order", embeddings_in_order},
  {"limits_respected", limits_respected},
  {"limits_reached", limits_reached},
  {"retry_after_honoured", retry_after_honoured},
  {"sim_actions_min", sim_actions_min},
  {"upstream_requests_per_call_max", upstream_requests_per_call_max},
};

} // namespace

std::vector<check> evaluate(const check_context& ctx) {
  std::vector<check> out;
  auto& soak = ctx.soak;
  int64_t total = 0;
  auto by_source = attempts_by_source(soak.status, total);
  check_run run{ctx,
                out,
                soak.calls ? static_cast<double>(soak.ok) / soak.calls : 0.0,
                soak.calls ? static_cast<double>(ctx.reasks) / soak.calls
                           : 0.0,
                total,
                std::move(by_source),
                limits_from_log(ctx.scope, ctx.log)};
  for (auto& [key, fn] : check_table)
    if (auto* x = ctx.file.expect.if_contains(key))
      fn(run, key, *x);
  return out;
}

bool print_checks(const scenario_file& f, const check_context& ctx,
                  const std::vector<check>& checks) {
  auto& soak = ctx.soak;
  auto actions = actions_of(ctx.log);
  std::string by_action;
  for (auto& [a, n] : actions)
    by_action += fmt::format("{}{}={}", by_action.empty() ? "" : ", ", a, n);
  std::printf("\nscenario %s: the simulator saw %zu requests (%.3f per "
              "call): %s\n",
              f.name.c_str(), ctx.log.size(),
              soak.calls ? static_cast<double>(ctx.log.size()) / soak.calls
                         : 0.0,
              by_action.c_str());
  if (!ctx.fleet)
    std::printf("  latency p50 %.1f ms, p95 %.1f ms, p98 %.1f ms, p99 %.1f "
                "ms, p99.9 %.1f ms\n",
                soak.p50, soak.p95, soak.p98, soak.p99, soak.p999);
  bool any_limit = false;
  for (auto& l : limits_from_log(ctx.scope, ctx.log)) {
    if (!l.rpm && !l.tpm && !l.max_concurrency)
      continue;
    if (!any_limit)
      std::printf("  what the simulator saw per limited source (busiest "
                  "59.5 s window of arrivals):\n");
    any_limit = true;
    std::printf("    %-10s %4lld requests (RPM %s), %6lld tokens (TPM %s), "
                "%lld at once (MAX_CONCURRENCY %s)\n",
                l.source.c_str(), static_cast<long long>(l.window_requests),
                l.rpm ? std::to_string(*l.rpm).c_str() : "-",
                static_cast<long long>(l.window_tokens),
                l.tpm ? std::to_string(*l.tpm).c_str() : "-",
                static_cast<long long>(l.peak_concurrency),
                l.max_concurrency ? std::to_string(*l.max_concurrency).c_str()
                                  : "-");
  }
  if (!f.schema.empty())
    std::printf("  structured output: %lld of %lld calls schema-valid; re-asks "
                "%lld (%.3f per call, %lld calls re-asked), %lld answers "
                "repaired\n",
                static_cast<long long>(ctx.schema_valid),
                static_cast<long long>(soak.calls),
                static_cast<long long>(ctx.reasks),
                soak.calls ? static_cast<double>(ctx.reasks) / soak.calls : 0.0,
                static_cast<long long>(ctx.reasked_calls),
                static_cast<long long>(ctx.repaired));
  size_t failed = 0;
  std::string names;
  std::printf("  expectations:\n");
  for (auto& c : checks) {
    std::printf("    %-7s %-36s %s\n", c.ok ? "ok" : "FAILED", c.name.c_str(),
                c.detail.c_str());
    if (!c.ok) {
      ++failed;
      names += (names.empty() ? "" : ", ") + c.name;
    }
  }
  bool invariants = true;
  for (auto& [name, holds] : soak.invariants)
    if (holds != true) {
      invariants = false;
      ++failed;
      names += (names.empty() ? "invariant " : ", invariant ") + name;
    }
  if (failed == 0)
    std::printf("scenario %s: PASSED (%zu expectations%s)\n", f.name.c_str(),
                checks.size(), invariants ? " and every invariant" : "");
  else
    std::printf("scenario %s: FAILED: %s\n", f.name.c_str(), names.c_str());
  std::fflush(stdout);
  return failed == 0;
}

json::object checks_json(const scenario_file& f, const check_context& ctx,
                         const std::vector<check>& checks, bool passed) {
  json::array arr;
  for (auto& c : checks)
    arr.push_back(json::object{{"name", c.name},
                               {"ok", c.ok},
                               {"detail", c.detail}});
  json::object limits;
  for (auto& l : limits_from_log(ctx.scope, ctx.log))
    limits[l.source] = json::object{
      {"model", l.model},
      {"requests", l.requests},
      {"window_requests", l.window_requests},
      {"window_tokens", l.window_tokens},
      {"peak_concurrency", l.peak_concurrency},
    };
  json::object calls_by_source;
  for (auto& src : ctx.scope.sources) // every source, also one never answering
    calls_by_source[src.name] = int64_t{0};
  for (auto& [source, n] : ctx.soak.ok_by_source)
    calls_by_source[source] = n;
  json::object structured;
  if (!f.schema.empty())
    structured = json::object{{"schema_valid", ctx.schema_valid},
                              {"reasks", ctx.reasks},
                              {"reasked_calls", ctx.reasked_calls},
                              {"repaired", ctx.repaired}};
  return json::object{
    {"name", f.name},
    {"path", f.path},
    {"passed", passed},
    {"structured", std::move(structured)},
    {"upstream_requests", static_cast<int64_t>(ctx.log.size())},
    {"answers_checked", ctx.answers_checked},
    {"answers_truncated", ctx.answers_truncated},
    {"answers_by_source", std::move(calls_by_source)},
    {"sim_by_source", std::move(limits)},
    {"checks", std::move(arr)},
  };
}

} // namespace pgw::cli
