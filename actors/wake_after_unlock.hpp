#pragma once

/// CAF 0.17.6's work-sharing policy, waking a worker after the job queue's
/// lock is released.
///
/// CAF's `work_sharing::enqueue` calls `notify_one` while holding the lock:
/// a sleeping worker wakes, finds the lock taken, sleeps on it and is woken
/// a second time when the enqueuing thread lets go — two context switches
/// instead of one for every message that a thread outside the scheduler (a
/// transport I/O thread, serve's HTTP threads, a `client` caller) sends to an
/// idle system (`perf sched timehist` on `pgw-actor serve`; BENCHMARKS.md).
/// The queue, its lock and `dequeue` are the base's; only the wake moves.
/// The base's four entry points call its own `enqueue`, so all four are
/// redeclared here. The quiet clock's coordinator (quiet_clock.cpp) runs it.
///
/// With a loop (`coordinator_data::loop`, set before the workers start; one
/// worker), the worker runs that Asio loop whenever its job queue is empty,
/// instead of sleeping on the condition variable: the loop's handlers (an
/// upstream socket's read, serve's HTTP sessions) and the actors share the
/// thread, and a message from a handler to an actor, or back, wakes nobody.
/// An enqueue while the worker waits in the loop posts an empty handler to
/// wake it; every 8th job the loop is polled so that a busy queue does not
/// starve I/O. A stopped loop falls back to the condition variable.

#include <caf/policy/work_sharing.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <mutex>

namespace pgw {

class wake_after_unlock : public caf::policy::work_sharing {
public:
  struct coordinator_data : work_sharing::coordinator_data {
    using work_sharing::coordinator_data::coordinator_data;
    /// The loop the worker runs while idle; null = sleep on `cv`.
    boost::asio::io_context* loop = nullptr;
    /// The worker waits in `loop` (guarded by `lock`).
    bool in_loop = false;
    /// Jobs taken since the loop was last polled (the worker's own).
    unsigned since_poll = 0;
  };

  template <class Coordinator>
  void enqueue(Coordinator* self, caf::resumable* job) {
    queue_type l; // allocated outside the lock, as the base does
    l.push_back(job);
    auto& data = d(self);
    bool wake_loop = false;
    {
      std::lock_guard guard{data.lock};
      data.queue.splice(data.queue.end(), l);
      wake_loop = data.in_loop;
      data.in_loop = false;
    }
    if (wake_loop)
      boost::asio::post(*data.loop, [] {});
    data.cv.notify_one();
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = d(self->parent());
    if (data.loop != nullptr && ++data.since_poll % 8 == 0
        && !data.loop->stopped())
      data.loop->poll();
    for (;;) {
      std::unique_lock guard{data.lock};
      if (data.loop == nullptr || data.loop->stopped())
        data.cv.wait(guard, [&] { return !data.queue.empty(); });
      if (!data.queue.empty()) {
        auto job = data.queue.front();
        data.queue.pop_front();
        data.in_loop = false;
        return job;
      }
      data.in_loop = true;
      guard.unlock();
      data.loop->run_one();
    }
  }

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    enqueue(self, job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }
};

} // namespace pgw
