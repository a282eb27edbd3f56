#include "actors/governance.hpp"

#include "config/log.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>

namespace pgw {

namespace {

template <class Self>
double now_s(Self* self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch())
    .count();
}

/// Backend errors become `governance_unavailable` for the caller.
caf::error unavailable(const caf::error& err) {
  if (code_of(err))
    return err;
  return make_error(error_code::governance_unavailable,
                    "governance backend failed: " + to_string(err));
}

/// Logs at most one warning per 10 s per actor (a backend down for long
/// must not flood the log with every retry).
template <class Self>
void warn_rarely(Self* self, const std::string& text) {
  auto now = self->clock().now();
  auto& last = self->state.last_warning;
  if (last && now - *last < std::chrono::seconds(10))
    return;
  last = now;
  log::warn(self->name(), "{}", text);
}

/// How long a settle/release/record that failed (backend down) waits
/// before it is tried again.
constexpr caf::timespan retry_delay = std::chrono::milliseconds(500);

/// Runs `work` (a blocking backend call) on the offload pool, then `done`
/// with its result inside the actor. Without a pool, both run right here.
template <class Self, class Work, class Done>
void run(Self* self, const std::shared_ptr<io_pool>& pool, Work work,
         Done done) {
  if (!pool) {
    done(work());
    return;
  }
  auto me = caf::actor_cast<caf::actor>(self);
  pool->submit([me, work = std::move(work), done = std::move(done)]() mutable {
    auto res = work();
    auto task = std::make_shared<local_task>();
    task->run = [done = std::move(done), res = std::move(res)]() mutable {
      done(std::move(res));
    };
    caf::anon_send(me, atom::done_v, std::move(task));
  });
}

/// Answers a request with the result of `work`, run like `run` does.
template <class T, class Self, class Work>
caf::typed_response_promise<T> answer(Self* self, Work work) {
  auto rp = self->template make_response_promise<T>();
  run(self, self->state.offload, std::move(work),
      [rp](caf::expected<T> res) mutable {
        if (res)
          rp.deliver(std::move(*res));
        else
          rp.deliver(unavailable(res.error()));
      });
  return rp;
}

caf::error failure_of(const caf::error& err) {
  return err;
}

template <class T>
caf::error failure_of(const caf::expected<T>& res) {
  return res ? caf::error{} : res.error();
}

/// Runs `work`, a change that must happen (settle, release, record); when it
/// fails (the backend is down), warns at most every 10 s and `resend`s the
/// message to itself after a delay.
template <class Self, class Work, class Resend>
void until_done(Self* self, std::string what, Work work, Resend resend) {
  run(self, self->state.offload, std::move(work),
      [self, what = std::move(what), resend](auto res) {
        auto err = failure_of(res);
        if (!err)
          return;
        warn_rarely(self, what + " failed, retrying: " + describe(err));
        resend();
      });
}

using limiter_self = limiter_actor::stateful_pointer<limiter_state>;

/// Quits once an exit came and nothing is pending any more.
void quit_if_drained(limiter_self self) {
  auto& st = self->state;
  if (st.exit_reason && st.pending == 0)
    self->quit(*st.exit_reason);
}

/// Runs `work(now)`, a settle or release that must happen; when it fails
/// (backend down) it is tried again after `retry_delay` (as a local task,
/// so the change stays pending meanwhile) until it goes through or, once
/// the actor is exiting, until the drain limit passed.
template <class Work>
void change(limiter_self self, std::string what, Work work, bool first) {
  if (first)
    ++self->state.pending;
  auto backend_work = [work, now = now_s(self)] { return work(now); };
  run(self, self->state.offload, std::move(backend_work),
      [self, what, work](auto res) {
        auto& st = self->state;
        auto err = failure_of(res);
        if (err && st.exit_reason && self->clock().now() >= st.drain_until) {
          log::warn(self->name(), "{} dropped at exit: {}", what,
                    describe(err));
          err = caf::error{};
        }
        if (!err) {
          --st.pending;
          quit_if_drained(self);
          return;
        }
        warn_rarely(self, what + " failed, retrying: " + describe(err));
        auto task = std::make_shared<local_task>();
        task->run = [self, what, work] { change(self, what, work, false); };
        self->delayed_send(self, retry_delay, atom::done_v, std::move(task));
      });
}

} // namespace

limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload) {
  self->state.backend = std::move(backend);
  self->state.offload = std::move(offload);
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
      return answer<acquire_result>(
        self, [backend, est, now] { return backend->try_acquire(est, now); });
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
        true);
    },
    [self](atom::settle, const std::string& id, int64_t actual, atom::release) {
      auto backend = self->state.backend;
      change(
        self, "settle and release of permit " + id,
        [backend, id, actual](double now) {
          return backend->settle_and_release(id, actual, now);
        },
        true);
    },
    [self](atom::status) -> caf::result<limiter_status> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<limiter_status>(
        self, [backend, now] { return backend->status(now); });
    },
    [](atom::done, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

breaker_actor::behavior_type
breaker(breaker_actor::stateful_pointer<breaker_state> self,
        std::shared_ptr<breaker_backend> backend,
        std::shared_ptr<io_pool> offload) {
  self->state.backend = std::move(backend);
  self->state.offload = std::move(offload);
  return {
    [self](atom::enter) -> caf::result<breaker_entry> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<breaker_entry>(
        self, [backend, now] { return backend->enter(now); });
    },
    [self](atom::record, uint64_t epoch, outcome kind) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "record",
        [backend, epoch, kind, now] {
          return backend->record(epoch, feed_for(kind), now);
        },
        [self, epoch, kind] {
          self->delayed_send(self, retry_delay, atom::record_v, epoch,
                             kind);
        });
    },
    [self](atom::release, uint64_t epoch) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      until_done(
        self, "probe release",
        [backend, epoch, now] { return backend->release_probe(epoch, now); },
        [self, epoch] {
          self->delayed_send(self, retry_delay, atom::release_v, epoch);
        });
    },
    [self](atom::status) -> caf::result<breaker_status> {
      auto backend = self->state.backend;
      auto now = now_s(self);
      return answer<breaker_status>(
        self, [backend, now] { return backend->status(now); });
    },
    [](atom::done, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
