#include "backends/sqlite/schema.hpp"

#include "messages/errors.hpp"

#include <fmt/format.h>

#include <chrono>

namespace pgw::sqlite {

namespace {

// Version 1: the three tables and their indices.
constexpr const char* v1_sql = R"sql(
CREATE TABLE schema_version (
  version INTEGER PRIMARY KEY,
  applied_at_ms REAL NOT NULL,
  description TEXT NOT NULL
);
CREATE TABLE attempt (
  pgw_call_id TEXT NOT NULL,
  pgw_attempt INTEGER NOT NULL,
  pgw_scope TEXT NOT NULL,
  pgw_source TEXT NOT NULL,
  gen_ai_request_model TEXT,
  gen_ai_response_model TEXT,
  pgw_started_at_ms REAL NOT NULL,
  pgw_latency_ms REAL NOT NULL,
  pgw_ttft_ms REAL,
  pgw_generation_ms REAL NOT NULL,
  pgw_outcome TEXT NOT NULL,
  pgw_reason TEXT,
  http_response_status_code INTEGER,
  error_type TEXT,
  pgw_error_message TEXT,
  gen_ai_usage_input_tokens INTEGER NOT NULL,
  gen_ai_usage_output_tokens INTEGER NOT NULL,
  pgw_usage_source TEXT,
  pgw_settled_tokens INTEGER NOT NULL,
  pgw_cost_usd REAL,
  pgw_is_hedge INTEGER NOT NULL,
  pgw_is_probe INTEGER NOT NULL
);
CREATE INDEX attempt_call_id ON attempt (pgw_call_id);
CREATE INDEX attempt_started_at ON attempt (pgw_started_at_ms);
CREATE TABLE call (
  pgw_call_id TEXT NOT NULL,
  pgw_scope TEXT NOT NULL,
  pgw_started_at_ms REAL NOT NULL,
  pgw_outcome TEXT NOT NULL,
  pgw_attempts INTEGER NOT NULL,
  pgw_hedges INTEGER NOT NULL,
  pgw_hedge_won INTEGER NOT NULL,
  pgw_cache_hit INTEGER NOT NULL,
  pgw_latency_ms REAL NOT NULL,
  pgw_generation_ms REAL NOT NULL,
  pgw_source TEXT,
  gen_ai_response_model TEXT,
  gen_ai_usage_input_tokens INTEGER NOT NULL,
  gen_ai_usage_output_tokens INTEGER NOT NULL,
  pgw_cost_usd REAL,
  pgw_losers_cost_usd REAL NOT NULL
);
CREATE INDEX call_call_id ON call (pgw_call_id);
CREATE INDEX call_started_at ON call (pgw_started_at_ms);
CREATE TABLE terminal_failure (
  pgw_call_id TEXT NOT NULL,
  pgw_scope TEXT NOT NULL,
  pgw_at_ms REAL NOT NULL,
  error_type TEXT NOT NULL,
  pgw_message TEXT,
  pgw_retry_after_s REAL,
  pgw_upstream_status INTEGER,
  pgw_upstream_code TEXT,
  pgw_per_source TEXT
);
CREATE INDEX terminal_failure_call_id ON terminal_failure (pgw_call_id);
CREATE INDEX terminal_failure_at ON terminal_failure (pgw_at_ms);
)sql";

// Version 2: the opt-in content columns (PGW_TELEMETRY_CONTENT=on); NULL
// unless the caller put the text into the row.
constexpr const char* v2_sql = R"sql(
ALTER TABLE attempt ADD COLUMN pgw_content TEXT;
ALTER TABLE call ADD COLUMN pgw_prompt TEXT;
)sql";

// Version 3: what a response-cache hit saved (issue 14); NULL for misses.
constexpr const char* v3_sql = R"sql(
ALTER TABLE call ADD COLUMN pgw_cost_saved_usd REAL;
)sql";

// Version 4: what an attempt did (issue 16): chat, embeddings, ocr_text,
// ocr_layout; rows written before it were chat.
constexpr const char* v4_sql = R"sql(
ALTER TABLE attempt ADD COLUMN pgw_operation TEXT NOT NULL DEFAULT 'chat';
)sql";

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(system_clock::now().time_since_epoch())
    .count();
}

} // namespace

const std::vector<migration>& migrations() {
  static const std::vector<migration> steps = {
    {1, "attempt, call and terminal_failure tables with their indices",
     v1_sql},
    {2, "opt-in content columns attempt.pgw_content and call.pgw_prompt",
     v2_sql},
    {3, "call.pgw_cost_saved_usd of response-cache hits", v3_sql},
    {4, "attempt.pgw_operation (chat, embeddings, ocr_text, ocr_layout)",
     v4_sql},
  };
  return steps;
}

int64_t current_schema_version() {
  return migrations().back().version;
}

caf::expected<int64_t> schema_version_of(connection& db) {
  auto exists = db.has_table("schema_version");
  if (!exists)
    return exists.error();
  if (!*exists)
    return int64_t{0};
  auto stmt = db.prepare("SELECT coalesce(max(version), 0) FROM "
                         "schema_version");
  if (!stmt)
    return stmt.error();
  auto row = stmt->step();
  if (!row)
    return row.error();
  return *row ? stmt->column_int64(0) : int64_t{0};
}

caf::expected<int64_t> migrate(connection& db) {
  for (auto& step : migrations()) {
    // Cheap check outside a transaction first: an up-to-date database takes
    // no write lock at all.
    auto before = schema_version_of(db);
    if (!before)
      return before.error();
    if (*before >= step.version)
      continue;
    if (auto err = db.exec("BEGIN IMMEDIATE"))
      return err;
    auto fail = [&](const caf::error& err) {
      auto reason = words_of(err);
      db.exec("ROLLBACK");
      return make_error(error_code::internal,
                        fmt::format("schema migration to version {} ({}) "
                                    "failed: {}",
                                    step.version, step.description, reason));
    };
    auto current = schema_version_of(db);
    if (!current)
      return fail(current.error());
    if (*current >= step.version) {
      db.exec("ROLLBACK");
      continue;
    }
    if (auto err = db.exec(step.sql))
      return fail(err);
    auto record = db.prepare("INSERT INTO schema_version (version, "
                             "applied_at_ms, description) VALUES (?1, ?2, ?3)");
    if (!record)
      return fail(record.error());
    record->bind(1, step.version);
    record->bind(2, now_ms());
    record->bind(3, std::string{step.description});
    if (auto done = record->step(); !done)
      return fail(done.error());
    if (auto err = db.exec("COMMIT"))
      return fail(err);
  }
  return schema_version_of(db);
}

} // namespace pgw::sqlite
