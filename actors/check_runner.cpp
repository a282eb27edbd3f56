#include "actors/check_runner.hpp"

#include "config/support/io_pool.hpp"

#include <algorithm>
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

  void submit(std::function<void()> task) override {
    pool_.submit(std::move(task));
  }

private:
  io_pool pool_;
};

} // namespace

check_runner_ptr make_pool_check_runner(size_t max_threads) {
  if (max_threads == 0)
    max_threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  return std::make_shared<pool_check_runner>(max_threads);
}

} // namespace pgw
