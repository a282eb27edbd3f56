#pragma once

/// An elastic pool of the project's own I/O threads. Blocking work (HTTP
/// requests through cpp-httplib) runs here, never on CAF's scheduler threads.
/// A task never waits for a free thread: when no worker is idle a new one
/// starts; idle workers exit after `idle_timeout`.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace pgw {

class io_pool {
public:
  /// `stack_size` bytes per thread (blocked HTTP calls need little stack).
  explicit io_pool(std::chrono::milliseconds idle_timeout
                   = std::chrono::seconds(30),
                   size_t stack_size = 256 * 1024);

  /// Waits until every submitted task has finished and every thread exited.
  /// Callers cancel blocking work first.
  ~io_pool();

  io_pool(const io_pool&) = delete;
  io_pool& operator=(const io_pool&) = delete;

  /// Runs `task` on a pool thread, at once.
  void submit(std::function<void()> task);

  /// Threads alive now.
  size_t threads() const;

  /// Threads waiting for work now.
  size_t idle() const;

private:
  static void* run(void* self);
  void work();

  std::chrono::milliseconds idle_timeout_;
  size_t stack_size_;
  mutable std::mutex mtx_;
  std::condition_variable work_cv_;
  std::condition_variable exit_cv_;
  std::deque<std::function<void()>> queue_;
  size_t threads_ = 0;
  size_t idle_ = 0;
  bool stopping_ = false;
};

} // namespace pgw
