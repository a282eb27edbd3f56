// The scheduler's work-sharing policy (issue 17): every way a job enters the
// queue wakes a worker once the queue's lock is released, never while it is
// held (CAF's own policy notifies under the lock: a worker woken there
// sleeps on the lock and needs a second wake). A fake coordinator records
// whether the lock was held at each notify.

#include "actors/wake_after_unlock.hpp"

#include <caf/resumable.hpp>

#include <doctest/doctest.h>

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
};

struct fake_data {
  fake_lock lock;
  std::list<caf::resumable*> queue;
  fake_cv cv{&lock, {}};
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
