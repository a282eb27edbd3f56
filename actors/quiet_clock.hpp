#pragma once

/// A CAF 0.17 scheduler whose clock is not woken when an actor that never
/// armed a timeout ends.
///
/// CAF 0.17.6's `local_actor::cleanup` calls `clock().cancel_timeouts(self)`
/// for every actor that ends; the threaded clock turns that into a
/// `drop_all` event pushed to its dispatch thread, waking that thread once
/// per ended actor (a supervisor and an attempt per call) although the
/// event finds nothing to drop unless the actor armed an ordinary,
/// multi-request or request timeout. The quiet clock remembers the actors
/// that armed one and forwards `cancel_timeouts` for those only. Delayed
/// messages (`delayed_send`, what pgw's timers use) are not keyed by actor
/// and never dropped by `cancel_timeouts`, so nothing else changes.

#include <caf/actor_system_config.hpp>
#include <caf/detail/thread_safe_actor_clock.hpp>

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_set>

namespace pgw {

class quiet_clock : public caf::detail::thread_safe_actor_clock {
public:
  using super = caf::detail::thread_safe_actor_clock;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self,
                            caf::atom_value type, uint64_t id) override;

  void set_request_timeout(time_point t, caf::abstract_actor* self,
                           caf::message_id id) override;

  void set_multi_timeout(time_point t, caf::abstract_actor* self,
                         caf::atom_value type, uint64_t id) override;

  void cancel_timeouts(caf::abstract_actor* self) override;

  /// Ended actors whose `cancel_timeouts` went to the dispatch thread.
  uint64_t forwarded() const noexcept {
    return forwarded_.load();
  }

  /// Ended actors that never armed a timeout: nothing sent, no wake.
  uint64_t skipped() const noexcept {
    return skipped_.load();
  }

private:
  void mark(caf::abstract_actor* self);

  std::mutex mtx_;
  std::unordered_set<caf::abstract_actor*> armed_;
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> skipped_{0};
};

/// Makes systems built from `cfg` use CAF's work-sharing scheduler with a
/// `quiet_clock`, waking a worker after the job queue's lock is released
/// rather than under it (`scheduler.max-threads` etc. still apply). Not for the
/// test coordinator: leave `cfg` alone there.
///
/// With `loop`, the scheduler runs one worker, which runs `loop` while it has
/// no job (wake_after_unlock.hpp): give it a loop with work (a work guard)
/// that outlives the system, and handlers that never block.
void use_quiet_clock(caf::actor_system_config& cfg,
                     boost::asio::io_context* loop = nullptr);

/// The quiet clock of `sys`, or null when it runs another scheduler.
quiet_clock* quiet_clock_of(caf::actor_system& sys);

} // namespace pgw
