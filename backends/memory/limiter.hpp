#pragma once

/// The in-process limiter (SPEC §5): sliding RPM/TPM windows and in-flight
/// leases of one source, driven by the caller's clock. Not thread-safe: one
/// owner (the source's limiter actor) calls it.

#include "backends/limiter.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace pgw {

/// Keeps every rule of `limiter_backend`, plus:
/// - Time never runs backwards: a `now_s` older than one already seen is
///   read as the newest seen.
/// - Permit ids are "<source>-<instance>-<n>": `instance` numbers the memory
///   limiters of this process, so a permit of a replaced limiter (an actor
///   restart) can never settle or release a permit of its successor.
/// - A negative `est` or `actual` counts as 0.
/// - `settle` with an `actual` larger than the estimate is accepted: the
///   window then holds more than TPM and later acquisitions are refused
///   (`tpm`) until enough of it ages out. Refusing the settle would only
///   hide tokens the upstream really spent.
/// - A settle after the permit's entry aged out of the window counts as the
///   settle (true, `settled` + 1) and changes no window.
/// - Memory stays bounded: a permit's record is dropped once its lease has
///   ended (released or expired) and it is settled or its entry aged out;
///   an unsettled permit with an ended lease keeps its record only while its
///   window entry lives. Settling a forgotten permit returns false (there is
///   nothing left to change).
class memory_limiter final : public limiter_backend {
public:
  explicit memory_limiter(limiter_limits limits);

  caf::expected<acquire_result> try_acquire(int64_t est,
                                            double now_s) override;

  caf::expected<bool> settle(const std::string& permit_id, int64_t actual,
                             double now_s) override;

  caf::expected<bool> release(const std::string& permit_id,
                              double now_s) override;

  caf::expected<limiter_status> status(double now_s) override;

  /// Permits whose settle/release state is still kept (as of the last call).
  size_t tracked_permits() const noexcept {
    return permits_.size();
  }

  /// Acquisitions still in the sliding window (as of the last call).
  size_t window_entries() const noexcept {
    return window_.size();
  }

private:
  /// One acquisition in the sliding window.
  struct entry {
    uint64_t n;     ///< permit number
    double at;      ///< acquisition time
    int64_t tokens; ///< the estimate, or the settled amount
  };

  /// The state of a permit that is not forgotten yet.
  struct record {
    double lease_until;
    bool lease_live = true;
    bool settled = false;
  };

  /// Moves the clock to `now_s`: expires leases, prunes the window.
  void advance_to(double now_s);

  /// Whether permit `n`'s entry is still in the window.
  bool in_window(uint64_t n) const noexcept;

  /// The permit number of an id issued by this limiter.
  std::optional<uint64_t> parse_id(const std::string& id) const;

  /// Drops the record of permit `n` when nothing can change it any more.
  void forget_if_done(uint64_t n);

  acquire_result refuse(const char* reason, double retry_after_s);

  limiter_limits limits_;
  std::string id_prefix_; ///< "<source>-<instance>-"
  uint64_t next_n_ = 1;
  double now_;
  /// Entries by acquisition, oldest first; their numbers are consecutive.
  std::deque<entry> window_;
  int64_t window_tokens_ = 0;
  std::unordered_map<uint64_t, record> permits_;
  /// Live leases as (expiry, permit number), earliest first.
  std::set<std::pair<double, uint64_t>> leases_;
  // -- counters ---------------------------------------------------------------
  uint64_t acquired_ = 0;
  uint64_t settled_ = 0;
  uint64_t released_ = 0;
  uint64_t refused_rpm_ = 0;
  uint64_t refused_tpm_ = 0;
  uint64_t refused_concurrency_ = 0;
  uint64_t leases_expired_ = 0;
};

} // namespace pgw
