#include "actors/limiter.hpp"

#include "actors/backend_call.hpp"

#include <caf/typed_event_based_actor.hpp>

namespace pgw {

using namespace detail;

limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload) {
  self->state.backend = std::move(backend);
  self->state.offload = std::move(offload);
  return {
    [self](atom::acquire, int64_t est) -> caf::result<acquire_result> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<acquire_result>(
        self, [backend, est, now] { return backend->try_acquire(est, now); });
    },
    [self](atom::settle, const std::string& id, int64_t actual) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "settle of permit " + id,
        [backend, id, actual, now] { return backend->settle(id, actual, now); },
        [self, id, actual] {
          self->delayed_send(self, retry_delay, atom::settle_v, id, actual);
        });
    },
    [self](atom::release, const std::string& id) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "release of permit " + id,
        [backend, id, now] { return backend->release(id, now); },
        [self, id] {
          self->delayed_send(self, retry_delay, atom::release_v, id);
        });
    },
    [self](atom::settle, const std::string& id, int64_t actual, atom::release) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "settle and release of permit " + id,
        [backend, id, actual, now] {
          return backend->settle_and_release(id, actual, now);
        },
        [self, id, actual] {
          self->delayed_send(self, retry_delay, atom::settle_v, id, actual,
                             atom::release_v);
        });
    },
    [self](atom::status) -> caf::result<limiter_status> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<limiter_status>(
        self, [backend, now] { return backend->status(now); });
    },
    [](atom::done, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
