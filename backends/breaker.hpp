#pragma once

/// The breaker backend contract (SPEC §6). One instance per source; the
/// memory and Redis backends pass the same suite, tests/contracts/breaker.cpp.

#include "messages/governance.hpp"
#include "messages/outcome.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace pgw {

/// The settings of one source's breaker.
struct breaker_settings {
  std::string source;
  /// Consecutive channel threshold, already lifted: max(THRESHOLD, 2 ×
  /// MAX_CONCURRENCY) when the source sets MAX_CONCURRENCY
  /// (`effective_threshold`).
  int64_t threshold = 5;
  double cooldown_s = 30;
  int64_t min_calls = 10;
  double fail_rate = 0.6;
  double window_s = 60;
  double max_cooldown_s = 300;
  /// Lifetime of the half-open probe lease (the source's TIMEOUT_S): a probe
  /// that never reports cannot leave the breaker stuck half-open.
  double probe_lease_s = 120;
};

/// max(threshold, 2 × max_concurrency) when a concurrency is set.
int64_t effective_threshold(int64_t threshold,
                            std::optional<int64_t> max_concurrency);

/// What an attempt's outcome does to the breaker (SPEC §4, §6).
enum class breaker_feed {
  success,          ///< ok: success, counts an attempt
  success_no_count, ///< result_invalid: resets the consecutive count only
  failure,          ///< transient: a failure in both channels
  force_open,       ///< source_dead: open for max_cooldown_s
  none,             ///< rate_limited, rejections, cancelled, hedge losers
};

/// The feed for an outcome.
breaker_feed feed_for(outcome x);

/// Semantics every backend keeps:
/// - States closed → open(until) → half-open(one probe) → closed or open.
/// - `enter`: closed → allowed (current epoch, not a probe); open before
///   open_until → refused with retry_after_s = open_until − now; open at or
///   after open_until, or half-open whose probe lease expired → this caller
///   gets the probe lease (half-open, probe = true); half-open with a live
///   lease → refused, retry_after_s = lease expiry − now.
/// - `record(epoch, feed)`: ignored when `epoch` is older than the current
///   epoch. In half-open, the probe's success (success or
///   success_no_count) closes (failure count and window cleared) and its
///   failure re-opens with reopen_streak + 1.
///   Closed: failure → failure_count + 1 and a failure + attempt in the rate
///   window; success → failure_count = 0 and an attempt in the window;
///   success_no_count → failure_count = 0 only. Opens when failure_count ≥
///   threshold, or when the window (two buckets of window_s / 2) holds ≥
///   min_calls attempts with failures / attempts ≥ fail_rate (then
///   failure_count is shown at the threshold); both are checked when a
///   failure is recorded, so a success never opens. force_open opens at
///   once for max_cooldown_s. In half-open, `none` from the probe's epoch (a
///   probe that was rate limited or rejected) gives the probe lease back
///   like `release_probe`.
/// - Every open increments the epoch; open time = min(cooldown_s ×
///   2^reopen_streak, max_cooldown_s). The streak grows only when a probe
///   fails and decays by one for each cooldown_s spent closed (applied when
///   the circuit next opens).
/// - `release_probe(epoch)`: a probe that was cancelled or lost admission
///   gives the lease back at once: open with open_until = now, so the next
///   caller may probe (not an open: the epoch and `opens` stay). No-op
///   otherwise (closed, no probe, an older epoch).
/// - `status`: an open breaker at or after open_until shows "half_open"
///   with no probe in flight (the next caller probes), "open" only while
///   it refuses callers.
/// - `now_s` as for the limiter (Redis reads its own TIME).
class breaker_backend {
public:
  virtual ~breaker_backend();

  virtual caf::expected<breaker_entry> enter(double now_s) = 0;

  virtual caf::error record(uint64_t epoch, breaker_feed feed,
                            double now_s) = 0;

  virtual caf::error release_probe(uint64_t epoch, double now_s) = 0;

  virtual caf::expected<breaker_status> status(double now_s) = 0;
};

using breaker_backend_ptr = std::unique_ptr<breaker_backend>;

/// The in-process breaker (backends/memory/breaker.cpp).
breaker_backend_ptr make_memory_breaker(breaker_settings settings);

} // namespace pgw
