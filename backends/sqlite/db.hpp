#pragma once

/// A thin RAII layer over the SQLite C API: one connection, prepared
/// statements, typed binds and columns. Used by the telemetry sink, the
/// report, and tests that build or inspect databases by hand. Not
/// thread-safe: one connection belongs to one thread at a time.

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace pgw::sqlite {

/// One prepared statement. Move-only; finalized by the destructor.
class statement {
public:
  statement() = default;
  statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {
  }
  statement(statement&& other) noexcept;
  statement& operator=(statement&& other) noexcept;
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;
  ~statement();

  /// Binds parameter `index` (1-based).
  void bind(int index, double value);
  void bind(int index, int64_t value);
  void bind(int index, const std::string& value);
  /// Binds NULL.
  void bind_null(int index);
  /// Binds the value, or NULL when it is absent.
  void bind(int index, const caf::optional<double>& value);
  /// Binds the text, or NULL when it is empty.
  void bind_text_or_null(int index, const std::string& value);

  /// Runs one step: true when a row is available, false when done; an
  /// error carries SQLite's message.
  caf::expected<bool> step();

  /// Makes the statement ready to run again with fresh binds.
  void reset();

  int column_count() const;
  std::string column_name(int col) const;
  bool is_null(int col) const;
  double column_double(int col) const;
  int64_t column_int64(int col) const;
  std::string column_text(int col) const;

  explicit operator bool() const {
    return stmt_ != nullptr;
  }

private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

/// How to open a database.
enum class open_mode {
  read_only,   ///< an existing file; never creates one
  read_write,  ///< creates the file when missing
};

/// One connection. Move-only; closed by the destructor.
class connection {
public:
  connection() = default;
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  /// Opens `path`. The error message names the path and SQLite's reason.
  static caf::expected<connection> open(const std::string& path,
                                        open_mode mode,
                                        int busy_timeout_ms = 1000);

  /// Runs one or more `;`-separated statements that return no rows.
  caf::error exec(const std::string& sql);

  /// Prepares one statement; `persistent` for statements kept and reused.
  caf::expected<statement> prepare(const std::string& sql,
                                   bool persistent = false);

  /// The value of a one-row, one-column query (e.g. `PRAGMA journal_mode`),
  /// as text; empty when the query returns no row or NULL.
  caf::expected<std::string> query_text(const std::string& sql);

  /// True when a table of that name exists.
  caf::expected<bool> has_table(const std::string& name);

  /// True when `table` has a column `column`.
  caf::expected<bool> has_column(const std::string& table,
                                 const std::string& column);

  /// SQLite's message for the last failure on this connection.
  std::string last_error() const;

  explicit operator bool() const {
    return db_ != nullptr;
  }

  sqlite3* handle() const {
    return db_;
  }

private:
  explicit connection(sqlite3* db) : db_(db) {
  }

  sqlite3* db_ = nullptr;
};

/// A `pgw` error (code `internal`) with `what` and SQLite's message.
caf::error make_sqlite_error(sqlite3* db, const std::string& what);


} // namespace pgw::sqlite
