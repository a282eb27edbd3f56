#include "actors/timer_table.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>

#include <algorithm>

namespace pgw {

void timer_table::arm(const caf::strong_actor_ptr& owner, timer_kind kind,
                      uint64_t id, time_point when) {
  key k{when, ++seq_};
  entries_.emplace(k, fired{owner, kind, id});
  keys_of_[caf::actor_cast<caf::actor_addr>(owner)].push_back(k);
}

void timer_table::drop(const caf::actor_addr& owner) {
  auto i = keys_of_.find(owner);
  if (i == keys_of_.end())
    return;
  for (auto& k : i->second)
    entries_.erase(k);
  keys_of_.erase(i);
}

std::vector<timer_table::fired> timer_table::take_due(time_point now) {
  std::vector<fired> out;
  while (!entries_.empty() && entries_.begin()->first.first <= now) {
    auto node = entries_.extract(entries_.begin());
    auto addr = caf::actor_cast<caf::actor_addr>(node.mapped().owner);
    if (auto i = keys_of_.find(addr); i != keys_of_.end()) {
      auto& keys = i->second;
      keys.erase(std::remove(keys.begin(), keys.end(), node.key()), keys.end());
      if (keys.empty())
        keys_of_.erase(i);
    }
    out.push_back(std::move(node.mapped()));
  }
  return out;
}

std::optional<timer_table::time_point> timer_table::next() const {
  if (entries_.empty())
    return std::nullopt;
  return entries_.begin()->first.first;
}

} // namespace pgw
