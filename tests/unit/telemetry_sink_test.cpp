// The SQLite telemetry sink: every field lands in its column, the schema,
// batching, the bounded queue, flush and shutdown.

#include "backends/sqlite/db.hpp"
#include "backends/sqlite/schema.hpp"
#include "backends/telemetry.hpp"
#include "config/support/log.hpp"

#include "fixtures/telemetry/fixture_db.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace pgw;
using namespace std::chrono_literals;

namespace {

sqlite::connection open_db(const std::string& path) {
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  return std::move(*db);
}

/// Runs `sql` (one row expected) and returns the statement on that row.
sqlite::statement one_row(sqlite::connection& db, const std::string& sql) {
  auto stmt = db.prepare(sql);
  REQUIRE(stmt);
  auto row = stmt->step();
  REQUIRE(row);
  REQUIRE(*row);
  return std::move(*stmt);
}

int64_t count(sqlite::connection& db, const std::string& table) {
  auto stmt = one_row(db, "SELECT count(*) FROM " + table);
  return stmt.column_int64(0);
}

/// The column index of `name` in `stmt`'s result.
int col(const sqlite::statement& stmt, const std::string& name) {
  for (int i = 0; i < stmt.column_count(); ++i)
    if (stmt.column_name(i) == name)
      return i;
  FAIL("no column " << name);
  return -1;
}

std::set<std::string> columns_of(sqlite::connection& db,
                                 const std::string& table) {
  std::set<std::string> names;
  auto stmt = db.prepare("SELECT name FROM pragma_table_info('" + table + "')");
  REQUIRE(stmt);
  while (*stmt->step())
    names.insert(stmt->column_text(0));
  return names;
}

attempt_row full_attempt() {
  attempt_row r;
  r.call_id = "call-1";
  r.attempt = 2;
  r.scope = "LLM";
  r.source = "a";
  r.request_model = "gpt-4o-mini";
  r.response_model = "gpt-4o-mini-2024-07-18";
  r.started_at_ms = 1764400000123.5;
  r.latency_ms = 812.25;
  r.ttft_ms = 140.5;
  r.generation_ms = 700.75;
  r.outcome = "result_invalid";
  r.reason = "schema_mismatch";
  r.http_status = 200;
  r.error_code = "invalid_json";
  r.error_message = "unexpected token";
  r.input_tokens = 321;
  r.output_tokens = 54;
  r.usage_source = "reported";
  r.settled_tokens = 375;
  r.cost_usd = 0.00012345;
  r.is_hedge = true;
  r.is_probe = true;
  r.content = "the answer";
  r.operation = "ocr_layout";
  return r;
}

call_row full_call() {
  call_row r;
  r.call_id = "call-1";
  r.scope = "LLM";
  r.started_at_ms = 1764400000000.25;
  r.outcome = "ok";
  r.attempts = 3;
  r.hedges = 1;
  r.hedge_won = true;
  r.cache_hit = true;
  r.latency_ms = 1500.5;
  r.generation_ms = 650.5;
  r.source = "b";
  r.model = "gpt-4o";
  r.input_tokens = 1000;
  r.output_tokens = 200;
  r.cost_usd = 0.0045;
  r.losers_cost_usd = 0.0025;
  r.prompt = "hello?";
  r.cost_saved_usd = 0.0125;
  return r;
}

terminal_failure_row full_failure() {
  terminal_failure_row r;
  r.call_id = "call-9";
  r.scope = "LLM";
  r.at_ms = 1764400009999.5;
  r.error_code = "request_rejected";
  r.message = "upstream rejected the request";
  r.retry_after_s = 2.5;
  r.upstream_status = 400;
  r.upstream_code = "content_policy_violation";
  r.per_source_json = R"({"a":"http_400"})";
  return r;
}

} // namespace

