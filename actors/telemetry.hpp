#pragma once

/// The `telemetry` actor (SPEC §2, §10): one per process; hands rows to a
/// sink that batches them into SQLite on its own thread. Never slows or
/// fails a call: a full queue or a broken database only drops rows.

#include "backends/telemetry.hpp"
#include "messages/telemetry.hpp"
#include "messages/type_ids.hpp"

#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <memory>
#include <string>

namespace pgw {

using telemetry_actor = caf::typed_actor<
  caf::reacts_to<atom::record, attempt_row>,
  caf::reacts_to<atom::record, call_row>,
  caf::reacts_to<atom::record, terminal_failure_row>,
  caf::replies_to<atom::status>::with<telemetry_status>>;

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
