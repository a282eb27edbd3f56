// The scheduler's work-sharing policy (issue 17): every way a job enters the
// queue wakes a worker once the queue's lock is released, never while it is
// held (CAF's own policy notifies under the lock: a worker woken there
// sleeps on the lock and needs a second wake). A fake coordinator records
// whether the lock was held at each notify.

#include "actors/wake_after_unlock.hpp"

#include <caf/resumable.hpp>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <list>
#include <vector>

namespace {

struct fake_lock {
  bool held = false;
  int taken = 0;
  void lock() {
    held = true;
    ++taken;
  }
  void unlock() {
    held = false;
  }
};

struct fake_cv {
  fake_lock* lock;
  std::vector<bool> held_at_notify;
  void notify_one() {
    held_at_notify.push_back(lock->held);
  }
  /// Single-threaded tests: the queue is filled before a wait is reached.
  template <class Lock, class Pred>
  void wait(Lock&, Pred pred) {
    REQUIRE(pred());
  }
};

struct fake_data {
  fake_lock lock;
  std::list<caf::resumable*> queue;
  fake_cv cv{&lock, {}};
  boost::asio::io_context* loop = nullptr;
  bool in_loop = false;
  unsigned since_poll = 0;
};

struct fake_coordinator {
  fake_data state;
  fake_data& data() {
    return state;
  }
};

struct fake_worker {
  fake_coordinator* owner;
  fake_coordinator* parent() {
    return owner;
  }
};

/// Never run: the policy only queues it.
struct fake_job : caf::resumable {
  resume_result resume(caf::execution_unit*, size_t) override {
    return done;
  }
  void intrusive_ptr_add_ref_impl() override {
    // nop
  }
  void intrusive_ptr_release_impl() override {
    // nop
  }
};

} // namespace

TEST_CASE("scheduler policy: each of the four enqueue paths queues the job "
          "under the lock and wakes a worker after releasing it") {
  pgw::wake_after_unlock policy;
  fake_coordinator coord;
  fake_worker worker{&coord};
  fake_job jobs[4];
  policy.central_enqueue(&coord, &jobs[0]);
  policy.external_enqueue(&worker, &jobs[1]);
  policy.internal_enqueue(&worker, &jobs[2]);
  policy.resume_job_later(&worker, &jobs[3]);
  auto& d = coord.state;
  CHECK(d.lock.taken == 4);
  CHECK_FALSE(d.lock.held);
  REQUIRE(d.cv.held_at_notify.size() == 4);
  for (bool held : d.cv.held_at_notify)
    CHECK_FALSE(held);
  std::vector<caf::resumable*> order(d.queue.begin(), d.queue.end());
  CHECK(order == std::vector<caf::resumable*>{&jobs[0], &jobs[1], &jobs[2],
                                              &jobs[3]});
}

TEST_CASE("scheduler policy with a loop: an idle worker runs the loop, a job "
          "queued by a loop handler wakes it, a stopped loop falls back") {
  pgw::wake_after_unlock policy;
  boost::asio::io_context loop{1};
  auto work = boost::asio::make_work_guard(loop);
  fake_coordinator coord;
  coord.state.loop = &loop;
  fake_worker worker{&coord};
  fake_job jobs[3];
  // An upstream read, say, delivering a message: the handler runs on the
  // idle worker, and its enqueue posts the wake that ends `run_one`.
  bool handler_ran = false;
  boost::asio::post(loop, [&] {
    handler_ran = true;
    policy.central_enqueue(&coord, &jobs[0]);
  });
  CHECK(policy.dequeue(&worker) == &jobs[0]);
  CHECK(handler_ran);
  CHECK(loop.poll() == 1); // the (empty) wake, still queued
  // Queued while the worker was not in the loop: nothing posted.
  policy.central_enqueue(&coord, &jobs[1]);
  CHECK(loop.poll() == 0);
  CHECK(policy.dequeue(&worker) == &jobs[1]);
  // A stopped loop: the worker waits on the condition variable again.
  loop.stop();
  policy.central_enqueue(&coord, &jobs[2]);
  CHECK(policy.dequeue(&worker) == &jobs[2]);
  CHECK(coord.state.cv.held_at_notify.size() == 3);
}

TEST_CASE("scheduler policy with a loop: a busy queue still polls the loop "
          "every 8 jobs") {
  pgw::wake_after_unlock policy;
  boost::asio::io_context loop{1};
  fake_coordinator coord;
  coord.state.loop = &loop;
  fake_worker worker{&coord};
  fake_job jobs[8];
  for (auto& job : jobs)
    policy.central_enqueue(&coord, &job);
  bool polled = false;
  boost::asio::post(loop, [&] { polled = true; });
  for (int i = 0; i < 7; ++i)
    CHECK(policy.dequeue(&worker) == &jobs[i]);
  CHECK_FALSE(polled);
  CHECK(policy.dequeue(&worker) == &jobs[7]);
  CHECK(polled);
}
