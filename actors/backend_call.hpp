#pragma once

/// What the `limiter` and `breaker` actors share: running a (possibly
/// blocking) backend call off CAF's threads and answering with its result,
/// retrying a change that must happen, and warning rarely while a backend
/// is down. Internal to actors/ (the limiter and breaker actors; admission
/// maps backend errors with `unavailable`).

#include "config/support/log.hpp"
#include "messages/errors.hpp"
#include "messages/governance.hpp"
#include "config/support/io_pool.hpp"

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/message.hpp>
#include <caf/message_id.hpp>
#include <caf/send.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace pgw::detail {

template <class Self>
double now_s(Self* self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch())
    .count();
}

/// Backend errors become `governance_unavailable` for the caller.
inline caf::error unavailable(const caf::error& err) {
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
inline constexpr caf::timespan retry_delay = std::chrono::milliseconds(500);

/// Hands `res` to `done` inside the actor `me` (from a thread of a pool
/// or of a backend). The message, not this thread, holds the last
/// reference to the actor: an actor whose other handles are gone must not
/// be destroyed here, or its state would destroy the pool (or backend)
/// from one of its own threads (a join of itself: a deadlock at shutdown).
template <class Done, class Res>
void deliver_to(caf::actor me, Done done, Res res) {
  auto* receiver = caf::actor_cast<caf::abstract_actor*>(me);
  auto task = std::make_shared<local_task>();
  task->run = [done = std::move(done), res = std::move(res),
               keep = std::move(me)]() mutable { done(std::move(res)); };
  receiver->enqueue(nullptr, caf::make_message_id(),
                    caf::make_message(atom::internal_v, std::move(task)),
                    nullptr);
}

/// Runs `work` (a blocking backend call, a structured check) on `pool` (an
/// `io_pool`, a `check_runner`: anything with `submit`), then `done` with
/// its result inside the actor. Without a pool, both run right here.
template <class Self, class Pool, class Work, class Done>
void run(Self* self, const std::shared_ptr<Pool>& pool, Work work,
         Done done) {
  if (!pool) {
    done(work());
    return;
  }
  auto me = caf::actor_cast<caf::actor>(self);
  pool->submit([me = std::move(me), work = std::move(work),
                done = std::move(done)]() mutable {
    deliver_to(std::move(me), std::move(done), work());
  });
}

/// Like `run` for a step in the form `start(reply)`, whose result goes to
/// `reply` once, from any thread; `done` then runs inside the actor. A
/// backend that does not block (a pipelined one) is started right here
/// (`pool` null) and replies from its own thread; one whose step blocks is
/// started on `pool`.
template <class Self, class Start, class Done>
void run_async(Self* self, const std::shared_ptr<io_pool>& pool, Start start,
               Done done) {
  auto me = caf::actor_cast<caf::actor>(self);
  auto reply = [me = std::move(me), done = std::move(done)](auto res) mutable {
    deliver_to(std::move(me), std::move(done), std::move(res));
  };
  if (!pool)
    return start(std::move(reply));
  pool->submit([start = std::move(start), reply = std::move(reply)]() mutable {
    start(std::move(reply));
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

inline caf::error failure_of(const caf::error& err) {
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

} // namespace pgw::detail
