// A limiter actor over a blocking backend whose every handle is gone while
// its offloaded call still runs: the pool thread must not end up holding the
// actor's last reference, or the actor's state (which owns the pool) would
// be destroyed on a pool thread, and ~io_pool waits for its own threads.

#include "actors/limiter.hpp"
#include "messages/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <thread>

using namespace pgw;

namespace {

/// `release` waits for `gate`; the destructor says on which thread it ran.
class gated_limiter : public limiter_backend {
public:
  gated_limiter(std::shared_future<void> gate,
                std::promise<bool>* destroyed_on_caller)
    : gate_(std::move(gate)), destroyed_(destroyed_on_caller) {
    // nop
  }

  ~gated_limiter() override {
    destroyed_->set_value(std::this_thread::get_id() != caller_);
  }

  caf::expected<acquire_result> try_acquire(int64_t, double) override {
    return acquire_result{};
  }

  caf::expected<bool> settle(const std::string&, int64_t, double) override {
    return true;
  }

  caf::expected<bool> release(const std::string&, double) override {
    caller_ = std::this_thread::get_id();
    gate_.wait();
    return true;
  }

  caf::expected<limiter_status> status(double) override {
    return limiter_status{};
  }

private:
  std::shared_future<void> gate_;
  std::promise<bool>* destroyed_;
  std::thread::id caller_;
};

} // namespace

TEST_CASE("offload: an actor left alone with its running backend call ends "
          "off the pool's threads") {
  caf::actor_system_config cfg;
  pgw::add_message_types(cfg);
  caf::actor_system sys{cfg};
  for (int i = 0; i < 200; ++i) {
    std::promise<void> gate;
    std::promise<bool> destroyed;
    auto pool = std::make_shared<io_pool>();
    auto lim = sys.spawn(limiter,
                         std::make_shared<gated_limiter>(
                           gate.get_future().share(), &destroyed),
                         pool);
    pool.reset(); // the actor's state holds the only reference now
    caf::anon_send(lim, atom::release_v, std::string{"p"});
    lim = nullptr; // and the running call the only handle of the actor
    gate.set_value();
    auto done = destroyed.get_future();
    REQUIRE(done.wait_for(std::chrono::seconds(10))
            == std::future_status::ready);
    REQUIRE(done.get()); // not on the pool thread that ran the call
  }
}
