// io_pool (config/support/io_pool.hpp): elastic by default, and with
// `max_threads` a bounded pool whose extra tasks wait in order for a worker.

#include "actors/check_runner.hpp"
#include "config/support/io_pool.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <vector>

using namespace pgw;

namespace {

/// Tasks that say when they start and wait for one gate.
struct gated_tasks {
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::vector<std::promise<void>> started;
  std::vector<std::promise<void>> done;
  std::atomic<int> running{0};
  std::atomic<int> most_running{0};

  explicit gated_tasks(size_t n) : started(n), done(n) {
    // nop
  }

  void submit_to(io_pool& pool, size_t i) {
    pool.submit([this, i] {
      auto now = ++running;
      auto seen = most_running.load();
      while (now > seen && !most_running.compare_exchange_weak(seen, now)) {
        // retry
      }
      started[i].set_value();
      opened.wait();
      --running;
      done[i].set_value();
    });
  }

  /// Opens the gate, waits for every task; the most that ran at once.
  int open_and_finish() {
    gate.set_value();
    for (auto& d : done)
      d.get_future().wait();
    return most_running;
  }
};

} // namespace

TEST_CASE("io_pool: without a bound every task starts at once on a thread "
          "of its own") {
  gated_tasks t{4};
  io_pool pool; // ends first: its threads are gone before the tasks' state
  for (size_t i = 0; i < 4; ++i)
    t.submit_to(pool, i);
  for (auto& s : t.started)
    s.get_future().wait();
  CHECK(pool.threads() == 4);
  CHECK(pool.queued() == 0);
  CHECK(t.open_and_finish() == 4);
}

TEST_CASE("io_pool: with max_threads the extra tasks wait in order and all "
          "of them run") {
  gated_tasks t{5};
  io_pool pool{std::chrono::seconds(30), 256 * 1024, 2};
  for (size_t i = 0; i < 5; ++i)
    t.submit_to(pool, i);
  // The first two hold both threads; no third thread starts for the rest.
  t.started[0].get_future().wait();
  t.started[1].get_future().wait();
  CHECK(pool.threads() == 2);
  CHECK(pool.queued() == 3);
  CHECK(t.open_and_finish() == 2);
  CHECK(pool.threads() <= 2);
  CHECK(pool.queued() == 0);
}

TEST_CASE("io_pool: an idle bounded worker takes the next task without a "
          "new thread") {
  std::promise<void> ran[3];
  io_pool pool{std::chrono::seconds(30), 256 * 1024, 1};
  for (auto& r : ran) {
    pool.submit([&r] { r.set_value(); });
    r.get_future().wait();
    CHECK(pool.threads() == 1);
  }
}

namespace {

/// Says when it is destroyed (with the task holding it).
struct on_end {
  explicit on_end(std::promise<void>* p) : ended(p) {
    // nop
  }
  on_end(const on_end&) = delete;
  ~on_end() {
    ended->set_value();
  }
  std::promise<void>* ended;
};

} // namespace

TEST_CASE("check runner: ended, it skips the checks still queued and waits "
          "only for the running one") {
  auto runner = make_pool_check_runner(1);
  auto* raw = runner.get();
  std::promise<void> gate;
  std::promise<void> queued_ended;
  std::atomic<bool> queued_ran{false};
  // The running check holds the runner's last owner and drops it, as an
  // actor's state ending would: the destructor runs on the pool's thread
  // (io_pool allows that), deterministically before the queued task.
  raw->submit([keep = std::move(runner), opened = gate.get_future().share()]() mutable {
    opened.wait();
    keep.reset();
  });
  auto end = std::make_shared<on_end>(&queued_ended);
  raw->submit([&queued_ran, end] { queued_ran = true; });
  end.reset();
  gate.set_value();
  queued_ended.get_future().wait();
  CHECK_FALSE(queued_ran);
}

TEST_CASE("check runner: the process's is one while held and ends with its "
          "last holder") {
  auto first = process_check_runner();
  REQUIRE(static_cast<bool>(first));
  CHECK((process_check_runner() == first));
  std::weak_ptr<check_runner> watch = first;
  first.reset();
  CHECK(watch.expired());
  auto next = process_check_runner();
  REQUIRE(static_cast<bool>(next));
  CHECK((process_check_runner() == next));
}
