#pragma once

/// `pgw-actor serve` metrics in the Prometheus text format. Labels are
/// bounded: scope and source (from the configuration), outcome / error code
/// (fixed sets), route (the fixed routes) — never a key, a call id or a
/// model string from a request.

#include "messages/chat.hpp"
#include "messages/gateway.hpp"

#include <caf/error.hpp>
#include <caf/optional.hpp>

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace pgw::serve {

/// A fixed-bucket histogram in seconds.
struct histogram {
  static constexpr std::array<double, 19> bounds{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    120};
  std::array<uint64_t, bounds.size()> counts{};
  uint64_t count = 0;
  double sum = 0;
  void observe(double seconds);
};

class metrics {
public:
  /// One finished chat call: `outcome` is "ok" or the pgw error code;
  /// `source` empty when no source answered.
  void record_call(const std::string& scope, const std::string& source,
                   const std::string& outcome, double total_s,
                   const chat_response* resp);

  /// One failed call, its error code as the outcome: a
  /// `stream_interrupted` one is its committed source's, with the tokens
  /// that source reported so far; the work its sources reported before it
  /// failed (`error_detail::spent`) counts against them.
  void record_failure(const std::string& scope, const caf::error& err,
                      double total_s);

  /// Upstream work of a finished call counted against `source` beyond what
  /// `record_call` counted (an embedding call's sources): its tokens,
  /// reported and estimated, and its cost when known.
  void record_usage(const std::string& scope, const std::string& source,
                    const spent_work& work);

  /// One HTTP request on `route` (a fixed route name or "other").
  void record_request(const std::string& route, int status);

  /// In-flight chat requests now.
  void set_in_flight(int64_t n);

  /// The exposition text: these counters plus each gateway's live state
  /// (attempts by outcome, in-flight, limiter usage, breaker state).
  std::string render(const std::vector<gateway_status>& gateways) const;

private:
  using call_key = std::tuple<std::string, std::string, std::string>;
  using source_key = std::pair<std::string, std::string>;
  /// Adds a call's tokens (negative counts as 0); `mu_` is held.
  void add_tokens(const source_key& key, int64_t prompt, int64_t completion);
  /// Adds each source's spent tokens (reported, and estimated) and cost;
  /// `mu_` is held.
  void add_spent(const std::string& scope, const spent_by_source& spent);
  /// Adds one source's work; `mu_` is held.
  void add_work(const source_key& key, const spent_work& work);

  mutable std::mutex mu_;
  std::map<call_key, uint64_t> calls_;
  std::map<std::string, uint64_t> hedges_;
  std::map<source_key, uint64_t> prompt_tokens_;
  std::map<source_key, uint64_t> completion_tokens_;
  std::map<source_key, uint64_t> estimated_tokens_;
  std::map<source_key, double> cost_;
  std::map<std::string, histogram> latency_;
  std::map<std::string, histogram> ttft_;
  std::map<std::string, histogram> overhead_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  int64_t in_flight_ = 0;
};

} // namespace pgw::serve
