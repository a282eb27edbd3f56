// A node's live status over CAF's network layer: `demo --serve-status`
// publishes it, `pgw-actor status --connect` reads it from another process.

#include "fixtures/process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <csignal>

using namespace pgw::test;
namespace json = boost::json;

TEST_CASE("status --connect prints a remote node's per-source state") {
  child_process demo{{PGW_ACTOR_BIN, "demo", "--calls", "8", "--publish",
                      "127.0.0.1:0"}};
  std::string line;
  for (int i = 0; i < 100; ++i) {
    line = demo.read_line(std::chrono::seconds(30));
    if (line.rfind("status published on ", 0) == 0)
      break;
  }
  REQUIRE(line.rfind("status published on ", 0) == 0);
  auto where = line.substr(std::string{"status published on "}.size());
  where = where.substr(0, where.find(' '));
  auto text = run_program({PGW_ACTOR_BIN, "status", "--connect", where});
  INFO(text.err);
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("scope DEMO") != std::string::npos);
  for (auto name : {"healthy", "flaky", "slow", "recovering"})
    CHECK(text.out.find(name) != std::string::npos);
  CHECK(text.out.find("breaker") != std::string::npos);
  CHECK(text.out.find("calls started 8") != std::string::npos);
  auto js = run_program({PGW_ACTOR_BIN, "status", "--connect", where, "--json"});
  CHECK(js.exit_code == 0);
  auto doc = json::parse(js.out).as_object();
  CHECK(doc.at("calls_started").as_int64() == 8);
  CHECK(doc.at("sources").as_array().size() == 4);
  for (auto& s : doc.at("sources").as_array()) {
    auto& lim = s.at("limiter").as_object();
    CHECK(lim.at("acquired").as_int64() == lim.at("settled").as_int64());
  }
  demo.signal(SIGTERM);
  CHECK(demo.wait() == 0);
  // Nobody listening: a clear failure, not a hang.
  auto gone = run_program({PGW_ACTOR_BIN, "status", "--connect", where});
  CHECK(gone.exit_code == 1);
  CHECK(run_program({PGW_ACTOR_BIN, "status"}).exit_code == 2);
}

TEST_CASE("status --json: an unreachable node is an error object on stdout") {
  auto r = run_program({PGW_ACTOR_BIN, "status", "--connect", "127.0.0.1:1",
                        "--json"});
  CHECK(r.exit_code == 1);
  auto err = json::parse(r.out).at("error");
  CHECK(std::string(err.at("message").as_string())
          .rfind("cannot reach 127.0.0.1:1: ", 0)
        == 0);
  auto bad = run_program({PGW_ACTOR_BIN, "status", "--connect", "nowhere",
                          "--json"});
  CHECK(bad.exit_code == 2);
  CHECK(json::parse(bad.out).at("error").at("code").as_string()
        == "invalid_request");
}
