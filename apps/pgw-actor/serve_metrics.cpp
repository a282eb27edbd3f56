#include "serve_metrics.hpp"
#include "serve_openai.hpp"

#include "messages/errors.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace pgw::serve {

namespace {

/// A label value escaped for the text format.
std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void head(std::string& out, const char* name, const char* type,
          const char* help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n",
                 name, help, name, type);
}

/// One sample of `name` per (scope, source) key of `values`; `extra` adds
/// labels after the source's (",kind=\"prompt\"").
template <class Map>
void render_by_source(std::string& out, const char* name, const Map& values,
                      const char* extra = "") {
  for (auto& [k, v] : values)
    fmt::format_to(std::back_inserter(out),
                   "{}{{scope=\"{}\",source=\"{}\"{}}} {}\n", name,
                   esc(k.first), esc(k.second), extra, v);
}

void render_histograms(std::string& out, const char* name, const char* help,
                       const std::map<std::string, histogram>& by_scope) {
  head(out, name, "histogram", help);
  for (auto& [scope, h] : by_scope) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      fmt::format_to(std::back_inserter(out),
                     "{}_bucket{{scope=\"{}\",le=\"{}\"}} {}\n", name,
                     esc(scope), h.bounds[i], cumulative);
    }
    fmt::format_to(std::back_inserter(out),
                   "{}_bucket{{scope=\"{}\",le=\"+Inf\"}} {}\n"
                   "{}_sum{{scope=\"{}\"}} {}\n{}_count{{scope=\"{}\"}} {}\n",
                   name, esc(scope), h.count, name, esc(scope), h.sum, name,
                   esc(scope), h.count);
  }
}

} // namespace

void histogram::observe(double seconds) {
  if (!(seconds >= 0))
    seconds = 0;
  auto i = std::lower_bound(bounds.begin(), bounds.end(), seconds)
           - bounds.begin();
  if (static_cast<size_t>(i) < bounds.size())
    ++counts[static_cast<size_t>(i)];
  ++count;
  sum += seconds;
}

void metrics::record_call(const std::string& scope, const std::string& source,
                          const std::string& outcome, double total_s,
                          const chat_response* resp) {
  std::lock_guard<std::mutex> guard(mu_);
  ++calls_[{scope, source.empty() ? "none" : source, outcome}];
  latency_[scope].observe(total_s);
  if (resp == nullptr)
    return;
  auto& st = resp->stats;
  hedges_[scope] += static_cast<uint64_t>(std::max(0, st.hedges));
  // Tokens and cost are upstream work: a cache hit replays a stored
  // answer's usage but did none.
  if (!st.cache_hit) {
    add_work({scope, source},
             spent_work{resp->usage.prompt_tokens, resp->usage.completion_tokens,
                        st.estimated_tokens, st.cost_usd});
    add_spent(scope, st.unreturned);
  }
  if (st.ttft_ms)
    ttft_[scope].observe(*st.ttft_ms / 1000.0);
  overhead_[scope].observe(std::max(0.0, total_s - st.generation_ms / 1000.0));
}

void metrics::record_failure(const std::string& scope, const caf::error& err,
                             double total_s) {
  auto* d = detail_of(err);
  auto source = d != nullptr ? d->stream_source : std::string{};
  record_call(scope, source, code_name(err), total_s, nullptr);
  if (d == nullptr)
    return;
  std::lock_guard<std::mutex> guard(mu_);
  if (!source.empty() && d->usage_reported)
    add_tokens({scope, source}, d->prompt_tokens, d->completion_tokens);
  add_spent(scope, d->spent);
}

void metrics::add_spent(const std::string& scope,
                        const spent_by_source& spent) {
  for (auto& [source, w] : spent)
    add_work({scope, source}, w);
}

void metrics::add_work(const source_key& key, const spent_work& work) {
  add_tokens(key, work.prompt_tokens, work.completion_tokens);
  if (work.estimated_tokens > 0)
    estimated_tokens_[key] += static_cast<uint64_t>(work.estimated_tokens);
  if (work.cost_usd)
    cost_[key] += *work.cost_usd;
}

void metrics::record_usage(const std::string& scope,
                           const std::string& source, const spent_work& work) {
  std::lock_guard<std::mutex> guard(mu_);
  add_work({scope, source}, work);
}

void metrics::add_tokens(const source_key& key, int64_t prompt,
                         int64_t completion) {
  prompt_tokens_[key] += static_cast<uint64_t>(std::max<int64_t>(0, prompt));
  completion_tokens_[key]
    += static_cast<uint64_t>(std::max<int64_t>(0, completion));
}

void metrics::record_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> guard(mu_);
  ++requests_[{route, status}];
}

void metrics::set_in_flight(int64_t n) {
  std::lock_guard<std::mutex> guard(mu_);
  in_flight_ = n;
}

