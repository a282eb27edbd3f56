#pragma once

/// The node builder: the one place that turns validated settings into a
/// running gateway (the composition root). It picks the concrete pieces the
/// actor layer only knows by interface — the cpp-httplib transport, memory
/// or Redis limiter and breaker backends and their I/O threads, the SQLite
/// telemetry sink, the price table — and spawns the gateway of one scope.
/// `pgw-actor` and embedding backends both build their gateways here.
/// Installed as <pgw/node_builder.hpp>.

#include "pgw/actors/interfaces.hpp"
#include "pgw/config/settings.hpp"

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
} // namespace boost::asio

namespace pgw {

class check_runner;
class telemetry_sink;

/// What a gateway needs beyond its settings.
struct node_options {
  /// Seeds the selector's randomness and each call's backoff jitter;
  /// 0 = from std::random_device.
  uint64_t seed = 0;
  /// The telemetry database when PGW_TELEMETRY_DB is unset ("" = none).
  /// Programs that keep a record by default pass ./pgw-telemetry.sqlite.
  std::string default_telemetry_db;
  /// The response cache to use (serve shares one between its scopes);
  /// invalid = one of the gateway's own from PGW_CACHE_BACKEND.
  cache_actor cache;
  /// The loop the Beast transport runs its calls on instead of threads of
  /// its own (serve: the CAF worker's); null = its own.
  boost::asio::io_context* transport_loop = nullptr;
  /// When not null, receives the telemetry sink made for the database (null
  /// when there is none): `soak` flushes it to report final row counts.
  std::shared_ptr<telemetry_sink>* telemetry_sink_out = nullptr;
  /// Where structured-output answers are checked (check_runner.hpp, not a
  /// public header: tests hold checks with it); null = the pool every
  /// gateway of the process shares (at most one thread per core).
  std::shared_ptr<check_runner> structured_checks;
};

/// The response cache the settings ask for (PGW_CACHE_BACKEND memory or
/// redis; per scope: entries for its CACHE__TTL_S, memory: a cache of its
/// own with its CACHE__MAX_ENTRIES / MAX_BYTES; Redis keys under
/// `<PGW_CACHE_NAMESPACE>:cache:`), or an invalid handle for `none`. Fails
/// only for a malformed REDIS_URL.
caf::expected<cache_actor> spawn_cache(caf::actor_system& sys,
                                       const settings& cfg);

/// `invalid_config` when the settings have no scope `scope_name` (the
/// message lists the configured ones) or it has no sources; no error
/// otherwise. `spawn_gateway` fails with the same.
caf::error check_scope(const settings& cfg, const std::string& scope_name);

/// Spawns the gateway of `scope_name` from validated settings: the
/// cpp-httplib transport; memory or Redis limiters and breakers as
/// LIMITER_BACKEND / BREAKER_BACKEND say (one Redis client and one I/O pool
/// for both); prices from PGW_PRICING_PATH; a telemetry actor of its own
/// (linked to the gateway) when PGW_TELEMETRY_DB or
/// `opts.default_telemetry_db` names a database. Errors: `invalid_config`
/// for an unknown or empty scope or a bad price table, the Redis client's
/// error when Redis cannot be reached. Stop the gateway with an exit
/// message (`caf::exit_reason::user_shutdown`).
caf::expected<gateway_actor> spawn_gateway(caf::actor_system& sys,
                                           const settings& cfg,
                                           const std::string& scope_name,
                                           const node_options& opts = {});

} // namespace pgw
