#pragma once

/// The per-source `limiter` and `breaker` actors (SPEC §2): thin shells that
/// translate messages into calls on a backend (backends/limiter.hpp,
/// backends/breaker.hpp), with the actor clock as the backend's time.

#include "actors/interfaces.hpp"
#include "backends/breaker.hpp"
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

struct breaker_state {
  static inline const char* name = "breaker";
  std::shared_ptr<breaker_backend> backend;
  std::shared_ptr<io_pool> offload;
  std::optional<caf::actor_clock::time_point> last_warning;
  /// The state last logged (PGW_LOG=info logs each transition).
  std::string logged_state = "closed";
};

/// Serves `enter`, `record` (the outcome mapped by `feed_for`), `release`
/// (probe lease) and `status` from `backend`; `offload` as for the limiter
/// (a failed record or probe release is retried the same way).
breaker_actor::behavior_type
breaker(breaker_actor::stateful_pointer<breaker_state> self,
        std::shared_ptr<breaker_backend> backend,
        std::shared_ptr<io_pool> offload = nullptr);

} // namespace pgw
