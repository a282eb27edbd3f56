#pragma once

/// An elastic pool of the project's own I/O threads. Blocking work (HTTP
/// requests through cpp-httplib) runs here, never on CAF's scheduler threads.
/// By default a task never waits for a free thread: when no worker is idle a
/// new one starts. With `max_threads` the pool starts at most that many and
/// further tasks wait in order for a worker (CPU-bound work: more threads
/// than cores only share the cores). Idle workers exit after `idle_timeout`.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace pgw {

class io_pool {
public:
  /// `stack_size` bytes per thread (blocked HTTP calls need little stack);
  /// `max_threads` 0: no bound.
  explicit io_pool(std::chrono::milliseconds idle_timeout
                   = std::chrono::seconds(30),
                   size_t stack_size = 256 * 1024, size_t max_threads = 0);

  /// Waits until every submitted task has finished and every thread exited
  /// (but the calling thread, when a task of this pool destroys it).
  /// Callers cancel blocking work first.
  ~io_pool();

  io_pool(const io_pool&) = delete;
  io_pool& operator=(const io_pool&) = delete;

  /// Runs `task` on a pool thread: at once, or with `max_threads` reached
  /// once a worker is free.
  void submit(std::function<void()> task);

  /// Threads alive now.
  size_t threads() const;

  /// Threads waiting for work now.
  size_t idle() const;

  /// Tasks no worker has taken yet.
  size_t queued() const;

private:
  struct core;

  static void* run(void* arg);
  static void work(const std::shared_ptr<core>& c);

  /// Shared with the worker threads: a pool destroyed by one of its own
  /// tasks (the task released the pool's last owner) must not pull the
  /// ground from under the thread running it.
  std::shared_ptr<core> core_;
};

} // namespace pgw
