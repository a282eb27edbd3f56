#pragma once

/// The `telemetry` actor (SPEC §2, §10): one per process; hands rows to a
/// sink that batches them into SQLite on its own thread. Never slows or
/// fails a call: a full queue or a broken database only drops rows.

#include "actors/interfaces.hpp"
#include "backends/telemetry.hpp"

#include <caf/fwd.hpp>

#include <memory>
#include <string>

namespace pgw {

struct telemetry_state {
  static inline const char* name = "telemetry";
  telemetry_sink_ptr sink;
};

telemetry_actor::behavior_type
telemetry(telemetry_actor::stateful_pointer<telemetry_state> self,
          telemetry_sink_ptr sink);

/// Spawns a telemetry actor writing into `sink`.
telemetry_actor spawn_telemetry(caf::actor_system& sys,
                                telemetry_sink_ptr sink);

} // namespace pgw
