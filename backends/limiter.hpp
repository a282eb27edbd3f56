#pragma once

/// The limiter backend contract (SPEC §5). One instance per source. The
/// memory backend keeps the windows in the process; the Redis backend
/// (backends/redis/limiter.hpp) keeps them in Redis so a fleet shares them.
/// Both pass the same suite, tests/contracts/limiter.cpp.

#include "messages/governance.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace pgw {

/// The limits of one source.
struct limiter_limits {
  std::string source;
  std::optional<int64_t> rpm;
  std::optional<int64_t> tpm;
  std::optional<int64_t> max_concurrency;
  /// Lifetime of an in-flight lease: the source's TIMEOUT_S plus a margin,
  /// so a holder that dies returns its slot.
  double lease_s = 130;
  /// Length of the sliding RPM/TPM windows (60 s; tests may shorten it).
  double window_s = 60;
  /// Retry hint for a `concurrency` refusal: a release may come at any
  /// moment, so callers look again after at most this long.
  double concurrency_retry_s = 0.1;
};

/// Semantics every backend keeps:
/// - `try_acquire(est)`: grants a permit when one more request fits RPM in
///   the last `window_s`, `est` more tokens fit TPM (estimates of unsettled
///   permits plus settled amounts, by acquisition time) and an in-flight
///   slot is free; otherwise refuses with the first failing reason in the
///   order rpm, tpm, concurrency and `retry_after_s`: rpm/tpm — when enough
///   entries age out of the window for this request to fit; concurrency —
///   min(earliest lease expiry, concurrency_retry_s). An `est` larger than
///   TPM can never fit: refused `tpm` with retry_after_s = window_s.
/// - `settle(id, actual)`: replaces the permit's reservation by `actual`
///   (0 refunds it), exactly once: returns true the first time, false for a
///   repeated or unknown id (no effect). An `actual` above the estimate is
///   accepted: the window may then hold more than TPM, and acquisitions are
///   refused until enough of it ages out. A settle after the permit's entry
///   aged out of the window counts (true) and changes no window. A permit
///   whose lease has ended and whose entry aged out may be forgotten: a
///   first settle then returns false (there is nothing left to change).
/// - `release(id)`: frees the in-flight slot, exactly once (true the first
///   time, false after, or for an expired lease / unknown id).
/// - Leases expire `lease_s` after acquisition; an expired lease frees its
///   slot and counts in `leases_expired`.
/// - `now_s` is the caller's clock in seconds (any fixed origin); the memory
///   backend uses it, the Redis backend ignores it and reads Redis TIME.
/// Errors (`governance_unavailable`) only come from remote backends.
class limiter_backend {
public:
  virtual ~limiter_backend();

  virtual caf::expected<acquire_result> try_acquire(int64_t est,
                                                    double now_s) = 0;

  virtual caf::expected<bool> settle(const std::string& permit_id,
                                     int64_t actual, double now_s) = 0;

  virtual caf::expected<bool> release(const std::string& permit_id,
                                      double now_s) = 0;

  virtual caf::expected<limiter_status> status(double now_s) = 0;

  /// `settle` then `release` (the usual end of an attempt); a remote backend
  /// does both in one round trip. Returns {settled, released}.
  virtual caf::expected<std::pair<bool, bool>>
  settle_and_release(const std::string& permit_id, int64_t actual,
                     double now_s);
};

using limiter_backend_ptr = std::unique_ptr<limiter_backend>;

/// A status naming the source and its limits, every counter zero: what every
/// backend's status starts from, and what a limiter that cannot be read
/// (Redis down) still shows.
limiter_status limiter_status_of(const limiter_limits& limits);

/// The in-process limiter (backends/memory/limiter.cpp).
limiter_backend_ptr make_memory_limiter(limiter_limits limits);

} // namespace pgw