std::string metrics::render(const std::vector<gateway_status>& gateways) const {
  std::string out;
  auto line = [&out](auto&&... xs) {
    fmt::format_to(std::back_inserter(out), std::forward<decltype(xs)>(xs)...);
  };
  std::lock_guard<std::mutex> guard(mu_);
  head(out, "pgw_http_requests_total", "counter",
       "HTTP requests answered by serve, by route and status.");
  for (auto& [k, n] : requests_)
    line("pgw_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n",
         esc(k.first), k.second, n);
  head(out, "pgw_serve_in_flight", "gauge", "Chat requests being served now.");
  line("pgw_serve_in_flight {}\n", in_flight_);
  head(out, "pgw_calls_total", "counter",
       "Chat calls by scope, answering source and outcome (ok or error code).");
  for (auto& [k, n] : calls_)
    line("pgw_calls_total{{scope=\"{}\",source=\"{}\",outcome=\"{}\"}} {}\n",
         esc(std::get<0>(k)), esc(std::get<1>(k)), esc(std::get<2>(k)), n);
  head(out, "pgw_hedges_total", "counter", "Hedge legs started, by scope.");
  for (auto& [scope, n] : hedges_)
    line("pgw_hedges_total{{scope=\"{}\"}} {}\n", esc(scope), n);
  head(out, "pgw_tokens_total", "counter",
       "Tokens the upstream reported for upstream work: answers returned, "
       "interrupted streams (so far), answers a call refused or lost, "
       "failed calls' answered parts; cache hits excluded; by scope, "
       "source and kind.");
  render_by_source(out, "pgw_tokens_total", prompt_tokens_,
                   ",kind=\"prompt\"");
  render_by_source(out, "pgw_tokens_total", completion_tokens_,
                   ",kind=\"completion\"");
  head(out, "pgw_tokens_estimated_total", "counter",
       "Tokens settled by estimate (the permit's EST_TOKENS) for upstream "
       "work of unknown size: chat attempts whose request reached the "
       "upstream and whose usage was never reported (answers without usage, "
       "legs stopped mid-answer such as hedge losers, cut streams, failures "
       "after the request was sent) and embedding sub-batches without "
       "usage (answered, or failed after their request was sent); cache "
       "hits excluded; by scope and source.");
  render_by_source(out, "pgw_tokens_estimated_total", estimated_tokens_);
  head(out, "pgw_cost_usd_total", "counter",
       "Cost in USD of successful calls, of the priced answers a call "
       "refused or lost, and of hedge losers stopped early (their estimate "
       "priced as completion tokens), cache hits excluded, by scope and "
       "source.");
  render_by_source(out, "pgw_cost_usd_total", cost_);
  render_histograms(out, "pgw_call_duration_seconds",
                    "Whole-call latency as seen by serve.", latency_);
  render_histograms(out, "pgw_call_ttft_seconds",
                    "Time to first token of the winning attempt.", ttft_);
  render_histograms(out, "pgw_gateway_overhead_seconds",
                    "Call latency minus the winning upstream call's time.",
                    overhead_);
  head(out, "pgw_attempts_total", "counter",
       "Upstream attempts that ended, by scope, source and outcome.");
  for (auto& g : gateways)
    for (auto& s : g.sources)
      for (auto& [outcome, n] : s.outcomes)
        line("pgw_attempts_total{{scope=\"{}\",source=\"{}\",outcome=\"{}\"}} "
             "{}\n",
             esc(g.scope), esc(s.name), esc(outcome), n);
  // Gauges with one sample per source of every scope.
  // A limiter's gauges leave out a source whose limiter could not be read
  // (Redis down: its breaker is `unknown` too) rather than show 0.
  auto per_source = [&](const char* name, const char* help, auto value,
                        bool of_limiter) {
    head(out, name, "gauge", help);
    for (auto& g : gateways)
      for (auto& s : g.sources)
        if (!of_limiter || s.limiter.unavailable.empty())
          line("{}{{scope=\"{}\",source=\"{}\"}} {}\n", name,
               esc(g.scope), esc(s.name), value(s));
  };
  per_source("pgw_source_in_flight", "Attempts running now, by scope and source.",
             [](const source_status& s) { return s.in_flight; }, false);
  per_source("pgw_limiter_rpm_used",
             "Requests in the limiter's current 60 s window, by scope and source.",
             [](const source_status& s) { return s.limiter.rpm_used; }, true);
  per_source("pgw_limiter_tpm_used",
             "Tokens in the limiter's current 60 s window, by scope and source.",
             [](const source_status& s) { return s.limiter.tpm_used; }, true);
  head(out, "pgw_breaker_state", "gauge",
       "1 for the breaker's current state, by scope, source and state.");
  for (auto& g : gateways)
    for (auto& s : g.sources)
      for (const char* state : {"closed", "open", "half_open", "unknown"})
        line("pgw_breaker_state{{scope=\"{}\",source=\"{}\",state=\"{}\"}} {}\n",
             esc(g.scope), esc(s.name), state,
             s.breaker.state == state ? 1 : 0);
  return out;
}

} // namespace pgw::serve
