// The SQLite telemetry sink: a bounded queue in front of one writer thread
// of its own that commits batches in single transactions (SPEC §10).

#include "backends/sqlite/db.hpp"
#include "backends/sqlite/schema.hpp"
#include "backends/telemetry.hpp"
#include "config/support/log.hpp"
#include "messages/errors.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

namespace pgw {

namespace {

using clock_type = std::chrono::steady_clock;

using row = std::variant<attempt_row, call_row, terminal_failure_row>;

/// At most one "cannot write" warning per this interval.
constexpr auto warn_interval = std::chrono::minutes(1);

/// How long the destructor lets queued rows drain before dropping the rest.
constexpr auto shutdown_grace = std::chrono::seconds(2);

constexpr const char* insert_attempt_sql = R"sql(
INSERT INTO attempt (
  pgw_call_id, pgw_attempt, pgw_scope, pgw_source, gen_ai_request_model,
  gen_ai_response_model, pgw_started_at_ms, pgw_latency_ms, pgw_ttft_ms,
  pgw_generation_ms, pgw_outcome, pgw_reason, http_response_status_code,
  error_type, pgw_error_message, gen_ai_usage_input_tokens,
  gen_ai_usage_output_tokens, pgw_usage_source, pgw_settled_tokens,
  pgw_cost_usd, pgw_is_hedge, pgw_is_probe, pgw_content, pgw_operation)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
        ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)
)sql";

constexpr const char* insert_call_sql = R"sql(
INSERT INTO call (
  pgw_call_id, pgw_scope, pgw_started_at_ms, pgw_outcome, pgw_attempts,
  pgw_hedges, pgw_hedge_won, pgw_cache_hit, pgw_latency_ms, pgw_generation_ms,
  pgw_source, gen_ai_response_model, gen_ai_usage_input_tokens,
  gen_ai_usage_output_tokens, pgw_cost_usd, pgw_losers_cost_usd, pgw_prompt,
  pgw_cost_saved_usd)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
        ?17, ?18)
)sql";

constexpr const char* insert_terminal_failure_sql = R"sql(
INSERT INTO terminal_failure (
  pgw_call_id, pgw_scope, pgw_at_ms, error_type, pgw_message,
  pgw_retry_after_s, pgw_upstream_status, pgw_upstream_code, pgw_per_source)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
)sql";

/// How often opening retries the switch to WAL mode while another
/// connection holds the lock (20 ms apart).
constexpr int wal_switch_attempts = 100;

/// True when the last failure on `db` was a lock held by someone else.
bool is_busy(sqlite::connection& db) {
  auto code = sqlite3_errcode(db.handle()) & 0xff;
  return code == SQLITE_BUSY || code == SQLITE_LOCKED;
}

/// Status codes and the like: 0 means "none" in the rows, NULL in the table.
void bind_nonzero_or_null(sqlite::statement& stmt, int index, int32_t value) {
  if (value == 0)
    stmt.bind_null(index);
  else
    stmt.bind(index, static_cast<int64_t>(value));
}

void bind_flag(sqlite::statement& stmt, int index, bool value) {
  stmt.bind(index, static_cast<int64_t>(value ? 1 : 0));
}

void bind_row(sqlite::statement& s, const attempt_row& r) {
  s.bind(1, r.call_id);
  s.bind(2, static_cast<int64_t>(r.attempt));
  s.bind(3, r.scope);
  s.bind(4, r.source);
  s.bind_text_or_null(5, r.request_model);
  s.bind_text_or_null(6, r.response_model);
  s.bind(7, r.started_at_ms);
  s.bind(8, r.latency_ms);
  s.bind(9, r.ttft_ms);
  s.bind(10, r.generation_ms);
  s.bind(11, r.outcome);
  s.bind_text_or_null(12, r.reason);
  bind_nonzero_or_null(s, 13, r.http_status);
  s.bind_text_or_null(14, r.error_code);
  s.bind_text_or_null(15, r.error_message);
  s.bind(16, r.input_tokens);
  s.bind(17, r.output_tokens);
  s.bind_text_or_null(18, r.usage_source);
  s.bind(19, r.settled_tokens);
  s.bind(20, r.cost_usd);
  bind_flag(s, 21, r.is_hedge);
  bind_flag(s, 22, r.is_probe);
  s.bind_text_or_null(23, r.content);
  s.bind(24, r.operation.empty() ? std::string{"chat"} : r.operation);
}

