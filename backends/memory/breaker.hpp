#pragma once

/// The in-process breaker (SPEC §6): the state machine of one source,
/// driven by the caller's clock. Not thread-safe: one owner (the source's
/// breaker actor) calls it.

#include "backends/breaker.hpp"

#include <cstdint>
#include <optional>

namespace pgw {

/// Keeps every rule of `breaker_backend`, plus:
/// - Time never runs backwards: a `now_s` older than one already seen is
///   read as the newest seen.
/// - The rate window is two buckets of window_s / 2, bucket id =
///   floor(now / (window_s / 2)): the current bucket and the one before it.
///   A sample therefore counts for at least window_s / 2 and at most
///   window_s.
/// - While the circuit is not closed, a result carrying the current epoch
///   can only come from a probe: success and success_no_count close,
///   failure re-opens with reopen_streak + 1, force_open opens for
///   max_cooldown_s, none gives the lease back when half-open.
/// - force_open leaves reopen_streak as it is (the decay still applies when
///   it opens a closed circuit).
/// - release_probe and a probe's `none` do not know which probe calls: after
///   a lease expired and another caller took it (same epoch), a late release
///   from the first probe frees the second one's lease.
class memory_breaker final : public breaker_backend {
public:
  explicit memory_breaker(breaker_settings settings);

  caf::expected<breaker_entry> enter(double now_s) override;

  caf::error record(uint64_t epoch, breaker_feed feed, double now_s) override;

  caf::error release_probe(uint64_t epoch, double now_s) override;

  caf::expected<breaker_status> status(double now_s) override;

private:
  enum class state { closed, open, half_open };

  /// Moves the clock to `now_s` and rotates the rate buckets.
  void advance_to(double now_s);

  /// Opens for `seconds` from now: a new epoch, no probe.
  void open_for(double seconds);

  /// Opens for the cooldown of the (decayed) streak.
  void trip();

  /// Forced open for max_cooldown_s (source_dead).
  void force();

  /// A probe succeeded: closed with a clean count and window.
  void close();

  /// Gives the probe lease back: open with open_until = now.
  void give_back_probe();

  /// Applies the decay of reopen_streak for the time spent closed; a no-op
  /// unless the circuit is closed.
  void decay_streak();

  int64_t window_attempts() const noexcept {
    return attempts_[0] + attempts_[1];
  }

  int64_t window_failures() const noexcept {
    return failures_[0] + failures_[1];
  }

  breaker_settings settings_;
  double now_;
  state state_ = state::closed;
  uint64_t epoch_ = 0;
  int64_t failure_count_ = 0;
  int64_t reopen_streak_ = 0;
  double open_until_ = 0;
  double probe_until_ = 0;
  /// When the circuit last closed; unset while it is not closed and before
  /// it first closes (the streak is 0 until then).
  std::optional<double> closed_since_;
  // -- rate window: [0] = current bucket, [1] = the one before ----------------
  std::optional<int64_t> bucket_;
  int64_t attempts_[2] = {0, 0};
  int64_t failures_[2] = {0, 0};
  // -- counters ---------------------------------------------------------------
  uint64_t opens_ = 0;
  uint64_t probes_ = 0;
  uint64_t probe_failures_ = 0;
};

} // namespace pgw
