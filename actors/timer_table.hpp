#pragma once

/// Cancellable timers for many actors, kept by one owner actor (the gateway)
/// that wakes itself with a single delayed message for the earliest one.
/// CAF 0.17 cannot cancel a delayed message: a call's stall-window and
/// deadline timers usually never fire, and as delayed messages they would
/// pile up in the actor clock for minutes after each call. Here they are
/// dropped the moment their call ends.

#include <caf/actor_addr.hpp>
#include <caf/actor_clock.hpp>
#include <caf/fwd.hpp>
#include <caf/intrusive_ptr.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace pgw {

class timer_table {
public:
  using time_point = caf::actor_clock::time_point;

  /// The kind of a timer is the tag's top byte; one timer per kind per owner.
  static constexpr uint64_t kind_of(uint64_t tag) {
    return tag >> 56;
  }

  struct fired {
    caf::strong_actor_ptr owner;
    uint64_t tag;
  };

  /// Arms `owner`'s timer of this tag's kind for `when`, replacing an armed
  /// one of the same kind.
  void arm(const caf::strong_actor_ptr& owner, uint64_t tag, time_point when);

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
  struct entry {
    caf::strong_actor_ptr owner;
    uint64_t tag;
  };
  using key = std::pair<time_point, uint64_t>; // (when, sequence number)
  std::map<key, entry> entries_;
  std::unordered_map<caf::actor_addr, std::vector<key>> keys_of_;
  uint64_t seq_ = 0;
};

} // namespace pgw
