#include "actors/check_runner.hpp"

#include "config/support/io_pool.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

namespace pgw {

namespace {

class pool_check_runner final : public check_runner {
public:
  /// 8 MiB, glibc's default thread stack (CAF's workers have it).
  explicit pool_check_runner(size_t max_threads)
    : pool_(std::chrono::seconds(30), 8 * 1024 * 1024, max_threads) {
    // nop
  }

  /// Runs on whichever thread drops the last owner, often one of CAF's
  /// (an actor's state ending): it waits only for the checks running now.
  /// Queued ones are skipped: every actor that waited for them held this
  /// runner, so none is left to answer.
  ~pool_check_runner() override {
    *closed_ = true;
  }

  void submit(std::function<void()> task) override {
    pool_.submit([closed = closed_, task = std::move(task)] {
      if (!*closed)
        task();
    });
  }

private:
  std::shared_ptr<std::atomic<bool>> closed_
    = std::make_shared<std::atomic<bool>>(false);
  io_pool pool_; // ends before `closed_`, after the destructor's body
};

} // namespace

check_runner_ptr make_pool_check_runner(size_t max_threads) {
  if (max_threads == 0)
    max_threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  return std::make_shared<pool_check_runner>(max_threads);
}

check_runner_ptr process_check_runner() {
  static std::mutex mtx;
  static std::weak_ptr<check_runner> current;
  std::lock_guard<std::mutex> guard{mtx};
  if (auto runner = current.lock())
    return runner;
  auto runner = make_pool_check_runner();
  current = runner;
  return runner;
}

} // namespace pgw