TEST_CASE("sink: every attempt field lands in its column") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    CHECK(sink->write(full_attempt()));
    REQUIRE(sink->flush(10s));
    CHECK(sink->status().written == 1);
  }
  auto db = open_db(path);
  auto s = one_row(db, "SELECT * FROM attempt");
  CHECK(s.column_text(col(s, "pgw_call_id")) == "call-1");
  CHECK(s.column_int64(col(s, "pgw_attempt")) == 2);
  CHECK(s.column_text(col(s, "pgw_scope")) == "LLM");
  CHECK(s.column_text(col(s, "pgw_source")) == "a");
  CHECK(s.column_text(col(s, "gen_ai_request_model")) == "gpt-4o-mini");
  CHECK(s.column_text(col(s, "gen_ai_response_model"))
        == "gpt-4o-mini-2024-07-18");
  CHECK(s.column_double(col(s, "pgw_started_at_ms")) == 1764400000123.5);
  CHECK(s.column_double(col(s, "pgw_latency_ms")) == 812.25);
  CHECK(s.column_double(col(s, "pgw_ttft_ms")) == 140.5);
  CHECK(s.column_double(col(s, "pgw_generation_ms")) == 700.75);
  CHECK(s.column_text(col(s, "pgw_outcome")) == "result_invalid");
  CHECK(s.column_text(col(s, "pgw_reason")) == "schema_mismatch");
  CHECK(s.column_int64(col(s, "http_response_status_code")) == 200);
  CHECK(s.column_text(col(s, "error_type")) == "invalid_json");
  CHECK(s.column_text(col(s, "pgw_error_message")) == "unexpected token");
  CHECK(s.column_int64(col(s, "gen_ai_usage_input_tokens")) == 321);
  CHECK(s.column_int64(col(s, "gen_ai_usage_output_tokens")) == 54);
  CHECK(s.column_text(col(s, "pgw_usage_source")) == "reported");
  CHECK(s.column_int64(col(s, "pgw_settled_tokens")) == 375);
  CHECK(s.column_double(col(s, "pgw_cost_usd")) == 0.00012345);
  CHECK(s.column_int64(col(s, "pgw_is_hedge")) == 1);
  CHECK(s.column_int64(col(s, "pgw_is_probe")) == 1);
  CHECK(s.column_text(col(s, "pgw_content")) == "the answer");
  CHECK(s.column_text(col(s, "pgw_operation")) == "ocr_layout");
  // 24 fields, 24 columns: nothing of the row is left out.
  CHECK(s.column_count() == 24);
}

TEST_CASE("sink: unset attempt fields are NULL, not zero or empty text") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    attempt_row r;
    r.call_id = "c";
    r.attempt = 1;
    r.scope = "LLM";
    r.source = "a";
    r.request_model = "m";
    r.outcome = "transient";
    sink->write(r);
    REQUIRE(sink->flush(10s));
  }
  auto db = open_db(path);
  auto s = one_row(db, "SELECT * FROM attempt");
  for (auto name :
       {"gen_ai_response_model", "pgw_ttft_ms", "pgw_reason",
        "http_response_status_code", "error_type", "pgw_error_message",
        "pgw_usage_source", "pgw_cost_usd", "pgw_content"}) {
    CAPTURE(name);
    CHECK(s.is_null(col(s, name)));
  }
  for (auto name : {"pgw_is_hedge", "pgw_is_probe", "pgw_settled_tokens",
                    "gen_ai_usage_input_tokens"}) {
    CAPTURE(name);
    CHECK_FALSE(s.is_null(col(s, name)));
    CHECK(s.column_int64(col(s, name)) == 0);
  }
  CHECK(s.column_text(col(s, "gen_ai_request_model")) == "m");
  CHECK(s.column_text(col(s, "pgw_operation")) == "chat"); // the default
}

