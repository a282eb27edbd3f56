#include "actors/governance.hpp"

#include "config/log.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <chrono>

namespace pgw {

namespace {

template <class Self>
double now_s(Self* self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch())
    .count();
}

/// Backend errors become `governance_unavailable` for the caller.
caf::error unavailable(const caf::error& err) {
  if (code_of(err))
    return err;
  return make_error(error_code::governance_unavailable,
                    "governance backend failed: " + to_string(err));
}

} // namespace

limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend) {
  self->state.backend = std::move(backend);
  return {
    [self](atom::acquire, int64_t est) -> caf::result<acquire_result> {
      auto res = self->state.backend->try_acquire(est, now_s(self));
      if (!res)
        return unavailable(res.error());
      return std::move(*res);
    },
    [self](atom::settle, const std::string& id, int64_t actual) {
      auto res = self->state.backend->settle(id, actual, now_s(self));
      if (!res)
        log::warn("limiter", "settle of permit {} failed: {}", id,
                  describe(res.error()));
    },
    [self](atom::release, const std::string& id) {
      auto res = self->state.backend->release(id, now_s(self));
      if (!res)
        log::warn("limiter", "release of permit {} failed: {}", id,
                  describe(res.error()));
    },
    [self](atom::status) -> caf::result<limiter_status> {
      auto res = self->state.backend->status(now_s(self));
      if (!res)
        return unavailable(res.error());
      return std::move(*res);
    },
  };
}

breaker_actor::behavior_type
breaker(breaker_actor::stateful_pointer<breaker_state> self,
        std::shared_ptr<breaker_backend> backend) {
  self->state.backend = std::move(backend);
  return {
    [self](atom::enter) -> caf::result<breaker_entry> {
      auto res = self->state.backend->enter(now_s(self));
      if (!res)
        return unavailable(res.error());
      return std::move(*res);
    },
    [self](atom::record, uint64_t epoch, outcome kind) {
      if (auto err = self->state.backend->record(epoch, feed_for(kind),
                                                 now_s(self)))
        log::warn("breaker", "record failed: {}", describe(err));
    },
    [self](atom::release, uint64_t epoch) {
      if (auto err = self->state.backend->release_probe(epoch, now_s(self)))
        log::warn("breaker", "probe release failed: {}", describe(err));
    },
    [self](atom::status) -> caf::result<breaker_status> {
      auto res = self->state.backend->status(now_s(self));
      if (!res)
        return unavailable(res.error());
      return std::move(*res);
    },
  };
}

} // namespace pgw
