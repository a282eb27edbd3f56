#include "actors/breaker.hpp"

#include "actors/backend_call.hpp"

#include "config/support/log.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

namespace pgw {

using namespace detail;

namespace {

/// PGW_LOG=info: reads the breaker's state after a change and logs it when
/// it moved (closed -> open -> half_open -> ...).
void log_transition(breaker_actor::stateful_pointer<breaker_state> self) {
  if (log::current_level() > log::level::info)
    return;
  auto backend = self->state.backend;
  auto now = now_s(self);
  run(self, self->state.offload, [backend, now] { return backend->status(now); },
      [self](caf::expected<breaker_status> st) {
        if (!st || st->state == self->state.logged_state)
          return;
        log::info("breaker", "source {} {} -> {} (epoch {}, {} failures{})",
                  st->source, self->state.logged_state, st->state, st->epoch,
                  st->failure_count,
                  st->state == "open"
                    ? fmt::format(", open for {:.1f} s", st->open_for_s)
                    : std::string{});
        self->state.logged_state = st->state;
      });
}

} // namespace

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
      auto rp = answer<breaker_entry>(
        self, [backend, now] { return backend->enter(now); });
      log_transition(self);
      return rp;
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
      log_transition(self);
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
    [](atom::internal, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
