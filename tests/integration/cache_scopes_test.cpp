// The process cache of the node builder (spawn_cache) on Redis: each scope's
// entries get that scope's CACHE__TTL_S (unset: PGW_CACHE_TTL_S).

#include "apps/node/node_builder.hpp"
#include "backends/redis/client.hpp"
#include "config/loader.hpp"
#include "fixtures/real_time_config.hpp"
#include "fixtures/redis_process.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include <unistd.h>

using namespace pgw;
using namespace pgw::test;

TEST_CASE("cache: spawn_cache stores each scope's entries with its own TTL "
          "on Redis") {
  auto url = shared_redis().url();
  auto ns = "cache-scopes-" + std::to_string(::getpid());
  env_map env{
    {"SHORT__GENERIC__A__BASE_URL", "http://127.0.0.1:9/v1"},
    {"SHORT__GENERIC__A__MODEL", "m"},
    {"SHORT__CACHE__ENABLED", "true"},
    {"SHORT__CACHE__TTL_S", "5"},
    {"LONG__GENERIC__A__BASE_URL", "http://127.0.0.1:9/v1"},
    {"LONG__GENERIC__A__MODEL", "m"},
    {"LONG__CACHE__ENABLED", "true"},
    {"PGW_CACHE_BACKEND", "redis"},
    {"PGW_CACHE_TTL_S", "500"},
    {"REDIS_URL", url},
    {"PGW_CACHE_NAMESPACE", ns},
  };
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  real_time_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto cache = spawn_cache(sys, *cfg);
  REQUIRE(cache);
  REQUIRE(*cache);
  chat_response answer;
  answer.content = "the answer";
  answer.finish_reason = "stop";
  caf::anon_send(*cache, atom::cache_put_v, std::string{"k-short"},
                 uint64_t{0}, std::string{"on"}, std::string{"SHORT"}, answer);
  caf::anon_send(*cache, atom::cache_put_v, std::string{"k-long"}, uint64_t{0},
                 std::string{"on"}, std::string{"LONG"}, answer);
  auto client = make_redis_client(url, 1);
  REQUIRE(client);
  auto pttl = [&](const std::string& key) -> int64_t {
    auto r = (*client)->command({"PTTL", ns + ":cache:" + key});
    return r ? r->integer : -3;
  };
  // The writes run on the cache's I/O pool: poll until both landed.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((pttl("k-short") <= 0 || pttl("k-long") <= 0)
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto short_ms = pttl("k-short");
  auto long_ms = pttl("k-long");
  CHECK(short_ms > 0);
  CHECK(short_ms <= 5000);
  CHECK(long_ms > 5000);
  CHECK(long_ms <= 500000);
  caf::anon_send_exit(*cache, caf::exit_reason::user_shutdown);
}
