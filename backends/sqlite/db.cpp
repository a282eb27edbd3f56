#include "backends/sqlite/db.hpp"

#include "messages/errors.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include <utility>

namespace pgw::sqlite {

caf::error make_sqlite_error(sqlite3* db, const std::string& what) {
  auto reason = db != nullptr ? std::string{sqlite3_errmsg(db)}
                              : std::string{"out of memory"};
  return make_error(error_code::internal, fmt::format("{}: {}", what, reason));
}

// -- statement ------------------------------------------------------------------

statement::statement(statement&& other) noexcept
  : db_(std::exchange(other.db_, nullptr)),
    stmt_(std::exchange(other.stmt_, nullptr)) {
}

statement& statement::operator=(statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr)
      sqlite3_finalize(stmt_);
    db_ = std::exchange(other.db_, nullptr);
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

statement::~statement() {
  if (stmt_ != nullptr)
    sqlite3_finalize(stmt_);
}

void statement::bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
}

void statement::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, static_cast<sqlite3_int64>(value));
}

void statement::bind(int index, const std::string& value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
}

void statement::bind_null(int index) {
  sqlite3_bind_null(stmt_, index);
}

void statement::bind(int index, const caf::optional<double>& value) {
  if (value)
    bind(index, *value);
  else
    bind_null(index);
}

void statement::bind_text_or_null(int index, const std::string& value) {
  if (value.empty())
    bind_null(index);
  else
    bind(index, value);
}

caf::expected<bool> statement::step() {
  auto rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW)
    return true;
  if (rc == SQLITE_DONE)
    return false;
  return make_sqlite_error(db_, "statement failed");
}

void statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int statement::column_count() const {
  return sqlite3_column_count(stmt_);
}

std::string statement::column_name(int col) const {
  auto name = sqlite3_column_name(stmt_, col);
  return name != nullptr ? std::string{name} : std::string{};
}

bool statement::is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

double statement::column_double(int col) const {
  return sqlite3_column_double(stmt_, col);
}

int64_t statement::column_int64(int col) const {
  return static_cast<int64_t>(sqlite3_column_int64(stmt_, col));
}

std::string statement::column_text(int col) const {
  auto text = sqlite3_column_text(stmt_, col);
  if (text == nullptr)
    return {};
  return std::string{reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col))};
}

// -- connection -----------------------------------------------------------------

connection::connection(connection&& other) noexcept
  : db_(std::exchange(other.db_, nullptr)) {
}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr)
      sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

connection::~connection() {
  // close_v2: statements that outlive the connection object still finalize
  // cleanly; the handle goes away with the last of them.
  if (db_ != nullptr)
    sqlite3_close_v2(db_);
}

caf::expected<connection> connection::open(const std::string& path,
                                           open_mode mode,
                                           int busy_timeout_ms) {
  int flags = SQLITE_OPEN_NOMUTEX
              | (mode == open_mode::read_only
                   ? SQLITE_OPEN_READONLY
                   : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite3* db = nullptr;
  auto rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    auto err = make_sqlite_error(db, fmt::format("cannot open {}", path));
    sqlite3_close_v2(db);
    return err;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return connection{db};
}

caf::error connection::exec(const std::string& sql) {
  char* msg = nullptr;
  auto rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg);
  if (rc == SQLITE_OK)
    return {};
  std::string reason = msg != nullptr ? msg : sqlite3_errstr(rc);
  sqlite3_free(msg);
  return make_error(error_code::internal, reason);
}

caf::expected<statement> connection::prepare(const std::string& sql,
                                             bool persistent) {
  sqlite3_stmt* stmt = nullptr;
  auto rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                               persistent ? SQLITE_PREPARE_PERSISTENT : 0,
                               &stmt, nullptr);
  if (rc != SQLITE_OK)
    return make_sqlite_error(db_, "cannot prepare statement");
  return statement{db_, stmt};
}

caf::expected<std::string> connection::query_text(const std::string& sql) {
  auto stmt = prepare(sql);
  if (!stmt)
    return stmt.error();
  auto row = stmt->step();
  if (!row)
    return row.error();
  if (!*row || stmt->is_null(0))
    return std::string{};
  return stmt->column_text(0);
}

caf::expected<bool> connection::has_table(const std::string& name) {
  auto stmt = prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                      "AND name = ?1");
  if (!stmt)
    return stmt.error();
  stmt->bind(1, name);
  return stmt->step();
}

caf::expected<bool> connection::has_column(const std::string& table,
                                           const std::string& column) {
  auto stmt = prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2");
  if (!stmt)
    return stmt.error();
  stmt->bind(1, table);
  stmt->bind(2, column);
  return stmt->step();
}

std::string connection::last_error() const {
  return db_ != nullptr ? std::string{sqlite3_errmsg(db_)} : std::string{};
}

} // namespace pgw::sqlite
