#include "transport/io_pool.hpp"

#include "config/log.hpp"

#include <pthread.h>

namespace pgw {

io_pool::io_pool(std::chrono::milliseconds idle_timeout, size_t stack_size)
  : idle_timeout_(idle_timeout), stack_size_(stack_size) {
  // nop
}

io_pool::~io_pool() {
  std::unique_lock<std::mutex> guard{mtx_};
  stopping_ = true;
  work_cv_.notify_all();
  exit_cv_.wait(guard, [this] { return threads_ == 0; });
}

void io_pool::submit(std::function<void()> task) {
  std::unique_lock<std::mutex> guard{mtx_};
  queue_.push_back(std::move(task));
  if (idle_ >= queue_.size()) {
    work_cv_.notify_one();
    return;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_size_);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  if (pthread_create(&tid, &attr, &io_pool::run, this) == 0) {
    ++threads_;
  } else if (threads_ == 0) {
    // Cannot start any thread: run inline rather than lose the task.
    pthread_attr_destroy(&attr);
    auto fn = std::move(queue_.back());
    queue_.pop_back();
    guard.unlock();
    log::error("io_pool", "pthread_create failed with no worker alive; "
                          "running a task inline");
    fn();
    return;
  } else {
    log::warn("io_pool", "pthread_create failed; task waits for a worker");
  }
  pthread_attr_destroy(&attr);
}

void* io_pool::run(void* self) {
  static_cast<io_pool*>(self)->work();
  return nullptr;
}

void io_pool::work() {
  std::unique_lock<std::mutex> guard{mtx_};
  for (;;) {
    if (!queue_.empty()) {
      auto task = std::move(queue_.front());
      queue_.pop_front();
      guard.unlock();
      task();
      task = nullptr; // release captures outside the lock
      guard.lock();
      continue;
    }
    if (stopping_)
      break;
    ++idle_;
    auto woke = work_cv_.wait_for(guard, idle_timeout_, [this] {
      return !queue_.empty() || stopping_;
    });
    --idle_;
    if (!woke)
      break; // idle for too long
  }
  --threads_;
  if (threads_ == 0)
    exit_cv_.notify_all();
}

size_t io_pool::threads() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return threads_;
}

size_t io_pool::idle() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return idle_;
}

} // namespace pgw
