#include "config/support/io_pool.hpp"

#include "config/support/log.hpp"

#include <pthread.h>

namespace pgw {

struct io_pool::core {
  std::chrono::milliseconds idle_timeout;
  size_t stack_size;
  size_t max_threads;
  mutable std::mutex mtx;
  std::condition_variable work_cv;
  std::condition_variable exit_cv;
  std::deque<std::function<void()>> queue;
  size_t threads = 0;
  size_t idle = 0;
  bool stopping = false;
};

namespace {

/// The pool whose task this thread runs, if any.
thread_local const void* current_core = nullptr;

} // namespace

io_pool::io_pool(std::chrono::milliseconds idle_timeout, size_t stack_size,
                 size_t max_threads)
  : core_(std::make_shared<core>()) {
  core_->idle_timeout = idle_timeout;
  core_->stack_size = stack_size;
  core_->max_threads = max_threads;
}

io_pool::~io_pool() {
  auto& c = *core_;
  std::unique_lock<std::mutex> guard{c.mtx};
  c.stopping = true;
  c.work_cv.notify_all();
  // A task of this very pool may drop its last owner: then this thread is
  // one of the workers and only the others are waited for (it finishes its
  // task and exits on its own, keeping the core alive).
  size_t self = current_core == core_.get() ? 1 : 0;
  c.exit_cv.wait(guard, [&c, self] { return c.threads == self; });
}

void io_pool::submit(std::function<void()> task) {
  auto& c = *core_;
  std::unique_lock<std::mutex> guard{c.mtx};
  c.queue.push_back(std::move(task));
  if (c.idle >= c.queue.size()) {
    // Wake after unlocking: a worker woken under the lock would find it
    // taken, sleep on it and need a second wake (the scheduler's note in
    // actors/quiet_clock.cpp).
    guard.unlock();
    c.work_cv.notify_one();
    return;
  }
  if (c.max_threads != 0 && c.threads >= c.max_threads) {
    // Every thread is taken: the first free worker takes it (work()).
    bool wake = c.idle > 0;
    guard.unlock();
    if (wake)
      c.work_cv.notify_one();
    return;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, c.stack_size);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  auto arg = new std::shared_ptr<core>(core_);
  if (pthread_create(&tid, &attr, &io_pool::run, arg) == 0) {
    ++c.threads;
  } else if (c.threads == 0) {
    delete arg;
    // Cannot start any thread: run inline rather than lose the task.
    pthread_attr_destroy(&attr);
    auto fn = std::move(c.queue.back());
    c.queue.pop_back();
    guard.unlock();
    log::error("io_pool", "pthread_create failed with no worker alive; "
                          "running a task inline");
    fn();
    return;
  } else {
    delete arg;
    log::warn("io_pool", "pthread_create failed; task waits for a worker");
  }
  pthread_attr_destroy(&attr);
}

void* io_pool::run(void* arg) {
  auto owned = static_cast<std::shared_ptr<core>*>(arg);
  std::shared_ptr<core> c = std::move(*owned);
  delete owned;
  current_core = c.get();
  work(c);
  current_core = nullptr;
  return nullptr;
}

void io_pool::work(const std::shared_ptr<core>& cp) {
  auto& c = *cp;
  std::unique_lock<std::mutex> guard{c.mtx};
  for (;;) {
    if (!c.queue.empty()) {
      auto task = std::move(c.queue.front());
      c.queue.pop_front();
      guard.unlock();
      task();
      task = nullptr; // release captures outside the lock
      guard.lock();
      continue;
    }
    if (c.stopping)
      break;
    ++c.idle;
    auto woke = c.work_cv.wait_for(guard, c.idle_timeout, [&c] {
      return !c.queue.empty() || c.stopping;
    });
    --c.idle;
    if (!woke)
      break; // idle for too long
  }
  --c.threads;
  c.exit_cv.notify_all();
}

size_t io_pool::threads() const {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->threads;
}

size_t io_pool::idle() const {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->idle;
}

size_t io_pool::queued() const {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->queue.size();
}

} // namespace pgw