void bind_row(sqlite::statement& s, const call_row& r) {
  s.bind(1, r.call_id);
  s.bind(2, r.scope);
  s.bind(3, r.started_at_ms);
  s.bind(4, r.outcome);
  s.bind(5, static_cast<int64_t>(r.attempts));
  s.bind(6, static_cast<int64_t>(r.hedges));
  bind_flag(s, 7, r.hedge_won);
  bind_flag(s, 8, r.cache_hit);
  s.bind(9, r.latency_ms);
  s.bind(10, r.generation_ms);
  s.bind_text_or_null(11, r.source);
  s.bind_text_or_null(12, r.model);
  s.bind(13, r.input_tokens);
  s.bind(14, r.output_tokens);
  s.bind(15, r.cost_usd);
  s.bind(16, r.losers_cost_usd);
  s.bind_text_or_null(17, r.prompt);
  s.bind(18, r.cost_saved_usd);
}

// One bind_row per table (duplicates pairs them by shape): the columns
// differ, and each row type is bound in one place.
void bind_row(sqlite::statement& s, const terminal_failure_row& r) {
  s.bind(1, r.call_id);
  s.bind(2, r.scope);
  s.bind(3, r.at_ms);
  s.bind(4, r.error_code);
  s.bind_text_or_null(5, r.message);
  s.bind(6, r.retry_after_s);
  bind_nonzero_or_null(s, 7, r.upstream_status);
  s.bind_text_or_null(8, r.upstream_code);
  s.bind_text_or_null(9, r.per_source_json);
}


/// The open database and its reused statements. Lives on the writer thread.
struct writer_db {
  sqlite::connection conn;
  sqlite::statement attempt;
  sqlite::statement call;
  sqlite::statement terminal_failure;

  /// Opens `path` (creating it), WAL mode, schema up to date, statements
  /// prepared. Returns the failure's text, or nothing.
  std::optional<std::string> open(const std::string& path) {
    auto db = sqlite::connection::open(path, sqlite::open_mode::read_write);
    if (!db)
      return words_of(db.error());
    // journal_mode is the first statement that touches the file: an
    // unreadable or foreign file fails here. Switching a new file to WAL
    // needs an exclusive lock and SQLite does not wait for it through the
    // busy handler, so two processes creating the same file at once retry
    // here for a short while (this is the writer thread; nobody waits on it).
    auto mode = db->query_text("PRAGMA journal_mode = WAL");
    for (int i = 0; i < wal_switch_attempts && !mode && is_busy(*db); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      mode = db->query_text("PRAGMA journal_mode = WAL");
    }
    if (!mode)
      return fmt::format("cannot use {}: {}", path, words_of(mode.error()));
    if (*mode != "wal")
      return fmt::format("cannot use {}: WAL mode refused (journal mode "
                         "stays {})",
                         path, *mode);
    if (auto err = db->exec("PRAGMA synchronous = NORMAL"))
      return fmt::format("cannot use {}: {}", path, words_of(err));
    auto version = sqlite::migrate(*db);
    if (!version)
      return fmt::format("cannot use {}: {}", path, words_of(version.error()));
    if (*version > sqlite::current_schema_version())
      log::warn("telemetry", "telemetry found schema version {} in {}, newer "
                             "than this build's {}; writing the columns it "
                             "knows",
                *version, path, sqlite::current_schema_version());
    auto a = db->prepare(insert_attempt_sql, true);
    auto c = db->prepare(insert_call_sql, true);
    auto t = db->prepare(insert_terminal_failure_sql, true);
    for (auto* stmt : {&a, &c, &t})
      if (!*stmt)
        return fmt::format("cannot use {}: {}", path,
                           words_of(stmt->error()));
    attempt = std::move(*a);
    call = std::move(*c);
    terminal_failure = std::move(*t);
    conn = std::move(*db);
    return std::nullopt;
  }