TEST_CASE("sink: every call field lands in its column and unset ones are "
          "NULL") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    sink->write(full_call());
    call_row bare;
    bare.call_id = "call-2";
    bare.scope = "LLM";
    bare.outcome = "stalled";
    sink->write(bare);
    REQUIRE(sink->flush(10s));
  }
  auto db = open_db(path);
  auto s = one_row(db, "SELECT * FROM call WHERE pgw_call_id = 'call-1'");
  CHECK(s.column_text(col(s, "pgw_scope")) == "LLM");
  CHECK(s.column_double(col(s, "pgw_started_at_ms")) == 1764400000000.25);
  CHECK(s.column_text(col(s, "pgw_outcome")) == "ok");
  CHECK(s.column_int64(col(s, "pgw_attempts")) == 3);
  CHECK(s.column_int64(col(s, "pgw_hedges")) == 1);
  CHECK(s.column_int64(col(s, "pgw_hedge_won")) == 1);
  CHECK(s.column_int64(col(s, "pgw_cache_hit")) == 1);
  CHECK(s.column_double(col(s, "pgw_latency_ms")) == 1500.5);
  CHECK(s.column_double(col(s, "pgw_generation_ms")) == 650.5);
  CHECK(s.column_text(col(s, "pgw_source")) == "b");
  CHECK(s.column_text(col(s, "gen_ai_response_model")) == "gpt-4o");
  CHECK(s.column_int64(col(s, "gen_ai_usage_input_tokens")) == 1000);
  CHECK(s.column_int64(col(s, "gen_ai_usage_output_tokens")) == 200);
  CHECK(s.column_double(col(s, "pgw_cost_usd")) == 0.0045);
  CHECK(s.column_double(col(s, "pgw_losers_cost_usd")) == 0.0025);
  CHECK(s.column_text(col(s, "pgw_prompt")) == "hello?");
  CHECK(s.column_double(col(s, "pgw_cost_saved_usd")) == 0.0125);
  CHECK(s.column_count() == 18);
  auto b = one_row(db, "SELECT * FROM call WHERE pgw_call_id = 'call-2'");
  for (auto name : {"pgw_source", "gen_ai_response_model", "pgw_cost_usd",
                    "pgw_prompt", "pgw_cost_saved_usd"}) {
    CAPTURE(name);
    CHECK(b.is_null(col(b, name)));
  }
  CHECK(b.column_double(col(b, "pgw_losers_cost_usd")) == 0);
  CHECK(b.column_int64(col(b, "pgw_hedge_won")) == 0);
}

TEST_CASE("sink: every terminal_failure field lands in its column and "
          "unset ones are NULL") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    sink->write(full_failure());
    terminal_failure_row bare;
    bare.call_id = "call-10";
    bare.scope = "LLM";
    bare.error_code = "cancelled";
    sink->write(bare);
    REQUIRE(sink->flush(10s));
  }
  auto db = open_db(path);
  auto s = one_row(db, "SELECT * FROM terminal_failure "
                       "WHERE pgw_call_id = 'call-9'");
  CHECK(s.column_text(col(s, "pgw_scope")) == "LLM");
  CHECK(s.column_double(col(s, "pgw_at_ms")) == 1764400009999.5);
  CHECK(s.column_text(col(s, "error_type")) == "request_rejected");
  CHECK(s.column_text(col(s, "pgw_message"))
        == "upstream rejected the request");
  CHECK(s.column_double(col(s, "pgw_retry_after_s")) == 2.5);
  CHECK(s.column_int64(col(s, "pgw_upstream_status")) == 400);
  CHECK(s.column_text(col(s, "pgw_upstream_code"))
        == "content_policy_violation");
  CHECK(s.column_text(col(s, "pgw_per_source")) == R"({"a":"http_400"})");
  CHECK(s.column_count() == 9);
  auto b = one_row(db, "SELECT * FROM terminal_failure "
                       "WHERE pgw_call_id = 'call-10'");
  CHECK(b.column_text(col(b, "error_type")) == "cancelled");
  for (auto name : {"pgw_message", "pgw_retry_after_s", "pgw_upstream_status",
                    "pgw_upstream_code", "pgw_per_source"}) {
    CAPTURE(name);
    CHECK(b.is_null(col(b, name)));
  }
}

