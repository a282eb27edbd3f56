// The node builder (apps/node/): settings in, a running gateway out, with the
// pieces the settings and node_options name.

#include "apps/node/node_builder.hpp"
#include "actors/check_runner.hpp"
#include "actors/client.hpp"
#include "config/loader.hpp"
#include "messages/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <unistd.h>

using namespace pgw;

namespace {

struct node_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  node_fixture() {
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  settings load(env_map env) {
    env.emplace("LLM__GENERIC__A__BASE_URL", "http://127.0.0.1:9/v1");
    env.emplace("LLM__GENERIC__A__MODEL", "m");
    auto s = load_settings(env);
    REQUIRE(s);
    return std::move(*s);
  }

  /// The telemetry database path the gateway reports ("" = none).
  std::string telemetry_path(const settings& s, node_options opts) {
    auto gw = spawn_gateway(*sys, s, "LLM", opts);
    REQUIRE(gw);
    client cl{*sys, *gw};
    auto st = cl.status();
    caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
    REQUIRE(st);
    CHECK(st->scope == "LLM");
    return st->telemetry.path;
  }
};

} // namespace

TEST_CASE_FIXTURE(node_fixture, "node builder: an unknown scope is named, "
                                "with the scopes that are configured") {
  auto gw = spawn_gateway(*sys, load({}), "EMBED");
  REQUIRE_FALSE(gw);
  CHECK(code_of(gw.error()) == error_code::invalid_config);
  auto text = describe(gw.error());
  CHECK(text.find("scope EMBED has no sources") != std::string::npos);
  CHECK(text.find("configured: LLM") != std::string::npos);
}

TEST_CASE_FIXTURE(node_fixture, "node builder: telemetry goes where "
                                "PGW_TELEMETRY_DB, else the program's "
                                "default, says") {
  auto dir = std::string{"/tmp/pgw-node-builder-"} + std::to_string(getpid());
  auto fallback = dir + "-default.sqlite";
  auto named = dir + "-named.sqlite";
  node_options opts;
  CHECK(telemetry_path(load({}), opts).empty());
  opts.default_telemetry_db = fallback;
  CHECK(telemetry_path(load({}), opts) == fallback);
  CHECK(telemetry_path(load({{"PGW_TELEMETRY_DB", named}}), opts) == named);
  CHECK(telemetry_path(load({{"PGW_TELEMETRY_DB", "off"}}), opts).empty());
  for (auto& f : {fallback, named})
    for (auto suffix : {"", "-wal", "-shm"})
      std::remove((f + suffix).c_str());
}

TEST_CASE_FIXTURE(node_fixture, "node builder: the gateways of a process "
                                "check structured answers on one runner") {
  auto s = load({});
  auto runner = process_check_runner();
  auto alone = runner.use_count();
  auto a = spawn_gateway(*sys, s, "LLM");
  REQUIRE(a);
  CHECK(runner.use_count() >= alone + 1);
  auto b = spawn_gateway(*sys, s, "LLM");
  REQUIRE(b);
  // Each gateway holds it (its options, or its spawn arguments until it
  // starts); gateways with pools of their own would hold none.
  CHECK(runner.use_count() >= alone + 2);
  // A runner the node options name is used instead.
  auto own = make_pool_check_runner(2);
  node_options opts;
  opts.structured_checks = own;
  auto c = spawn_gateway(*sys, s, "LLM", opts);
  REQUIRE(c);
  CHECK(own.use_count() >= 3);
  for (auto& gw : {*a, *b, *c})
    caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
}
