// An ocr_monkey source (MAX_CONCURRENCY=1 by default) under 20 parallel
// calls through one gateway, against a real simulator process: the
// simulator never holds two requests at once.

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

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

using namespace pgw;
using namespace pgw::test;
namespace json = boost::json;

namespace {

struct ocr_config : caf::actor_system_config {
  ocr_config() {
    pgw::add_message_types(*this);
    set("scheduler.policy", caf::atom("sharing"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

} // namespace

TEST_CASE("ocr_monkey with concurrency 1 under 20 parallel calls: never two "
          "requests at once") {
  auto scenario = "/tmp/pgw-ocr-conc-" + std::to_string(::getpid()) + ".json";
  std::ofstream{scenario}
    << R"({"models": {"monkey": {"latency": {"dist": "fixed", "ms": 15}}}})";
  sim_process sim{{"--scenario", scenario}};
  std::remove(scenario.c_str());
  auto base = "http://127.0.0.1:" + std::to_string(sim.port()) + "/monkey";
  env_map env{{"OCR__GENERIC__M__BASE_URL", base},
              {"OCR__GENERIC__M__MODEL", "monkey"},
              {"OCR__GENERIC__M__KIND", "ocr_monkey"}};
  auto cfg = load_settings(env);
  REQUIRE(cfg);
  ocr_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "OCR");
  REQUIRE(gw);
  client cl{sys, *gw};
  std::vector<std::future<caf::expected<ocr_response>>> calls;
  for (int i = 0; i < 20; ++i) {
    ocr_request req;
    req.image = std::string("\x89PNG\r\n\x1a\n", 8) + std::to_string(i);
    calls.push_back(cl.ocr_async(std::move(req)));
  }
  int ok = 0;
  for (auto& c : calls) {
    auto res = c.get();
    if (res && res->text.find("Recognised text of image") == 0)
      ++ok;
  }
  CHECK(ok == 20);
  httplib::Client http{"127.0.0.1", sim.port()};
  auto log = http.Get("/_sim/log");
  REQUIRE(log);
  auto doc = json::parse(log->body);
  std::vector<std::pair<double, double>> spans;
  for (auto& e : doc.at("requests").as_array())
    spans.emplace_back(e.at("arrived_ms").to_number<double>(),
                       e.at("ended_ms").to_number<double>());
  REQUIRE(spans.size() == 20);
  std::sort(spans.begin(), spans.end());
  int overlaps = 0;
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      ++overlaps;
  CHECK(overlaps == 0);
  auto st = cl.status();
  REQUIRE(st);
  CHECK(st->sources[0].limiter.concurrency_limit == caf::optional<int64_t>{1});
  CHECK(st->sources[0].limiter.tpm_used == 0);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
}
