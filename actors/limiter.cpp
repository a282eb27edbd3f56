#include "actors/limiter.hpp"

#include "actors/backend_call.hpp"
#include "config/support/log.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <type_traits>

namespace pgw {

using namespace detail;

namespace {

using limiter_self = limiter_actor::stateful_pointer<limiter_state>;

/// Quits once an exit came and nothing is pending any more.
void quit_if_drained(limiter_self self) {
  auto& st = self->state;
  if (st.exit_reason && st.pending == 0)
    self->quit(*st.exit_reason);
}

/// Where a step of the governance pair runs: started here when the pair
/// is pipelined (it replies from its own thread), else on the offload pool
/// (its steps block).
std::shared_ptr<io_pool> pair_pool(limiter_self self) {
  auto& st = self->state;
  return st.pair && st.pair->pipelined() ? nullptr : st.offload;
}

/// Counts what a settle (`settled`) or release (`released`) that went
/// through did to this process's permits.
void count_released(limiter_state& st, bool released) {
  ++(released ? st.own_released : st.own_expired);
}

void count_own(limiter_state& st, bool is_release, bool done) {
  if (is_release)
    count_released(st, done);
  else if (done)
    ++st.own_settled;
}

void count_own(limiter_state& st, bool, const std::pair<bool, bool>& done) {
  if (done.first)
    ++st.own_settled;
  count_released(st, done.second);
}

/// Runs `work(now)` (a backend's blocking call, on the offload pool) or
/// `work(now, reply)` (a step of the pair, see `pair_pool`), a settle or
/// release that must happen; when it fails (backend down) it is
/// tried again after `retry_delay` (as a local task, so the change stays
/// pending meanwhile) until it goes through or, once the actor is
/// exiting, until the drain limit passed.
/// `is_release`: a release alone (a settle alone otherwise; settle and
/// release together say which of the two took effect).
template <class Work>
void change(limiter_self self, std::string what, Work work, bool first,
            bool is_release = false) {
  if (first)
    ++self->state.pending;
  auto done = [self, what, work, is_release](auto res) {
        auto& st = self->state;
        auto err = failure_of(res);
        if (err && st.exit_reason && self->clock().now() >= st.drain_until) {
          log::warn(self->name(), "{} dropped at exit: {}", what,
                    describe(err));
          err = caf::error{};
        }
        if (!err) {
          if (res)
            count_own(st, is_release, *res);
          --st.pending;
          quit_if_drained(self);
          return;
        }
        warn_rarely(self, what + " failed, retrying: " + describe(err));
        auto task = std::make_shared<local_task>();
        task->run = [self, what, work, is_release] {
          change(self, what, work, false, is_release);
        };
        self->delayed_send(self, retry_delay, atom::internal_v,
                           std::move(task));
      };
  auto now = now_s(self);
  if constexpr (std::is_invocable_v<Work, double>)
    run(self, self->state.offload, [work, now] { return work(now); },
        std::move(done));
  else
    run_async(self, pair_pool(self),
              [work, now](auto reply) { work(now, std::move(reply)); },
              std::move(done));
}

void settle_release(limiter_self self, const std::string& id,
                    int64_t actual) {
  auto backend = self->state.backend;
  change(
    self, "settle and release of permit " + id,
    [backend, id, actual](double now) {
      return backend->settle_and_release(id, actual, now);
    },
    true);
}

} // namespace

limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload) {
  return governed_limiter(self, std::move(backend), std::move(offload),
                          nullptr, breaker_actor{});
}

limiter_actor::behavior_type
governed_limiter(limiter_actor::stateful_pointer<limiter_state> self,
                 std::shared_ptr<limiter_backend> backend,
                 std::shared_ptr<io_pool> offload, governance_pair_ptr pair,
                 breaker_actor breaker) {
  self->state.backend = std::move(backend);
  self->state.offload = std::move(offload);
  self->state.pair = std::move(pair);
  self->state.breaker = std::move(breaker);
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (!msg.reason)
      return; // a linked actor ended normally: nothing to do
    auto& st = self->state;
    st.exit_reason = msg.reason;
    st.drain_until = self->clock().now() + limiter_drain_limit;
    quit_if_drained(self);
  });
  return {
    [self](atom::acquire, int64_t est) -> caf::result<acquire_result> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      auto rp = self->make_response_promise<acquire_result>();
      run(self, self->state.offload,
          [backend, est, now] { return backend->try_acquire(est, now); },
          [self, rp](caf::expected<acquire_result> res) mutable {
            if (!res) {
              rp.deliver(unavailable(res.error()));
              return;
            }
            if (res->granted)
              ++self->state.own_acquired;
            rp.deliver(std::move(*res));
          });
      return rp;
    },
    [self](atom::settle, const std::string& id, int64_t actual) {
      auto backend = self->state.backend;
      change(
        self, "settle of permit " + id,
        [backend, id, actual](double now) {
          return backend->settle(id, actual, now);
        },
        true);
    },
    [self](atom::release, const std::string& id) {
      auto backend = self->state.backend;
      change(
        self, "release of permit " + id,
        [backend, id](double now) { return backend->release(id, now); },
        true, true);
    },
    [self](atom::settle, const std::string& id, int64_t actual, atom::release) {
      settle_release(self, id, actual);
    },
    [self](atom::settle, const std::string& id, int64_t actual, atom::release,
           uint64_t epoch, outcome kind) {
      auto& st = self->state;
      if (!st.pair) {
        if (st.breaker)
          self->send(st.breaker, atom::record_v, epoch, kind);
        settle_release(self, id, actual);
        return;
      }
      auto pair = st.pair;
      change(
        self, "outcome, settle and release of permit " + id,
        [pair, id, actual, epoch, kind](double now, auto reply) {
          pair->finish_async(epoch, feed_for(kind), id, actual, now,
                             std::move(reply));
        },
        true);
    },
    [self](atom::acquire, int64_t est, atom::enter)
      -> caf::result<breaker_entry, acquire_result> {
      auto pair = self->state.pair;
      if (!pair)
        return make_error(error_code::governance_unavailable,
                          "limiter: no governance pair for a combined "
                          "admission");
      auto rp = self->make_response_promise<breaker_entry, acquire_result>();
      auto now = now_s(self);
      auto deliver = [self, rp](caf::expected<governance_pair::admission>
                                  res) mutable {
        if (res && res->second.granted)
          ++self->state.own_acquired;
        if (res)
          rp.deliver(std::move(res->first), std::move(res->second));
        else
          rp.deliver(unavailable(res.error()));
      };
      run_async(
        self, pair_pool(self),
        [pair, est, now](auto reply) {
          pair->enter_and_acquire_async(est, now, std::move(reply));
        },
        std::move(deliver));
      return rp;
    },
    [self](atom::status) -> caf::result<limiter_status> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      auto rp = self->make_response_promise<limiter_status>();
      run(self, self->state.offload,
          [backend, now] { return backend->status(now); },
          [self, rp](caf::expected<limiter_status> res) mutable {
            if (!res) {
              rp.deliver(unavailable(res.error()));
              return;
            }
            auto& st = self->state;
            res->own_acquired = st.own_acquired;
            res->own_settled = st.own_settled;
            res->own_released = st.own_released;
            res->own_expired = st.own_expired;
            res->own_pending = st.pending;
            rp.deliver(std::move(*res));
          });
      return rp;
    },
    [](atom::internal, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
