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

#include <caf/policy/work_sharing.hpp>

#include <mutex>

namespace pgw {

class wake_after_unlock : public caf::policy::work_sharing {
public:
  template <class Coordinator>
  void enqueue(Coordinator* self, caf::resumable* job) {
    queue_type l; // allocated outside the lock, as the base does
    l.push_back(job);
    auto& data = d(self);
    {
      std::lock_guard guard{data.lock};
      data.queue.splice(data.queue.end(), l);
    }
    data.cv.notify_one();
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
