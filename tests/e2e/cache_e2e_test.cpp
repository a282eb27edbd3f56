// The response cache as a user runs it (issue 14): `pgw-actor chat`
// processes sharing a Redis cache, against the simulator.

#include "backends/sqlite/db.hpp"
#include "fixtures/process.hpp"
#include "fixtures/redis_process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <cstdio>

#include <unistd.h>

using namespace pgw::test;
namespace json = boost::json;

namespace {

struct cache_e2e {
  sim_process sim{{"--seed", "11"}};

  std::vector<std::string> env(const std::string& model,
                               const std::string& ns) {
    return {"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
            "LLM__GENERIC__A__MODEL=" + model,
            "PGW_CACHE_BACKEND=redis",
            "LLM__CACHE__ENABLED=true",
            "REDIS_URL=" + shared_redis().url(),
            "PGW_CACHE_NAMESPACE=" + ns};
  }

  run_result chat(std::vector<std::string> args,
                  const std::vector<std::string>& e) {
    args.insert(args.begin(), {PGW_ACTOR_BIN, "chat"});
    return run_program(args, e, "");
  }

  size_t sim_requests() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    return json::parse(res->body).at("requests").as_array().size();
  }
};

std::string fresh_ns() {
  static int n = 0;
  return "pgw-e2e-cache-" + std::to_string(::getpid()) + "-"
         + std::to_string(++n);
}

} // namespace

TEST_CASE_FIXTURE(cache_e2e, "cache: a second chat process hits the shared "
                             "Redis cache, the simulator saw one request") {
  auto e = env("ok", fresh_ns());
  auto db = "/tmp/pgw-cache-e2e-" + std::to_string(::getpid()) + ".sqlite";
  std::remove(db.c_str());
  e.push_back("PGW_TELEMETRY_DB=" + db);
  auto first = chat({"--json", "what is the cache?"}, e);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  auto a = json::parse(first.out).as_object();
  CHECK_FALSE(a.at("call_stats").at("cache_hit").as_bool());
  CHECK(a.at("call_stats").at("attempts").as_int64() == 1);
  auto second = chat({"--json", "what is the cache?"}, e);
  INFO(second.err);
  REQUIRE(second.exit_code == 0);
  auto b = json::parse(second.out).as_object();
  CHECK(b.at("call_stats").at("cache_hit").as_bool());
  CHECK(b.at("call_stats").at("attempts").as_int64() == 0);
  CHECK(b.at("content") == a.at("content"));
  CHECK(b.at("usage").at("completion_tokens")
        == a.at("usage").at("completion_tokens"));
  CHECK(b.at("source") == a.at("source"));
  CHECK(sim_requests() == 1);
  {
    // Telemetry: the hit is a call row with cache_hit, no attempt, and the
    // cost-saved column (NULL here: the simulator's model has no price).
    auto conn = pgw::sqlite::connection::open(db, pgw::sqlite::open_mode::read_only);
    REQUIRE(conn);
    auto rows = conn->prepare("SELECT pgw_cache_hit, pgw_attempts, "
                              "pgw_cost_saved_usd FROM call ORDER BY "
                              "pgw_started_at_ms");
    REQUIRE(rows);
    REQUIRE(*rows->step());
    CHECK(rows->column_int64(0) == 0);
    CHECK(rows->column_int64(1) == 1);
    REQUIRE(*rows->step());
    CHECK(rows->column_int64(0) == 1);
    CHECK(rows->column_int64(1) == 0);
    CHECK_FALSE(*rows->step());
  }
  std::remove(db.c_str());
  // Another prompt, or `--temperature`, is another key.
  auto third = chat({"--json", "something else"}, e);
  REQUIRE(third.exit_code == 0);
  CHECK_FALSE(
    json::parse(third.out).at("call_stats").at("cache_hit").as_bool());
  CHECK(sim_requests() == 2);
}

TEST_CASE_FIXTURE(cache_e2e, "cache: a stream cut mid-answer is never cached") {
  auto e = env("cut", fresh_ns());
  auto first = chat({"--json", "--stream", "hi"}, e);
  CHECK(first.exit_code == 4);
  auto after_first = sim_requests();
  REQUIRE(after_first >= 1);
  auto second = chat({"--json", "--stream", "hi"}, e);
  CHECK(second.exit_code == 4);
  CHECK(sim_requests() == 2 * after_first);
}

TEST_CASE("cache: bench cache runs (tiny counts) and prints both goals") {
  auto r = run_program({PGW_ACTOR_BIN, "bench", "cache", "--calls", "20",
                        "--redis", shared_redis().url()},
                       {}, "");
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("gateway, memory cache, hit") != std::string::npos);
  CHECK(r.out.find("gateway, Redis cache, hit") != std::string::npos);
  CHECK(r.out.find("(goal <= 20 us)") != std::string::npos);
  CHECK(r.out.find("PING p50") != std::string::npos);
}
