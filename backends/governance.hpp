#pragma once

/// The governance pair contract (issue 17): a source's breaker and limiter
/// kept in one store, so that the two steps of an admission (enter the
/// breaker, acquire a permit) are one call and the two ends of an attempt
/// (record the outcome; settle and release the permit) are one call.
/// Optional: a source without a pair (the memory backends, or a mixed
/// setup) runs its breaker and limiter backends separately. Each step keeps
/// the semantics of backends/breaker.hpp and backends/limiter.hpp.
/// The Redis pair is backends/redis/governance.hpp.

#include "backends/breaker.hpp"
#include "backends/limiter.hpp"

#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace pgw {

class governance_pair {
public:
  virtual ~governance_pair() = default;

  /// `enter`; when it lets the caller in, `try_acquire(est)`; when that is
  /// refused and the entry is the probe, `release_probe(epoch)`: one step.
  /// The acquire_result is empty (not granted, no reason) when the breaker
  /// refused.
  virtual caf::expected<std::pair<breaker_entry, acquire_result>>
  enter_and_acquire(int64_t est, double now_s) = 0;

  /// `record(epoch, feed)` and `settle_and_release(permit_id, actual)`: one
  /// step. Returns {settled, released}.
  virtual caf::expected<std::pair<bool, bool>>
  finish(uint64_t epoch, breaker_feed feed, const std::string& permit_id,
         int64_t actual, double now_s) = 0;

  using admission = std::pair<breaker_entry, acquire_result>;
  using admission_fn = std::function<void(caf::expected<admission>)>;
  using finish_fn = std::function<void(caf::expected<std::pair<bool, bool>>)>;

  /// True when the pair runs its steps on a thread of its own without
  /// blocking the caller (the `_async` forms; Redis, pipelined): the caller
  /// then needs no offload thread. The base class answers false and its
  /// `_async` forms run the blocking ones on the calling thread.
  virtual bool pipelined() const {
    return false;
  }

  /// `enter_and_acquire`, its result handed to `done` (on the pair's
  /// thread when `pipelined`). `done` must not block.
  virtual void enter_and_acquire_async(int64_t est, double now_s,
                                       admission_fn done) {
    done(enter_and_acquire(est, now_s));
  }

  /// `finish`, its result handed to `done` likewise.
  virtual void finish_async(uint64_t epoch, breaker_feed feed,
                            const std::string& permit_id, int64_t actual,
                            double now_s, finish_fn done) {
    done(finish(epoch, feed, permit_id, actual, now_s));
  }
};

using governance_pair_ptr = std::shared_ptr<governance_pair>;

} // namespace pgw
