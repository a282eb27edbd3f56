// The sink when the database cannot be written: rows are dropped and
// counted, the caller never sees an exception or waits on I/O, a warning
// is logged at most once a minute, and writing resumes by itself.
//
// The tests run as root in CI containers, where file permissions do not
// stop a write; the failures used here are ones root cannot get past: a
// path under a regular file, a directory, a file that is not a database, a
// database locked by another connection, and a file-size limit (disk full).

#include "backends/sqlite/db.hpp"
#include "backends/telemetry.hpp"
#include "config/support/log.hpp"

#include "fixtures/log_capture.hpp"
#include "fixtures/telemetry/fixture_db.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace pgw;
using namespace std::chrono_literals;
using pgw::test::log_capture;

namespace {

attempt_row some_attempt(const std::string& call_id = "c") {
  attempt_row r;
  r.call_id = call_id;
  r.attempt = 1;
  r.scope = "LLM";
  r.source = "a";
  r.outcome = "ok";
  return r;
}

int64_t attempt_count(const std::string& path) {
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  auto stmt = db->prepare("SELECT count(*) FROM attempt");
  REQUIRE(stmt);
  REQUIRE(*stmt->step());
  return stmt->column_int64(0);
}

/// Writes `n` rows and flushes; checks the caller saw no failure.
void write_rows(telemetry_sink& sink, int n) {
  for (int i = 0; i < n; ++i)
    CHECK(sink.write(some_attempt()));
  CHECK(sink.flush(10s));
}

} // namespace

TEST_CASE("sink failure: a directory that does not exist yet and is created "
          "later") {
  log_capture logs;
  test::scratch_dir dir;
  auto path = dir.file("later/t.sqlite");
  sqlite_sink_options opts;
  opts.retry_every = 20ms;
  auto sink = make_sqlite_sink(path, opts);
  write_rows(*sink, 3);
  auto st = sink->status();
  CHECK_FALSE(st.healthy);
  CHECK(st.dropped == 3);
  CHECK(st.written == 0);
  CHECK(st.errors >= 1);
  std::filesystem::create_directories(dir.path() / "later");
  // The writer retries on its own and turns healthy without a row.
  REQUIRE(test::eventually([&] { return sink->status().healthy; }));
  write_rows(*sink, 4);
  st = sink->status();
  CHECK(st.written == 4);
  CHECK(st.dropped == 3);
  CHECK(attempt_count(path) == 4);
  CHECK(logs.count("resumed writing") == 1);
}

TEST_CASE("sink failure: a path under a regular file fails even for root") {
  log_capture logs;
  sqlite_sink_options opts;
  opts.retry_every = 10ms;
  auto sink = make_sqlite_sink("/dev/null/x.db", opts);
  for (int round = 0; round < 3; ++round) {
    CHECK_NOTHROW(write_rows(*sink, 5));
  }
  auto st = sink->status();
  CHECK_FALSE(st.healthy);
  CHECK(st.queued == 15);
  CHECK(st.dropped == 15);
  CHECK(st.written == 0);
  CHECK(st.errors >= 1);
  CHECK(st.path == "/dev/null/x.db");
  // Many failed retries, one warning (at most one a minute).
  CHECK(logs.count("telemetry cannot open /dev/null/x.db") == 1);
}

TEST_CASE("sink failure: a directory in place of the database file") {
  log_capture logs;
  test::scratch_dir dir;
  std::filesystem::create_directories(dir.path() / "db");
  auto sink = make_sqlite_sink(dir.file("db"));
  write_rows(*sink, 2);
  CHECK(sink->status().dropped == 2);
  CHECK_FALSE(sink->status().healthy);
}

