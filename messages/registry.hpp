#pragma once

/// Registers every pgw message type and the error category with an actor
/// system configuration. Call before constructing the `caf::actor_system`.

#include <caf/actor_system_config.hpp>

namespace pgw {

/// Adds the pgw type-ID block and the `pgw` error renderer to `cfg`.
void add_message_types(caf::actor_system_config& cfg);

} // namespace pgw
