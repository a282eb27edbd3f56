#pragma once

/// A node's live status over CAF's network layer: `--publish HOST:PORT`
/// serves it, `pgw-actor status --connect HOST:PORT` prints it.

#include "actors/interfaces.hpp"

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <string>

namespace pgw::cli {

/// What a node publishes: the gateway's status, nothing else.
using node_status_actor = status_client_actor<gateway_status>;

/// "HOST:PORT" → host and port; PORT may be 0 (the kernel picks).
caf::expected<std::pair<std::string, uint16_t>>
parse_host_port(const std::string& text);

/// Publishes the status of `gw` on `host_port` with the middleman (the
/// system must have loaded it). Returns the bound port.
caf::expected<uint16_t> publish_status(caf::actor_system& sys, gateway_actor gw,
                                       const std::string& host_port);

/// Renders a gateway status as the text `pgw-actor status` prints.
std::string render_status(const gateway_status& st);

/// Renders it as JSON.
std::string render_status_json(const gateway_status& st);

} // namespace pgw::cli
