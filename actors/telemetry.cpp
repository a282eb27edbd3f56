#include "actors/telemetry.hpp"

#include <caf/actor_system.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace pgw {

telemetry_actor::behavior_type
telemetry(telemetry_actor::stateful_pointer<telemetry_state> self,
          telemetry_sink_ptr sink) {
  self->state.sink = std::move(sink);
  return {
    [self](atom::record, attempt_row& row) {
      self->state.sink->write(std::move(row));
    },
    [self](atom::record, call_row& row) {
      self->state.sink->write(std::move(row));
    },
    [self](atom::record, terminal_failure_row& row) {
      self->state.sink->write(std::move(row));
    },
    [self](atom::status) { return self->state.sink->status(); },
  };
}

telemetry_actor spawn_telemetry(caf::actor_system& sys,
                                telemetry_sink_ptr sink) {
  return sys.spawn(telemetry, std::move(sink));
}

} // namespace pgw
