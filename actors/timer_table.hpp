#pragma once

/// The one path for a call's timers (chat, embedding and OCR calls alike):
/// the call asks its gateway, `(atom::timer, kind, id, delay)`, and gets
/// `(atom::timer, kind, id)` back when it is due. The gateway keeps them in
/// this table and wakes itself with a single delayed message for the
/// earliest one.
///
/// Why this path and not `delayed_send` (STACK.md, CAF 0.17.6): a delayed
/// message cannot be cancelled, and each one is a push to the actor clock's
/// dispatch thread (a futex wake). A call's stall-window, deadline and
/// hedge timers usually never fire: as delayed messages they would pile up
/// in the clock for minutes after each call and wake its thread once per
/// timer. Here they are dropped the moment their call ends, and a new timer
/// later than the next tick costs the clock nothing. Retry waits take the
/// same path so that each call actor has one timer mechanism.

#include "pgw/messages/gateway.hpp"

#include <caf/actor_addr.hpp>
#include <caf/actor_clock.hpp>
#include <caf/fwd.hpp>
#include <caf/intrusive_ptr.hpp>
#include <caf/timespan.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace pgw {

class timer_table {
public:
  using time_point = caf::actor_clock::time_point;

  struct fired {
    caf::strong_actor_ptr owner;
    timer_kind kind;
    uint64_t id;
  };

  /// Arms a timer of `owner` for `when`. Timers add up, like delayed
  /// messages: an owner tells a stale one by its id (round, generation).
  void arm(const caf::strong_actor_ptr& owner, timer_kind kind, uint64_t id,
           time_point when);

  /// Drops every timer of `owner`.
  void drop(const caf::actor_addr& owner);

  /// Removes and returns every timer due at `now`, earliest first.
  std::vector<fired> take_due(time_point now);

  /// The earliest armed time.
  std::optional<time_point> next() const;

  size_t size() const {
    return entries_.size();
  }

private:
  using key = std::pair<time_point, uint64_t>; // (when, sequence number)
  std::map<key, fired> entries_;
  std::unordered_map<caf::actor_addr, std::vector<key>> keys_of_;
  uint64_t seq_ = 0;
};

/// Arms a timer of the call `self` at its gateway (`self->state.args.gateway`).
template <class Self>
void arm_timer(Self self, timer_kind kind, uint64_t id, caf::timespan in) {
  self->send(self->state.args.gateway, atom::timer_v, kind, id, in);
}

} // namespace pgw
