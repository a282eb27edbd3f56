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

/// Retry delays for a settle/release/record that failed (backend down).
caf::timespan retry_delay(int attempt) {
  auto ms = std::min(5000, 250 << std::min(attempt, 5));
  return std::chrono::milliseconds(ms);
}

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

} // namespace

limiter_actor::behavior_type
limiter(limiter_actor::stateful_pointer<limiter_state> self,
        std::shared_ptr<limiter_backend> backend,
        std::shared_ptr<io_pool> offload) {
  self->state.backend = std::move(backend);
  self->state.offload = std::move(offload);
  // A failed settle/release is tried again until the backend takes it.
  auto settle_op = [self](const std::string& id, int64_t actual, int tries) {
    auto backend = self->state.backend;
    auto now = now_s(self);
    run(
      self, self->state.offload,
      [backend, id, actual, now] { return backend->settle(id, actual, now); },
      [self, id, actual, tries](caf::expected<bool> res) {
        if (res)
          return;
        warn_rarely(self, "settle of permit " + id
                            + " failed, retrying: " + describe(res.error()));
        self->delayed_send(self, retry_delay(tries), atom::settle_v, id,
                           actual);
      });
  };
  auto release_op = [self](const std::string& id, int tries) {
    auto backend = self->state.backend;
    auto now = now_s(self);
    run(
      self, self->state.offload,
      [backend, id, now] { return backend->release(id, now); },
      [self, id, tries](caf::expected<bool> res) {
        if (res)
          return;
        warn_rarely(self, "release of permit " + id
                            + " failed, retrying: " + describe(res.error()));
        self->delayed_send(self, retry_delay(tries), atom::release_v, id);
      });
  };
  return {
    [self](atom::acquire, int64_t est) -> caf::result<acquire_result> {
      auto rp = self->make_response_promise<acquire_result>();
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload,
        [backend, est, now] { return backend->try_acquire(est, now); },
        [rp](caf::expected<acquire_result> res) mutable {
          if (res)
            rp.deliver(std::move(*res));
          else
            rp.deliver(unavailable(res.error()));
        });
      return rp;
    },
    [settle_op](atom::settle, const std::string& id, int64_t actual) {
      settle_op(id, actual, 0);
    },
    [release_op](atom::release, const std::string& id) { release_op(id, 0); },
    [self](atom::settle, const std::string& id, int64_t actual, atom::release) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload,
        [backend, id, actual, now] {
          return backend->settle_and_release(id, actual, now);
        },
        [self, id, actual](caf::expected<std::pair<bool, bool>> res) {
          if (res)
            return;
          warn_rarely(self, "settle and release of permit " + id
                              + " failed, retrying: " + describe(res.error()));
          self->delayed_send(self, retry_delay(1), atom::settle_v, id, actual,
                             atom::release_v);
        });
    },
    [self](atom::status) -> caf::result<limiter_status> {
      auto rp = self->make_response_promise<limiter_status>();
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload, [backend, now] { return backend->status(now); },
        [rp](caf::expected<limiter_status> res) mutable {
          if (res)
            rp.deliver(std::move(*res));
          else
            rp.deliver(unavailable(res.error()));
        });
      return rp;
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
      auto rp = self->make_response_promise<breaker_entry>();
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload, [backend, now] { return backend->enter(now); },
        [rp](caf::expected<breaker_entry> res) mutable {
          if (res)
            rp.deliver(std::move(*res));
          else
            rp.deliver(unavailable(res.error()));
        });
      return rp;
    },
    [self](atom::record, uint64_t epoch, outcome kind) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload,
        [backend, epoch, kind, now] {
          return backend->record(epoch, feed_for(kind), now);
        },
        [self, epoch, kind](caf::error err) {
          if (!err)
            return;
          warn_rarely(self, "record failed, retrying: " + describe(err));
          self->delayed_send(self, retry_delay(1), atom::record_v, epoch,
                             kind);
        });
    },
    [self](atom::release, uint64_t epoch) {
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload,
        [backend, epoch, now] { return backend->release_probe(epoch, now); },
        [self, epoch](caf::error err) {
          if (!err)
            return;
          warn_rarely(self, "probe release failed, retrying: " + describe(err));
          self->delayed_send(self, retry_delay(1), atom::release_v, epoch);
        });
    },
    [self](atom::status) -> caf::result<breaker_status> {
      auto rp = self->make_response_promise<breaker_status>();
      auto backend = self->state.backend;
      auto now = now_s(self);
      run(
        self, self->state.offload, [backend, now] { return backend->status(now); },
        [rp](caf::expected<breaker_status> res) mutable {
          if (res)
            rp.deliver(std::move(*res));
          else
            rp.deliver(unavailable(res.error()));
        });
      return rp;
    },
    [](atom::done, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
