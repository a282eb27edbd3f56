// A bounded queue of lines and the thread that writes them (line_writer.hpp).

#include "line_writer.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace pgw::cli {

line_writer::line_writer(int fd, size_t max_lines)
  : fd_(fd), max_lines_(std::max<size_t>(max_lines, 1)) {
  thread_ = std::thread([this] { run(); });
}

line_writer::~line_writer() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool line_writer::push(std::string line) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (lines_.size() >= max_lines_) {
      ++dropped_;
      return false;
    }
    line += '\n';
    lines_.push_back(std::move(line));
  }
  cv_.notify_one();
  return true;
}

uint64_t line_writer::dropped() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return dropped_;
}

void line_writer::run() {
  std::unique_lock<std::mutex> lock{mtx_};
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !lines_.empty(); });
    if (lines_.empty())
      return; // stopping, all written
    std::string text;
    if (dropped_ > reported_) {
      text = fmt::format("line_writer: {} line(s) dropped (the output was "
                         "not read fast enough)\n",
                         dropped_ - reported_);
      reported_ = dropped_;
    }
    for (auto& line : lines_)
      text += line;
    lines_.clear();
    lock.unlock();
    bool ok = write_all(text);
    lock.lock();
    if (!ok && stopping_)
      return; // the descriptor takes nothing: give up
  }
}

/// Writes in pieces no larger than a pipe's atomic size, each after poll
/// says there is room, so that a write never blocks for long; gives up
/// after `linger_ms` without progress once stopping.
bool line_writer::write_all(const std::string& text) {
  constexpr size_t piece = 4096; // PIPE_BUF on Linux
  size_t off = 0;
  auto stalled_since = std::chrono::steady_clock::now();
  while (off < text.size()) {
    pollfd p{fd_, POLLOUT, 0};
    int n = ::poll(&p, 1, 100);
    if (n < 0 && errno != EINTR)
      return false;
    if (n <= 0) {
      bool stopping;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        stopping = stopping_;
      }
      if (stopping
          && std::chrono::steady_clock::now() - stalled_since
               > std::chrono::milliseconds(linger_ms))
        return false;
      continue;
    }
    if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0)
      return false;
    auto w = ::write(fd_, text.data() + off, std::min(piece, text.size() - off));
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return false;
    }
    off += static_cast<size_t>(w);
    stalled_since = std::chrono::steady_clock::now();
  }
  return true;
}

} // namespace pgw::cli
