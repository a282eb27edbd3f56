#pragma once

/// Lines of text written to a file descriptor by a thread of its own, so
/// that whoever produces them never waits on the descriptor (serve's access
/// log: the front writes its lines on the thread that runs every actor, and
/// a stderr pipe nobody drains must not stall them). The queue is bounded:
/// a line that finds it full is dropped and counted, and the next write
/// says how many were lost ("line_writer: N line(s) dropped").

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace pgw::cli {

class line_writer {
public:
  /// Writes to `fd` (not owned); at most `max_lines` wait at a time.
  line_writer(int fd, size_t max_lines);

  /// Writes what is queued, for up to `linger_ms` if the descriptor does
  /// not take it, then stops.
  ~line_writer();

  line_writer(const line_writer&) = delete;
  line_writer& operator=(const line_writer&) = delete;

  /// Queues one line (a newline is added). False: the queue was full and
  /// the line is dropped. Any thread; never blocks on the descriptor.
  bool push(std::string line);

  /// Lines dropped so far.
  uint64_t dropped() const;

  /// How long the destructor waits for a descriptor that takes nothing.
  static constexpr int linger_ms = 1000;

private:
  void run();
  bool write_all(const std::string& text);

  int fd_;
  size_t max_lines_;
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  uint64_t dropped_ = 0;
  uint64_t reported_ = 0; ///< drops already told
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace pgw::cli
