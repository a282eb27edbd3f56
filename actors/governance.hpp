#pragma once

/// The per-source `limiter` and `breaker` actors (SPEC §2): thin shells that
/// translate messages into calls on a backend (backends/limiter.hpp,
/// backends/breaker.hpp), with the actor clock as the backend's time.

#include "actors/interfaces.hpp"
#include "backends/breaker.hpp"
#include "backends/limiter.hpp"

#include <memory>

namespace pgw {

struct limiter_state {
  static inline const char* name = "limiter";
  std::shared_ptr<limiter_backend> backend;
};

/// Serves `acquire`, `settle`, `release` and `status` from `backend`. A
/// backend error answers `acquire`/`status` with `governance_unavailable`.
limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend);

struct breaker_state {
  static inline const char* name = "breaker";
  std::shared_ptr<breaker_backend> backend;
};

/// Serves `enter`, `record` (the outcome mapped by `feed_for`), `release`
/// (probe lease) and `status` from `backend`.
breaker_actor::behavior_type
breaker(breaker_actor::stateful_pointer<breaker_state> self,
        std::shared_ptr<breaker_backend> backend);

} // namespace pgw