TEST_CASE("sink: a new database has the current schema, its version rows, "
          "the indices and WAL mode") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  auto sink = make_sqlite_sink(path);
  sink->write(full_attempt());
  REQUIRE(sink->flush(10s));
  auto db = open_db(path);
  auto mode = db.query_text("PRAGMA journal_mode");
  REQUIRE(mode);
  CHECK(*mode == "wal");
  auto version = sqlite::schema_version_of(db);
  REQUIRE(version);
  CHECK(*version == sqlite::current_schema_version());
  CHECK(sqlite::current_schema_version() == 4);
  auto versions = db.prepare("SELECT version FROM schema_version ORDER BY 1");
  REQUIRE(versions);
  std::vector<int64_t> seen;
  while (*versions->step())
    seen.push_back(versions->column_int64(0));
  CHECK(seen == std::vector<int64_t>{1, 2, 3, 4});
  auto idx = db.prepare("SELECT name, tbl_name FROM sqlite_master "
                        "WHERE type = 'index' AND sql IS NOT NULL ORDER BY 1");
  REQUIRE(idx);
  std::vector<std::string> indices;
  while (*idx->step())
    indices.push_back(idx->column_text(1) + "." + idx->column_text(0));
  CHECK(indices
        == std::vector<std::string>{
          "attempt.attempt_call_id", "attempt.attempt_started_at",
          "call.call_call_id", "call.call_started_at",
          "terminal_failure.terminal_failure_at",
          "terminal_failure.terminal_failure_call_id"});
  // OpenTelemetry GenAI names where one exists, pgw_ otherwise.
  auto attempt_cols = columns_of(db, "attempt");
  for (auto name : {"gen_ai_request_model", "gen_ai_response_model",
                    "gen_ai_usage_input_tokens", "gen_ai_usage_output_tokens",
                    "error_type", "http_response_status_code"})
    CHECK(attempt_cols.count(name) == 1);
  for (auto& name : attempt_cols) {
    CAPTURE(name);
    CHECK((name.rfind("pgw_", 0) == 0 || name.rfind("gen_ai_", 0) == 0
           || name == "error_type" || name == "http_response_status_code"));
  }
  // No column could hold a credential.
  for (auto table : {"attempt", "call", "terminal_failure"})
    for (auto& name : columns_of(db, table)) {
      CAPTURE(name);
      CHECK(name.find("key") == std::string::npos);
      CHECK(name.find("auth") == std::string::npos);
    }
}

TEST_CASE("sink: migrations are numbered 1..n without gaps") {
  auto& steps = sqlite::migrations();
  REQUIRE_FALSE(steps.empty());
  for (size_t i = 0; i < steps.size(); ++i)
    CHECK(steps[i].version == static_cast<int64_t>(i + 1));
  CHECK(sqlite::current_schema_version() == steps.back().version);
}

TEST_CASE("sink: N rows are committed in ceil(N / max_batch) transactions") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  sqlite_sink_options opts;
  opts.max_batch = 100;
  opts.max_delay = 60s; // no partial batch by time: only full ones and flush
  auto sink = make_sqlite_sink(path, opts);
  const int n = 1050;
  for (int i = 0; i < n; ++i) {
    auto r = full_attempt();
    r.attempt = static_cast<uint64_t>(i);
    REQUIRE(sink->write(r));
  }
  REQUIRE(sink->flush(20s));
  auto st = sink->status();
  CHECK(st.queued == n);
  CHECK(st.written == n);
  CHECK(st.batches == 11);
  CHECK(st.dropped == 0);
  CHECK(st.errors == 0);
  CHECK(st.healthy);
  CHECK(st.path == path);
  auto db = open_db(path);
  CHECK(count(db, "attempt") == n);
}

