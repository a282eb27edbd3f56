#include "apps/node/node_builder.hpp"

#include "actors/cache.hpp"
#include "actors/check_runner.hpp"
#include "actors/gateway.hpp"
#include "actors/telemetry.hpp"
#include "backends/redis/breaker.hpp"
#include "backends/redis/cache.hpp"
#include "backends/redis/client.hpp"
#include "backends/redis/governance.hpp"
#include "backends/redis/limiter.hpp"
#include "transport/beast_transport.hpp"
#include "transport/httplib_transport.hpp"

#include <caf/actor_system.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace pgw {

namespace {

/// The upstream transport PGW_TRANSPORT names (validated: beast or httplib).
transport_ptr make_transport(const global_config& g,
                             boost::asio::io_context* loop) {
  if (g.transport == transport_kind::httplib)
    return make_httplib_transport();
  beast_transport::options opts;
  opts.threads = static_cast<size_t>(g.transport_threads);
  opts.loop = loop;
  return std::make_shared<beast_transport>(opts);
}

/// Redis governance, when the settings ask for it: one client and one pool
/// of I/O threads shared by every source's limiter and breaker.
caf::error wire_redis_governance(const global_config& g, gateway_options& opts) {
  bool limiter = g.limiter_backend == state_backend::redis;
  bool breaker = g.breaker_backend == state_backend::redis;
  if (!limiter && !breaker)
    return {};
  auto client = make_redis_client(g.redis_url, 4);
  if (!client)
    return client.error();
  auto ns = g.cache_namespace;
  if (limiter)
    opts.make_limiter = [c = *client, ns](const scope_config& sc,
                                          const source_config& src) {
      return make_redis_limiter(c, ns + ":" + sc.name + ":" + src.name,
                                limits_of(src));
    };
  if (breaker)
    opts.make_breaker = [c = *client, ns](const scope_config& sc,
                                          const source_config& src) {
      return make_redis_breaker(c, ns + ":" + sc.name + ":" + src.name,
                                breaker_settings_of(sc, src));
    };
  if (limiter && breaker) {
    // Both in one Redis: two script calls per call, not four, pipelined
    // with every other call's on one thread (issue 17).
    auto pipeline = std::make_shared<redis_pipeline>(*client);
    opts.make_governance_pair = [c = *client, ns, pipeline](
                                  const scope_config& sc,
                                  const source_config& src) {
      return make_redis_governance_pair(c, ns + ":" + sc.name + ":" + src.name,
                                        limits_of(src),
                                        breaker_settings_of(sc, src),
                                        pipeline);
    };
  }
  opts.governance_pool = std::make_shared<io_pool>();
  return {};
}

} // namespace

caf::expected<cache_actor> spawn_cache(caf::actor_system& sys,
                                       const settings& cfg) {
  const auto& g = cfg.global;
  if (g.cache_backend == cache_store::none)
    return cache_actor{};
  // Wall time of stored answers: the actor clock plus its offset to the
  // system clock, read once here (actors read no wall clock).
  auto offset_s = wall_offset_ms(sys) / 1000.0;
  std::function<double()> wall = [&sys, offset_s] {
    using seconds = std::chrono::duration<double>;
    return seconds(sys.clock().now().time_since_epoch()).count() + offset_s;
  };
  if (g.cache_backend == cache_store::memory) {
    cache_backend_factory memory = [cfg](const std::string& scope) {
      return std::shared_ptr<cache_backend>(
        make_memory_cache(cache_limits_of(cfg, scope)));
    };
    return sys.spawn(scoped_cache, std::move(memory),
                     to_string(cache_store::memory), nullptr,
                     std::move(wall));
  }
  auto client = make_redis_client(g.redis_url, 4);
  if (!client)
    return client.error();
  // One client for every scope; each scope's backend sets its own TTL.
  cache_backend_factory redis = [cfg, c = *client](const std::string& scope) {
    return std::shared_ptr<cache_backend>(make_redis_cache(
      c, cfg.global.cache_namespace + ":cache", cache_limits_of(cfg, scope)));
  };
  return sys.spawn(scoped_cache, std::move(redis),
                   to_string(cache_store::redis),
                   std::make_shared<io_pool>(), std::move(wall));
}

caf::error check_scope(const settings& cfg, const std::string& scope_name) {
  auto scope = cfg.find(scope_name);
  if (scope == nullptr) {
    std::string known;
    for (auto& [name, sc] : cfg.scopes)
      known += (known.empty() ? "" : ", ") + name;
    return make_error(error_code::invalid_config,
                      "scope " + scope_name + " has no sources (set "
                        + scope_name
                        + "__{PROVIDER}__{NAME}__BASE_URL and __MODEL)"
                        + (known.empty() ? "" : "; configured: " + known));
  }
  if (scope->sources.empty())
    return make_error(error_code::invalid_config,
                      "scope " + scope_name + " has no sources");
  return {};
}

caf::expected<gateway_actor> spawn_gateway(caf::actor_system& sys,
                                           const settings& cfg,
                                           const std::string& scope_name,
                                           const node_options& node) {
  if (auto err = check_scope(cfg, scope_name))
    return err;
  auto scope = cfg.find(scope_name);
  gateway_options opts;
  opts.seed = node.seed;
  auto prices = price_table::load(cfg.global.pricing_path);
  if (!prices)
    return prices.error();
  opts.prices = std::make_shared<const price_table>(std::move(*prices));
  opts.telemetry_content = cfg.global.telemetry_content;
  opts.check_runner = node.structured_checks ? node.structured_checks
                                             : process_check_runner();
  if (auto err = wire_redis_governance(cfg.global, opts))
    return err;
  opts.cache = node.cache;
  if (!opts.cache) {
    auto cache = spawn_cache(sys, cfg);
    if (!cache)
      return cache.error();
    opts.cache = *cache;
  }
  opts.wall_offset_ms = wall_offset_ms(sys);
  auto db = cfg.global.telemetry_db ? *cfg.global.telemetry_db
                                    : node.default_telemetry_db;
  telemetry_sink_ptr sink;
  if (!db.empty() && db != "off") {
    sink = make_sqlite_sink(db);
    opts.telemetry = spawn_telemetry(sys, sink);
    opts.own_telemetry = true;
  }
  if (node.telemetry_sink_out)
    *node.telemetry_sink_out = sink;
  return spawn_gateway(sys, std::make_shared<const scope_config>(*scope),
                       make_transport(cfg.global, node.transport_loop),
                       std::move(opts));
}

} // namespace pgw