  void close() {
    attempt = {};
    call = {};
    terminal_failure = {};
    conn = {};
  }

  /// Inserts `batch` in one transaction. Returns the failure's text, or
  /// nothing; on failure nothing of the batch is kept.
  std::optional<std::string> write(const std::vector<row>& batch) {
    if (auto err = conn.exec("BEGIN IMMEDIATE"))
      return words_of(err);
    for (auto& r : batch) {
      auto& stmt = std::visit(
        [this](auto& x) -> sqlite::statement& {
          using type = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<type, attempt_row>)
            return attempt;
          else if constexpr (std::is_same_v<type, call_row>)
            return call;
          else
            return terminal_failure;
        },
        r);
      std::visit([&stmt](auto& x) { bind_row(stmt, x); }, r);
      auto done = stmt.step();
      stmt.reset();
      if (!done) {
        conn.exec("ROLLBACK");
        return words_of(done.error());
      }
    }
    if (auto err = conn.exec("COMMIT")) {
      conn.exec("ROLLBACK");
      return words_of(err);
    }
    return std::nullopt;
  }
};

class sqlite_sink final : public telemetry_sink {
public:
  sqlite_sink(std::string path, sqlite_sink_options opts)
    : path_(std::move(path)), opts_(opts) {
    opts_.max_batch = std::max<size_t>(opts_.max_batch, 1);
    opts_.retry_every = std::max(opts_.retry_every,
                                 std::chrono::milliseconds{1});
    status_.path = path_;
    writer_ = std::thread{[this] { run(); }};
  }

  /// Lets the writer commit what is queued for up to `shutdown_grace` (when
  /// the database is open), drops the rest (counted), joins the thread.
  ~sqlite_sink() override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stopping_ = true;
      stop_deadline_ = clock_type::now() + shutdown_grace;
    }
    wake_writer_.notify_all();
    writer_.join();
  }

  bool write(attempt_row r) override {
    return push(row{std::move(r)});
  }

  bool write(call_row r) override {
    return push(row{std::move(r)});
  }

  bool write(terminal_failure_row r) override {
    return push(row{std::move(r)});
  }

  bool flush(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock{mtx_};
    auto target = status_.queued;
    if (finished_ >= target)
      return true;
    ++flush_waiters_;
    wake_writer_.notify_all();
    auto ok = finished_cv_.wait_for(lock, timeout,
                                    [&] { return finished_ >= target; });
    --flush_waiters_;
    return ok;
  }

  telemetry_status status() const override {
    std::lock_guard<std::mutex> guard{mtx_};
    return status_;
  }

