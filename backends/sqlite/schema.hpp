#pragma once

/// The telemetry database schema (SPEC §10) and its migrations.
///
/// Tables `attempt`, `call` and `terminal_failure`; column names follow the
/// OpenTelemetry GenAI semantic conventions where one exists (dots become
/// underscores: `gen_ai_request_model`, `gen_ai_usage_input_tokens`,
/// `error_type`, `http_response_status_code`) and are prefixed `pgw_`
/// otherwise. `schema_version` records every applied step.
///
/// A new database is built by running every migration in order, so the path
/// an old database takes and the path a new one takes are the same code.

#include "backends/sqlite/db.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <vector>

namespace pgw::sqlite {

/// One step of the schema's history.
struct migration {
  int64_t version;         ///< the version the database has after this step
  const char* description; ///< recorded in `schema_version`
  const char* sql;         ///< `;`-separated statements
};

/// Every step, oldest first; versions are 1, 2, ... without gaps.
const std::vector<migration>& migrations();

/// The schema version this build creates and writes.
int64_t current_schema_version();

/// The highest version recorded in `schema_version`; 0 when the database has
/// no such table (a new, empty file).
caf::expected<int64_t> schema_version_of(connection& db);

/// Applies every step newer than the database's version, in order, each in
/// one transaction together with its `schema_version` row. The version is
/// re-read inside each (immediate) transaction, so two processes opening the
/// same new file never apply a step twice. A database written by a newer
/// build is left as it is. Returns the database's version afterwards.
caf::expected<int64_t> migrate(connection& db);

} // namespace pgw::sqlite
