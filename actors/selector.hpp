#pragma once

/// Candidate order for admission (SPEC §7): `health_aware`, `round_robin`
/// and `priority`. A plain class; the gateway owns one per scope.

#include "config/settings.hpp"
#include "messages/outcome.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace pgw {

class selector {
public:
  using kind = selector_policy;

  struct source_entry {
    std::string name;
    int64_t priority = 0;
  };

  static constexpr double alpha = 0.2;
  static constexpr double floor = 0.05;

  selector(kind k, std::vector<source_entry> sources);

  /// All source indices, best candidate first. `in_flight[i]` is source i's
  /// attempts in flight. `health_aware`: score = max(ewma, 0.05) / (1 +
  /// in-flight), head chosen by power of two choices (the better of two
  /// random sources, drawn with replacement), the rest by score; `round_robin`: rotates the
  /// start on every call; `priority`: by PRIORITY, then name.
  std::vector<size_t> order(const std::vector<int32_t>& in_flight,
                            std::mt19937_64& rng);

  /// Feeds the EWMA: ok → 1; transient, source_dead, rate_limited → 0;
  /// other outcomes are not fed.
  void feed(size_t source, outcome x);

  /// The EWMA of source `i` (starts at 1.0).
  double ewma(size_t i) const {
    return ewma_[i];
  }

  /// The health score of source `i` with `in_flight` attempts.
  double score(size_t i, int32_t in_flight) const;

  kind type() const {
    return kind_;
  }

private:
  kind kind_;
  std::vector<source_entry> sources_;
  std::vector<double> ewma_;
  std::vector<size_t> by_priority_;
  size_t next_ = 0;
};

/// Stable-moves to the tail the sources that failed ≥ 2 times in this call
/// or had one time-costly failure in it (`costly_in_call[i]`, SPEC §12).
void demote_failed(std::vector<size_t>& order,
                   const std::vector<int32_t>& failures_in_call,
                   const std::vector<bool>& costly_in_call = {});

/// True for a failure that cost at least the source's own bound: the attempt
/// (`total_timeout`), first-token (`ttft_timeout`), idle-stall
/// (`idle_timeout`) or connect (`connect_timeout`) timeout. One such failure
/// demotes its source for the rest of the call. A result whose `timed_out`
/// is set (a TLS handshake that ran out of CONNECT_TIMEOUT_S) is costly too,
/// whatever its reason.
bool is_costly_failure(const std::string& reason);

/// Exponential backoff with full jitter: uniform in [0, min(max_s, base_s ×
/// 2^(round - 1))] for `round` ≥ 1, driven by `u01` in [0, 1).
double backoff_delay(int64_t round, double base_s, double max_s, double u01);

} // namespace pgw
