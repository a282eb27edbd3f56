#include "actors/quiet_clock.hpp"

#include "actors/wake_after_unlock.hpp"

#include <caf/actor_system.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <thread>

namespace pgw {

void quiet_clock::mark(caf::abstract_actor* self) {
  std::lock_guard<std::mutex> guard{mtx_};
  armed_.insert(self);
}

void quiet_clock::set_ordinary_timeout(time_point t, caf::abstract_actor* self,
                                       caf::atom_value type, uint64_t id) {
  mark(self);
  super::set_ordinary_timeout(t, self, type, id);
}

void quiet_clock::set_request_timeout(time_point t, caf::abstract_actor* self,
                                      caf::message_id id) {
  mark(self);
  super::set_request_timeout(t, self, id);
}

void quiet_clock::set_multi_timeout(time_point t, caf::abstract_actor* self,
                                    caf::atom_value type, uint64_t id) {
  mark(self);
  super::set_multi_timeout(t, self, type, id);
}

void quiet_clock::cancel_timeouts(caf::abstract_actor* self) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (armed_.erase(self) == 0) {
      skipped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  super::cancel_timeouts(self);
}

namespace {

/// CAF's work-sharing coordinator (waking after unlocking) with the quiet
/// clock as the system clock.
/// The base class still starts its own clock thread; nothing reaches that
/// clock, so the thread sleeps until shutdown.
class quiet_coordinator
  : public caf::scheduler::coordinator<wake_after_unlock> {
public:
  using super = caf::scheduler::coordinator<wake_after_unlock>;

  quiet_coordinator(caf::actor_system& sys, boost::asio::io_context* loop)
    : super(sys) {
    data().loop = loop;
  }

  quiet_clock& clock() noexcept override {
    return clock_;
  }

protected:
  void start() override {
    thread_ = std::thread{[this] {
      system().thread_started();
      clock_.run_dispatch_loop();
      system().thread_terminates();
    }};
    super::start();
  }

  void stop() override {
    // Actors cleaned up by the base's stop still reach the quiet clock.
    super::stop();
    clock_.cancel_dispatch_loop();
    thread_.join();
  }

private:
  quiet_clock clock_;
  std::thread thread_;
};

} // namespace

void use_quiet_clock(caf::actor_system_config& cfg,
                     boost::asio::io_context* loop) {
  if (loop != nullptr)
    cfg.set("scheduler.max-threads", 1); // one thread runs the loop
  cfg.module_factories.push_back(
    [loop](caf::actor_system& sys) -> caf::actor_system::module* {
      return new quiet_coordinator(sys, loop);
    });
}

quiet_clock* quiet_clock_of(caf::actor_system& sys) {
  return dynamic_cast<quiet_clock*>(&sys.clock());
}

} // namespace pgw
