// Fleet single-flight of the response cache (issue 14): two gateways, each
// in an actor system of its own (as two processes are), share one real
// Redis cache with {S}__CACHE__FLEET_SINGLE_FLIGHT. Identical concurrent
// misses across both make one upstream request; when the lease holder
// fails, the other gateway's calls are still answered.

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "config/loader.hpp"
#include "fixtures/real_time_config.hpp"
#include "fixtures/redis_process.hpp"
#include "fixtures/sim_process.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include <unistd.h>

using namespace pgw;
using namespace pgw::test;

namespace {

/// One gateway process: an actor system, its cache and its gateway.
struct node {
  real_time_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  cache_actor cache;
  gateway_actor gw;

  explicit node(const settings& cfg) {
    auto c = spawn_cache(sys, cfg);
    REQUIRE(c);
    cache = *c;
    node_options opts;
    opts.cache = cache;
    auto g = spawn_gateway(sys, cfg, "LLM", opts);
    REQUIRE(g);
    gw = *g;
  }

  ~node() {
    caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(cache, caf::exit_reason::user_shutdown);
  }

  std::future<caf::expected<chat_response>> chat(double deadline_s) {
    chat_request req;
    req.messages.push_back({"user", "one answer for the fleet", {}});
    req.deadline_s = deadline_s;
    return client{sys, gw}.chat_async(std::move(req));
  }

  cache_status status() {
    caf::scoped_actor self{sys};
    cache_status out;
    self->request(cache, std::chrono::seconds(5), atom::status_v)
      .receive([&](cache_status& st) { out = std::move(st); },
               [](caf::error&) { FAIL("no cache status"); });
    return out;
  }
};

struct fleet_fixture {
  // The "slow" model at 0.5 x: about 1.1 s per answer, so calls overlap.
  sim_process sim{{"--time-scale", "0.5"}};

  settings load(bool fleet) {
    static int n = 0;
    env_map env{
      {"LLM__GENERIC__A__BASE_URL", sim.base_url()},
      {"LLM__GENERIC__A__MODEL", "slow"},
      {"LLM__STREAM", "false"},
      {"LLM__CACHE__ENABLED", "true"},
      {"LLM__CACHE__FLEET_SINGLE_FLIGHT", fleet ? "true" : "false"},
      {"PGW_CACHE_BACKEND", "redis"},
      {"REDIS_URL", shared_redis().url()},
      {"PGW_CACHE_NAMESPACE", "cache-fleet-" + std::to_string(::getpid())
                                + "-" + std::to_string(++n)},
      {"PGW_TELEMETRY_DB", "off"},
    };
    auto cfg = load_settings(env);
    REQUIRE(cfg);
    return *cfg;
  }

  size_t sim_requests() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    return boost::json::parse(res->body).at("requests").as_array().size();
  }

  /// 8 identical calls at once, 4 through each of two nodes: all answered
  /// alike, `hits` of them hits, `requests` upstream requests. Returns the
  /// nodes' cache figures summed.
  cache_status burst_on_two(bool fleet, int hits, size_t requests) {
    auto cfg = load(fleet);
    node a{cfg};
    node b{cfg};
    CHECK(burst(a, b) == hits);
    CHECK(sim_requests() == requests);
    auto sa = a.status();
    auto sb = b.status();
    sa.fleet_leads += sb.fleet_leads;
    sa.fleet_waits += sb.fleet_waits;
    sa.fleet_hits += sb.fleet_hits;
    return sa;
  }

  int burst(node& a, node& b) {
    std::vector<std::future<caf::expected<chat_response>>> calls;
    for (int i = 0; i < 4; ++i) {
      calls.push_back(a.chat(30));
      calls.push_back(b.chat(30));
    }
    int hits = 0;
    std::string content;
    for (auto& f : calls) {
      auto r = f.get();
      REQUIRE_MESSAGE(r, describe(r.error()));
      hits += r->stats.cache_hit ? 1 : 0;
      if (content.empty())
        content = r->content;
      CHECK(r->content == content);
    }
    return hits;
  }
};

} // namespace

TEST_CASE_FIXTURE(fleet_fixture, "cache fleet: identical concurrent misses on "
                                 "two gateways make one upstream request") {
  auto sum = burst_on_two(true, 7, 1);
  CHECK(sum.fleet_leads == 1);
  CHECK(sum.fleet_waits == 1);
  CHECK(sum.fleet_hits == 1);
}

TEST_CASE_FIXTURE(fleet_fixture, "cache fleet: without FLEET_SINGLE_FLIGHT "
                                 "each gateway calls upstream") {
  auto sum = burst_on_two(false, 6, 2);
  CHECK(sum.fleet_leads == 0);
}

TEST_CASE_FIXTURE(fleet_fixture, "cache fleet: when the lease holder's call "
                                 "fails, the other gateway's calls are "
                                 "answered") {
  auto cfg = load(true);
  node a{cfg};
  node b{cfg};
  // A leads with a deadline shorter than the answer takes.
  auto doomed = a.chat(0.5);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (a.status().fleet_leads == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(a.status().fleet_leads == 1);
  auto first = b.chat(30);
  auto second = b.chat(30);
  auto lost = doomed.get();
  REQUIRE_FALSE(lost);
  CHECK(code_of(lost.error()) == error_code::call_deadline_exceeded);
  auto r1 = first.get();
  auto r2 = second.get();
  REQUIRE_MESSAGE(r1, describe(r1.error()));
  REQUIRE_MESSAGE(r2, describe(r2.error()));
  CHECK(r1->content == r2->content);
  CHECK(r1->stats.cache_hit != r2->stats.cache_hit); // one led, one waited
  auto sb = b.status();
  CHECK(sb.fleet_waits == 1);
  CHECK(sb.fleet_takeovers == 1);
  CHECK(sim_requests() == 2);
}
