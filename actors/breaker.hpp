#pragma once

/// The per-source `breaker` actor (SPEC §2, §6): a thin shell that
/// translates messages into calls on a breaker backend (backends/breaker.hpp),
/// with the actor clock as the backend's time. Its shape mirrors
/// actors/limiter.hpp on purpose: one actor per header, each over its own
/// backend contract; what they share at run time is actors/backend_call.hpp.

#include "actors/interfaces.hpp"
#include "backends/breaker.hpp"
#include "config/support/io_pool.hpp"

#include <caf/actor_clock.hpp>

#include <memory>
#include <optional>

namespace pgw {

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
