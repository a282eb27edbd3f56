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
};

/// Serves `acquire`, `settle`, `release` and `status` from `backend`. A
/// backend error answers `acquire`/`status` with `governance_unavailable`.
/// With `offload`, every backend call runs on its threads (never on CAF's);
/// a settle or release that fails (Redis down) is retried with backoff until
/// it goes through, so admitted calls settle once the backend is back.
limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload = nullptr);

} // namespace pgw
