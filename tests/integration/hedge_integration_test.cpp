// Hedging against a real simulator process in real time: a hanging source
// and a healthy one.

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "config/loader.hpp"
#include "fixtures/sim_process.hpp"
#include "messages/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <chrono>
#include <thread>

using namespace pgw;
using namespace pgw::test;
namespace json = boost::json;

namespace {

struct config : caf::actor_system_config {
  config() {
    pgw::add_message_types(*this);
    set("scheduler.policy", caf::atom("sharing"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

json::array sim_log(const sim_process& sim) {
  httplib::Client cli{"127.0.0.1", sim.port()};
  auto res = cli.Get("/_sim/log");
  REQUIRE(res);
  return json::parse(res->body).at("requests").as_array();
}

} // namespace

TEST_CASE("hedge in real time: the hanging leg's connection closes right after the winner answers") {
  sim_process sim;
  env_map env{
    {"LLM__GENERIC__A__BASE_URL", sim.base_url()},
    {"LLM__GENERIC__A__MODEL", "hang"},
    {"LLM__GENERIC__A__TPM", "100000"},
    {"LLM__GENERIC__A__EST_TOKENS", "321"},
    {"LLM__GENERIC__B__BASE_URL", sim.base_url()},
    {"LLM__GENERIC__B__MODEL", "ok"},
    {"LLM__GENERIC__B__PRIORITY", "1"},
    {"LLM__SELECTOR", "priority"},
    {"LLM__HEDGE__AFTER_S", "0.15"},
    {"LLM__STREAM", "false"},
  };
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "LLM");
  REQUIRE(gw);
  client cl{sys, *gw};
  chat_request req;
  req.messages.push_back({"user", "hi", {}});
  auto t0 = std::chrono::steady_clock::now();
  auto res = cl.chat(req);
  auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                               - t0)
                   .count();
  REQUIRE(res);
  CHECK(res->source == "b");
  CHECK(res->stats.hedges == 1);
  CHECK(res->stats.hedge_won);
  CHECK(res->stats.attempts == 2);
  CHECK(elapsed < 1.0);
  CHECK(res->stats.generation_ms < res->stats.total_latency_ms);
  // A's permit was settled at its estimate, and nothing is in flight.
  auto st = cl.status();
  REQUIRE(st);
  for (auto& s : st->sources) {
    CAPTURE(s.name);
    CHECK(s.limiter.in_flight == 0);
    CHECK(s.limiter.settled == s.limiter.acquired);
    if (s.name == "a") {
      CHECK(s.limiter.tpm_used == 321);
      CHECK(s.outcomes.at("hedge_cancelled") == 1);
    }
  }
  // The simulator saw the hanging request's client leave within 50 ms of
  // the winner's answer.
  json::array log;
  for (int i = 0; i < 100; ++i) {
    log = sim_log(sim);
    bool all_ended = log.size() == 2;
    for (auto& e : log)
      all_ended = all_ended && !e.at("ended_ms").is_null();
    if (all_ended)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(log.size() == 2);
  auto& hung = log[0].as_object();
  auto& won = log[1].as_object();
  CHECK(hung.at("model").as_string() == "hang");
  CHECK(hung.at("client_closed").as_bool());
  auto gap = hung.at("ended_ms").to_number<double>()
             - won.at("ended_ms").to_number<double>();
  MESSAGE("loser's connection closed " << gap << " ms after the winner's answer");
  CHECK(gap < 50);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
}
