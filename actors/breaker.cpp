#include "actors/breaker.hpp"

#include "actors/backend_call.hpp"

#include <caf/typed_event_based_actor.hpp>

namespace pgw {

using namespace detail;

breaker_actor::behavior_type
breaker(breaker_actor::stateful_pointer<breaker_state> self,
        std::shared_ptr<breaker_backend> backend,
        std::shared_ptr<io_pool> offload) {
  self->state.backend = std::move(backend);
  self->state.offload = std::move(offload);
  return {
    [self](atom::enter) -> caf::result<breaker_entry> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<breaker_entry>(
        self, [backend, now] { return backend->enter(now); });
    },
    [self](atom::record, uint64_t epoch, outcome kind) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "record",
        [backend, epoch, kind, now] {
          return backend->record(epoch, feed_for(kind), now);
        },
        [self, epoch, kind] {
          self->delayed_send(self, retry_delay, atom::record_v, epoch,
                             kind);
        });
    },
    [self](atom::release, uint64_t epoch) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "probe release",
        [backend, epoch, now] { return backend->release_probe(epoch, now); },
        [self, epoch] {
          self->delayed_send(self, retry_delay, atom::release_v, epoch);
        });
    },
    [self](atom::status) -> caf::result<breaker_status> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<breaker_status>(
        self, [backend, now] { return backend->status(now); });
    },
    [](atom::done, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