private:
  bool push(row r) {
    std::unique_lock<std::mutex> lock{mtx_};
    if (queue_.size() >= opts_.max_queue) {
      ++status_.dropped;
      return false;
    }
    auto first = queue_.empty();
    if (first)
      oldest_ = clock_type::now();
    queue_.push_back(std::move(r));
    ++status_.queued;
    auto wake = first || queue_.size() >= opts_.max_batch;
    lock.unlock();
    // The first row wakes the writer to time max_delay from it; the rows
    // after it wait for that timer or for a full batch.
    if (wake)
      wake_writer_.notify_one();
    return true;
  }

  /// Drops every queued row and counts it; `finish` them afterwards (the
  /// lock is held).
  size_t drop_queue() {
    auto n = queue_.size();
    queue_.clear();
    status_.dropped += n;
    return n;
  }

  /// `n` accepted rows are committed or dropped: wakes flush() (the lock is
  /// held).
  void finish(size_t n) {
    finished_ += n;
    finished_cv_.notify_all();
  }

  /// The writer thread. With the database open it waits for a full batch,
  /// a flush or the oldest row's max_delay, then commits one batch outside
  /// the lock. Without it, it (re)opens every retry_every, rows waiting in
  /// the meantime; when the attempt fails they are dropped, so a row never
  /// waits longer than one retry interval for a database that fails.
  void run() {
    writer_db db;
    bool open = false;
    std::unique_lock<std::mutex> lock{mtx_};
    for (;;) {
      auto now = clock_type::now();
      // Also at shutdown: a sink destroyed right after it was made still
      // opens the database once for what was queued.
      if (!open && now >= next_retry_ && !(stopping_ && queue_.empty())) {
        lock.unlock();
        auto failure = db.open(path_);
        lock.lock();
        open = !failure;
        if (failure) {
          next_retry_ = clock_type::now() + opts_.retry_every;
          auto dropped = drop_queue();
          if (dropped > 0)
            ++status_.errors;
          status_.healthy = false;
          // Warn before flush() returns, so a caller who flushed sees it.
          lock.unlock();
          warn_failure(*failure, dropped);
          lock.lock();
          finish(dropped);
        } else if (!status_.healthy) {
          status_.healthy = true;
          auto dropped = status_.dropped;
          lock.unlock();
          log::warn("telemetry", "telemetry resumed writing {} ({} rows "
                                 "dropped so far)",
                    path_, dropped);
          lock.lock();
        }
        continue;
      }
      if (stopping_) {
        if (queue_.empty())
          return;
        if (!open || now >= stop_deadline_) {
          auto dropped = drop_queue();
          finish(dropped);
          lock.unlock();
          log::warn("telemetry", "telemetry dropped {} queued rows for {} at "
                                 "shutdown",
                    dropped, path_);
          return;
        }
      } else if (!open) {
        wake_writer_.wait_until(lock, next_retry_);
        continue;
      } else if (queue_.empty()) {
        wake_writer_.wait(lock);
        continue;
      } else if (queue_.size() < opts_.max_batch && flush_waiters_ == 0
                 && now < oldest_ + opts_.max_delay) {
        wake_writer_.wait_until(lock, oldest_ + opts_.max_delay);
        continue;
      }
      auto n = std::min(queue_.size(), opts_.max_batch);
      std::vector<row> batch;
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      auto failure = db.write(batch);
      lock.lock();
      if (!failure) {
        ++status_.batches;
        status_.written += n;
        status_.healthy = true;
        finish(n);
        continue;
      }
      db.close();
      open = false;
      ++status_.errors;
      next_retry_ = clock_type::now() + opts_.retry_every;
      status_.dropped += n;
      auto dropped = n + drop_queue();
      status_.healthy = false;
      lock.unlock();
      warn_failure(fmt::format("cannot write {}: {}", path_, *failure),
                   dropped);
      lock.lock();
      finish(dropped);
    }
  }

  /// Warns about a failure, at most once per minute (writer thread only).
  /// `reason` names the path.
  void warn_failure(const std::string& reason, size_t dropped) {
    auto now = clock_type::now();
    if (last_warning_ && now - *last_warning_ < warn_interval)
      return;
    last_warning_ = now;
    log::warn("telemetry",
              "telemetry {}; dropped {} rows, retrying every {} ms", reason,
              dropped, opts_.retry_every.count());
  }

  const std::string path_;
  sqlite_sink_options opts_;

  mutable std::mutex mtx_;
  std::condition_variable wake_writer_;
  std::condition_variable finished_cv_;
  std::deque<row> queue_;
  clock_type::time_point oldest_;   ///< when the queue's head row arrived
  telemetry_status status_;         ///< `queued` = rows accepted so far
  uint64_t finished_ = 0;           ///< accepted rows committed or dropped
  size_t flush_waiters_ = 0;
  bool stopping_ = false;
  clock_type::time_point stop_deadline_;

  // Writer thread only (read under the lock).
  clock_type::time_point next_retry_;
  std::optional<clock_type::time_point> last_warning_;

  std::thread writer_;
};

} // namespace

telemetry_sink_ptr make_sqlite_sink(const std::string& path,
                                    sqlite_sink_options opts) {
  return std::make_shared<sqlite_sink>(path, opts);
}

} // namespace pgw
