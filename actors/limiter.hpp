#pragma once

/// The per-source `limiter` actor (SPEC §2, §5): a thin shell that
/// translates messages into calls on a limiter backend (backends/limiter.hpp),
/// with the actor clock as the backend's time.

#include "actors/interfaces.hpp"
#include "backends/governance.hpp"
#include "backends/limiter.hpp"
#include "config/support/io_pool.hpp"

#include <caf/actor_clock.hpp>

#include <memory>
#include <optional>

namespace pgw {

struct limiter_state {
  static inline const char* name = "limiter";
  std::shared_ptr<limiter_backend> backend;
  /// Set for blocking (remote) backends: calls run on these threads.
  std::shared_ptr<io_pool> offload;
  /// The source's breaker and limiter in one store (Redis), or null: the
  /// limiter then makes the combined calls on the breaker's behalf.
  governance_pair_ptr pair;
  /// The source's breaker: where an attempt's outcome goes when there is
  /// no pair.
  breaker_actor breaker;
  std::optional<caf::actor_clock::time_point> last_warning;
  /// Settles and releases not done yet (in the backend or waiting to be
  /// tried again).
  int64_t pending = 0;
  /// This process's permits (limiter_status' own_* figures).
  uint64_t own_acquired = 0;
  uint64_t own_settled = 0;
  uint64_t own_released = 0;
  uint64_t own_expired = 0;
  /// Set once an exit came while changes were pending: the actor stays
  /// until they are done or `drain_until` passed, then quits with it.
  std::optional<caf::error> exit_reason;
  caf::actor_clock::time_point drain_until;
};

/// How long a limiter that is told to exit keeps trying pending settles and
/// releases (SPEC 12, item "Redis stall").
constexpr caf::timespan limiter_drain_limit = std::chrono::seconds(2);

/// Serves `acquire`, `settle`, `release` and `status` from `backend`. A
/// backend error answers `acquire`/`status` with `governance_unavailable`.
/// With `offload`, every backend call runs on its threads (never on CAF's);
/// a settle or release that fails (Redis down) is retried with backoff until
/// it goes through, so admitted calls settle once the backend is back. An
/// exit (its gateway stopping, the process ending) waits for pending
/// settles and releases for up to `limiter_drain_limit` (2 s), then drops
/// what is left with a warning.
///
/// The limiter is the front of its source's governance pair (issue 17):
/// the end of an attempt (settle, release, outcome) comes here; with a
/// `pair` it is one backend call, retried like a settle, and so is the
/// combined `acquire ... enter` of admission; without one the outcome goes
/// on to `breaker`. The breaker actor keeps serving `enter`, `release`
/// (probe lease) and `status`.
limiter_actor::behavior_type
governed_limiter(limiter_actor::stateful_pointer<limiter_state> self,
                 std::shared_ptr<limiter_backend> backend,
                 std::shared_ptr<io_pool> offload, governance_pair_ptr pair,
                 breaker_actor breaker);

/// A limiter on its own (no pair, no breaker: an attempt's outcome sent to
/// it goes nowhere), for tests and tools.
limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload = nullptr);

} // namespace pgw
