#include "actors/check_runner.hpp"

#include "config/support/io_pool.hpp"

namespace pgw {

namespace {

class pool_check_runner final : public check_runner {
public:
  /// 8 MiB, glibc's default thread stack (CAF's workers have it).
  pool_check_runner() : pool_(std::chrono::seconds(30), 8 * 1024 * 1024) {
    // nop
  }

  void submit(std::function<void()> task) override {
    pool_.submit(std::move(task));
  }

private:
  io_pool pool_;
};

} // namespace

check_runner_ptr make_pool_check_runner() {
  return std::make_shared<pool_check_runner>();
}

} // namespace pgw