TEST_CASE("sink: a partial batch is committed after max_delay without a "
          "flush") {
  test::scratch_dir dir;
  sqlite_sink_options opts;
  opts.max_batch = 100;
  opts.max_delay = 20ms;
  auto sink = make_sqlite_sink(dir.file("t.sqlite"), opts);
  for (int i = 0; i < 3; ++i)
    sink->write(full_call());
  CHECK(test::eventually([&] { return sink->status().written == 3; }));
  CHECK(sink->status().batches == 1);
}

TEST_CASE("sink: a row reaching an idle writer is in the file within "
          "max_delay, the sink still running") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  sqlite_sink_options opts;
  opts.max_batch = 500;
  opts.max_delay = 20ms;
  auto sink = make_sqlite_sink(path, opts);
  // After a flush the writer has the file open and waits on an empty queue.
  REQUIRE(sink->write(full_call()));
  REQUIRE(sink->flush(10s));
  REQUIRE(sink->write(full_call()));
  auto db = open_db(path);
  CHECK(test::eventually([&] { return count(db, "call") == 2; }, 5s));
  CHECK(sink->status().written == 2);
}

TEST_CASE("sink: mixed row types share batches") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  sqlite_sink_options opts;
  opts.max_batch = 4;
  opts.max_delay = 60s;
  auto sink = make_sqlite_sink(path, opts);
  for (int i = 0; i < 3; ++i) {
    sink->write(full_attempt());
    sink->write(full_call());
    sink->write(full_failure());
  }
  REQUIRE(sink->flush(10s));
  CHECK(sink->status().batches == 3); // 9 rows, 4 per transaction
  auto db = open_db(path);
  CHECK(count(db, "attempt") == 3);
  CHECK(count(db, "call") == 3);
  CHECK(count(db, "terminal_failure") == 3);
}

TEST_CASE("sink: a full queue drops rows, counts them and never blocks") {
  test::scratch_dir dir;
  sqlite_sink_options opts;
  opts.max_queue = 10;
  opts.retry_every = std::chrono::minutes(10);
  // The directory does not exist, so rows wait for a retry that is ten
  // minutes away and the queue fills up.
  auto before = log::current_level();
  log::set_level(log::level::off);
  auto sink = make_sqlite_sink(dir.file("missing/t.sqlite"), opts);
  REQUIRE(test::eventually([&] { return !sink->status().healthy; }));
  int accepted = 0;
  int refused = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 25; ++i)
    (sink->write(full_attempt()) ? accepted : refused)++;
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(accepted == 10);
  CHECK(refused == 15);
  auto st = sink->status();
  CHECK(st.queued == 10);
  CHECK(st.dropped == 15);
  CHECK(st.written == 0);
  // flush gives up after its timeout rather than waiting for the retry.
  CHECK_FALSE(sink->flush(20ms));
  sink.reset();
  log::set_level(before);
}

TEST_CASE("sink: flush of an idle sink returns at once") {
  test::scratch_dir dir;
  auto sink = make_sqlite_sink(dir.file("t.sqlite"));
  CHECK(sink->flush(0ms));
  CHECK(sink->status().queued == 0);
}

TEST_CASE("sink: the destructor commits what is queued") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    sqlite_sink_options opts;
    opts.max_delay = 60s;
    auto sink = make_sqlite_sink(path, opts);
    for (int i = 0; i < 7; ++i)
      sink->write(full_attempt());
  }
  auto db = open_db(path);
  CHECK(count(db, "attempt") == 7);
}

TEST_CASE("sink: two sinks on one file (two processes) both write") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto one = make_sqlite_sink(path);
    auto two = make_sqlite_sink(path);
    for (int i = 0; i < 200; ++i) {
      one->write(full_attempt());
      two->write(full_call());
    }
    REQUIRE(one->flush(10s));
    REQUIRE(two->flush(10s));
    CHECK(one->status().dropped == 0);
    CHECK(two->status().dropped == 0);
  }
  auto db = open_db(path);
  CHECK(count(db, "attempt") == 200);
  CHECK(count(db, "call") == 200);
  CHECK(count(db, "schema_version") == 4);
}
