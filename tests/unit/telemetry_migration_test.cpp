// Schema versions: a database an older build created (version 1, made here
// by hand from tests/fixtures/telemetry/schema_v1.sql) is migrated when the
// current sink opens it; its rows stay.

#include "backends/sqlite/db.hpp"
#include "backends/sqlite/schema.hpp"
#include "backends/telemetry.hpp"
#include "config/support/log.hpp"

#include "fixtures/telemetry/fixture_db.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace pgw;
using namespace std::chrono_literals;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A version-1 database with one attempt and one call row in it.
void make_v1_database(const std::string& path) {
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_write);
  REQUIRE(db);
  auto sql = read_file(std::string{PGW_SOURCE_DIR}
                       + "/tests/fixtures/telemetry/schema_v1.sql");
  auto err = db->exec(sql);
  REQUIRE_MESSAGE(!err, "schema_v1.sql failed");
  err = db->exec(
    "INSERT INTO attempt (pgw_call_id, pgw_attempt, pgw_scope, pgw_source, "
    "gen_ai_request_model, pgw_started_at_ms, pgw_latency_ms, "
    "pgw_generation_ms, pgw_outcome, gen_ai_usage_input_tokens, "
    "gen_ai_usage_output_tokens, pgw_settled_tokens, pgw_is_hedge, "
    "pgw_is_probe) VALUES ('old', 1, 'LLM', 'a', 'm', 1, 10, 8, 'ok', 1, 2, "
    "3, 0, 0);"
    "INSERT INTO call (pgw_call_id, pgw_scope, pgw_started_at_ms, "
    "pgw_outcome, pgw_attempts, pgw_hedges, pgw_hedge_won, pgw_cache_hit, "
    "pgw_latency_ms, pgw_generation_ms, gen_ai_usage_input_tokens, "
    "gen_ai_usage_output_tokens, pgw_losers_cost_usd) VALUES ('old', 'LLM', "
    "1, 'ok', 1, 0, 0, 0, 12, 8, 1, 2, 0);");
  REQUIRE_MESSAGE(!err, "v1 rows failed");
}

std::vector<int64_t> versions(sqlite::connection& db) {
  std::vector<int64_t> result;
  auto stmt = db.prepare("SELECT version FROM schema_version ORDER BY 1");
  REQUIRE(stmt);
  while (*stmt->step())
    result.push_back(stmt->column_int64(0));
  return result;
}

} // namespace

TEST_CASE("migration: a version 1 database gains the version 2 columns and "
          "keeps its rows") {
  test::scratch_dir dir;
  auto path = dir.file("v1.sqlite");
  make_v1_database(path);
  {
    auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
    REQUIRE(db);
    CHECK(*sqlite::schema_version_of(*db) == 1);
    CHECK_FALSE(*db->has_column("attempt", "pgw_content"));
    CHECK_FALSE(*db->has_column("call", "pgw_prompt"));
  }
  {
    auto sink = make_sqlite_sink(path);
    attempt_row a;
    a.call_id = "new";
    a.attempt = 1;
    a.scope = "LLM";
    a.source = "a";
    a.outcome = "ok";
    a.content = "an answer";
    a.operation = "embeddings";
    sink->write(a);
    call_row c;
    c.call_id = "new";
    c.scope = "LLM";
    c.outcome = "ok";
    c.prompt = "a question";
    sink->write(c);
    REQUIRE(sink->flush(10s));
    CHECK(sink->status().written == 2);
    CHECK(sink->status().healthy);
  }
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  CHECK(versions(*db) == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(*db->has_column("attempt", "pgw_content"));
  CHECK(*db->has_column("call", "pgw_prompt"));
  CHECK(*db->has_column("call", "pgw_cost_saved_usd"));
  auto rows = db->prepare("SELECT pgw_call_id, pgw_content, "
                          "gen_ai_usage_output_tokens, pgw_operation "
                          "FROM attempt ORDER BY pgw_call_id");
  REQUIRE(rows);
  REQUIRE(*rows->step());
  CHECK(rows->column_text(0) == "new");
  CHECK(rows->column_text(1) == "an answer");
  CHECK(rows->column_text(3) == "embeddings");
  REQUIRE(*rows->step());
  CHECK(rows->column_text(0) == "old");
  CHECK(rows->is_null(1));
  CHECK(rows->column_int64(2) == 2);
  CHECK(rows->column_text(3) == "chat"); // rows from before version 4
  CHECK_FALSE(*rows->step());
  auto prompt = db->query_text("SELECT pgw_prompt FROM call "
                               "WHERE pgw_call_id = 'new'");
  REQUIRE(prompt);
  CHECK(*prompt == "a question");
}

TEST_CASE("migration: opening an up-to-date database applies nothing") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  for (int i = 0; i < 3; ++i) {
    auto sink = make_sqlite_sink(path);
    attempt_row a;
    a.call_id = "c" + std::to_string(i);
    a.outcome = "ok";
    sink->write(a);
    REQUIRE(sink->flush(10s));
  }
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  CHECK(versions(*db) == std::vector<int64_t>{1, 2, 3, 4});
  auto n = db->query_text("SELECT count(*) FROM attempt");
  REQUIRE(n);
  CHECK(*n == "3");
}

TEST_CASE("migration: migrate() on an empty file builds the current "
          "schema") {
  test::scratch_dir dir;
  auto db = sqlite::connection::open(dir.file("t.sqlite"),
                                     sqlite::open_mode::read_write);
  REQUIRE(db);
  CHECK(*sqlite::schema_version_of(*db) == 0);
  auto v = sqlite::migrate(*db);
  REQUIRE(v);
  CHECK(*v == sqlite::current_schema_version());
  auto again = sqlite::migrate(*db);
  REQUIRE(again);
  CHECK(*again == *v);
  CHECK(versions(*db).size() == sqlite::migrations().size());
}

TEST_CASE("migration: a database from a newer build is written with the "
          "columns this build knows") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto db = sqlite::connection::open(path, sqlite::open_mode::read_write);
    REQUIRE(db);
    REQUIRE(sqlite::migrate(*db));
    REQUIRE_FALSE(db->exec("ALTER TABLE attempt ADD COLUMN pgw_future TEXT;"
                           "INSERT INTO schema_version VALUES (99, 0, "
                           "'from the future')"));
  }
  auto before = log::current_level();
  log::set_level(log::level::off);
  {
    auto sink = make_sqlite_sink(path);
    attempt_row a;
    a.call_id = "c";
    a.outcome = "ok";
    sink->write(a);
    REQUIRE(sink->flush(10s));
    CHECK(sink->status().written == 1);
    CHECK(sink->status().healthy);
  }
  log::set_level(before);
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  CHECK(*sqlite::schema_version_of(*db) == 99);
}

TEST_CASE("migration: a foreign database with an attempt table is not "
          "merged into silently") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto db = sqlite::connection::open(path, sqlite::open_mode::read_write);
    REQUIRE(db);
    REQUIRE_FALSE(db->exec("CREATE TABLE attempt (x INTEGER)"));
  }
  auto before = log::current_level();
  log::set_level(log::level::off);
  {
    auto sink = make_sqlite_sink(path);
    attempt_row a;
    a.call_id = "c";
    a.outcome = "ok";
    sink->write(a);
    CHECK(sink->flush(10s));
    CHECK(sink->status().dropped == 1);
    CHECK_FALSE(sink->status().healthy);
  }
  log::set_level(before);
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  // The failed migration left nothing behind.
  CHECK_FALSE(*db->has_table("schema_version"));
}