TEST_CASE("sink failure: a file that is not a database, then replaced") {
  log_capture logs;
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    std::ofstream out{path, std::ios::binary};
    for (int i = 0; i < 512; ++i)
      out << "this is not a SQLite database file. ";
  }
  sqlite_sink_options opts;
  opts.retry_every = 20ms;
  auto sink = make_sqlite_sink(path, opts);
  write_rows(*sink, 2);
  CHECK(sink->status().dropped == 2);
  CHECK_FALSE(sink->status().healthy);
  CHECK_MESSAGE(logs.count("not a database") == 1, logs.all());
  std::filesystem::remove(path);
  REQUIRE(test::eventually([&] { return sink->status().healthy; }));
  write_rows(*sink, 2);
  CHECK(sink->status().written == 2);
  CHECK(attempt_count(path) == 2);
}

TEST_CASE("sink failure: a read-only database file (not as root)") {
  if (::geteuid() == 0) {
    MESSAGE("running as root, which writes read-only files anyway: the "
            "other failure cases cover this one");
    return;
  }
  log_capture logs;
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    write_rows(*sink, 1);
  }
  ::chmod(path.c_str(), 0444);
  ::chmod(dir.path().c_str(), 0555);
  sqlite_sink_options opts;
  opts.retry_every = 20ms;
  auto sink = make_sqlite_sink(path, opts);
  write_rows(*sink, 3);
  CHECK(sink->status().dropped == 3);
  CHECK_FALSE(sink->status().healthy);
  ::chmod(dir.path().c_str(), 0755);
  ::chmod(path.c_str(), 0644);
  REQUIRE(test::eventually([&] { return sink->status().healthy; }));
  write_rows(*sink, 2);
  CHECK(attempt_count(path) == 3);
}

TEST_CASE("sink failure: a database locked by another connection and "
          "writes that never wait for it") {
  log_capture logs;
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  sqlite_sink_options opts;
  opts.retry_every = 20ms;
  opts.max_delay = 1ms;
  auto sink = make_sqlite_sink(path, opts);
  write_rows(*sink, 1);
  REQUIRE(sink->status().written == 1);
  auto other = sqlite::connection::open(path, sqlite::open_mode::read_write);
  REQUIRE(other);
  REQUIRE_FALSE(other->exec("BEGIN EXCLUSIVE"));
  // The writer now waits for the lock (busy timeout) and fails; the caller
  // goes on queueing without waiting.
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i)
    CHECK(sink->write(some_attempt()));
  CHECK(std::chrono::steady_clock::now() - start < 500ms);
  CHECK(sink->flush(10s));
  auto st = sink->status();
  CHECK(st.dropped == 1000);
  CHECK_FALSE(st.healthy);
  REQUIRE_FALSE(other->exec("ROLLBACK"));
  REQUIRE(test::eventually([&] { return sink->status().healthy; }));
  write_rows(*sink, 5);
  CHECK(sink->status().written == 6);
  CHECK(attempt_count(path) == 6);
}

TEST_CASE("sink failure: a full disk (file size limit), then space again") {
  log_capture logs;
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  sqlite_sink_options opts;
  opts.retry_every = 20ms;
  auto sink = make_sqlite_sink(path, opts);
  write_rows(*sink, 1);
  REQUIRE(sink->status().written == 1);
  // RLIMIT_FSIZE stops every write past the limit, root's too: the WAL
  // cannot grow, as on a full disk. SIGXFSZ would kill the process.
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  std::error_code ec;
  auto wal_size = std::filesystem::file_size(path + "-wal", ec);
  auto db_size = std::filesystem::file_size(path);
  rlimit tight = before;
  tight.rlim_cur = std::max<rlim_t>(wal_size, db_size) + 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
  auto big = some_attempt("big");
  big.content = std::string(256 * 1024, 'x');
  CHECK(sink->write(big));
  CHECK(sink->flush(10s));
  auto st = sink->status();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &before) == 0);
  std::signal(SIGXFSZ, old_handler);
  CHECK(st.dropped == 1);
  CHECK(st.errors == 1);
  CHECK_FALSE(st.healthy);
  CHECK_MESSAGE(logs.count("cannot write " + path) == 1, logs.all());
  REQUIRE(test::eventually([&] { return sink->status().healthy; }));
  CHECK(sink->write(big));
  CHECK(sink->flush(10s));
  CHECK(sink->status().written == 2);
  CHECK(attempt_count(path) == 2);
}
