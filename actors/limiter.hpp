#pragma once

/// The per-source `limiter` actor (SPEC §2, §5): a thin shell that
/// translates messages into calls on a limiter backend (backends/limiter.hpp),
/// with the actor clock as the backend's time.

#include "actors/interfaces.hpp"
#include "backends/limiter.hpp"
#include "transport/io_pool.hpp"

#include <caf/actor_clock.hpp>

#include <memory>
#include <optional>

namespace pgw {

struct limiter_state {
  static inline const char* name = "limiter";
  std::shared_ptr<limiter_backend> backend;
  /// Set for blocking (remote) backends: calls run on these threads.
  std::shared_ptr<io_pool> offload;
  std::optional<caf::actor_clock::time_point> last_warning;
  /// Settles and releases not done yet (in the backend or waiting to be
  /// tried again).
  int64_t pending = 0;
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
limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload = nullptr);

} // namespace pgw
