// serve's access log writer (apps/cli/line_writer.*): lines reach the
// descriptor in order, and a descriptor nobody reads never blocks whoever
// pushes — the lines that do not fit are dropped, counted and reported.

#include "apps/cli/line_writer.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace {

/// A pipe whose read end the test drains on a thread of its own once
/// asked, until the write end closes.
struct pipe_pair {
  int fds[2] = {-1, -1};
  std::string read;
  std::thread reader;

  pipe_pair() { REQUIRE(::pipe2(fds, O_CLOEXEC) == 0); }

  void start_reading() {
    reader = std::thread([this] {
      char buf[4096];
      for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
        read.append(buf, static_cast<size_t>(n));
    });
  }

  /// Closes the write end and returns everything read.
  std::string finish() {
    ::close(fds[1]);
    fds[1] = -1;
    if (reader.joinable())
      reader.join();
    return read;
  }

  ~pipe_pair() {
    if (fds[1] >= 0)
      ::close(fds[1]);
    if (reader.joinable())
      reader.join();
    ::close(fds[0]);
  }
};

} // namespace

TEST_CASE("line_writer writes the lines in order") {
  pipe_pair p;
  p.start_reading();
  {
    pgw::cli::line_writer w{p.fds[1], 100};
    CHECK(w.push("one"));
    CHECK(w.push("two"));
    CHECK(w.push("three"));
  }
  CHECK(p.finish() == "one\ntwo\nthree\n");
}

TEST_CASE("line_writer never blocks on an unread descriptor and reports the lines it dropped") {
  pipe_pair p; // nobody reads until every line is pushed
  auto w = std::make_unique<pgw::cli::line_writer>(p.fds[1], 10);
  const std::string line(100, 'x');
  size_t refused = 0;
  for (int i = 0; i < 2000; ++i) // 200 kB: more than the pipe and the queue hold
    if (!w->push(line))
      ++refused;
  CHECK(refused > 0);
  CHECK(w->dropped() == refused);
  p.start_reading();
  w.reset(); // writes what is queued, now that it is read
  auto out = p.finish();
  std::istringstream lines{out};
  size_t written = 0;
  uint64_t reported = 0;
  std::regex notice{"line_writer: ([0-9]+) line\\(s\\) dropped .*"};
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    if (l == line)
      ++written;
    else if (std::regex_match(l, m, notice))
      reported += std::stoull(m[1]);
    else
      FAIL("unexpected line: " << l.substr(0, 80));
  }
  CHECK(written + refused == 2000);
  CHECK(reported == refused);
}
