#include "actors/selector.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pgw {

selector::selector(kind k, std::vector<source_entry> sources)
  : kind_(k), sources_(std::move(sources)), ewma_(sources_.size(), 1.0) {
  by_priority_.resize(sources_.size());
  std::iota(by_priority_.begin(), by_priority_.end(), size_t{0});
  std::stable_sort(by_priority_.begin(), by_priority_.end(),
                   [this](size_t a, size_t b) {
                     if (sources_[a].priority != sources_[b].priority)
                       return sources_[a].priority < sources_[b].priority;
                     return sources_[a].name < sources_[b].name;
                   });
}

double selector::score(size_t i, int32_t in_flight) const {
  return std::max(ewma_[i], floor) / (1.0 + std::max(in_flight, 0));
}

std::vector<size_t> selector::order(const std::vector<int32_t>& in_flight,
                                    std::mt19937_64& rng) {
  auto n = sources_.size();
  std::vector<size_t> out(n);
  std::iota(out.begin(), out.end(), size_t{0});
  if (n == 0)
    return out;
  switch (kind_) {
    case kind::round_robin: {
      auto start = next_++ % n;
      std::rotate(out.begin(), out.begin() + static_cast<ptrdiff_t>(start),
                  out.end());
      return out;
    }
    case kind::priority:
      return by_priority_;
    case kind::health_aware:
      break;
  }
  auto in_flight_of = [&](size_t i) {
    return i < in_flight.size() ? in_flight[i] : 0;
  };
  std::stable_sort(out.begin(), out.end(), [&](size_t a, size_t b) {
    return score(a, in_flight_of(a)) > score(b, in_flight_of(b));
  });
  if (n >= 2) {
    // Power of two choices: the head is the better of two sources drawn at
    // random (with replacement), so load spreads even when scores are equal,
    // and a source at the score floor still heads 1/n² of the orders — the
    // exploration that lets a recovered source earn its score back.
    std::uniform_int_distribution<size_t> pick{0, n - 1};
    auto a = pick(rng);
    auto b = pick(rng);
    auto head = score(a, in_flight_of(a)) >= score(b, in_flight_of(b)) ? a : b;
    auto pos = std::find(out.begin(), out.end(), head);
    std::rotate(out.begin(), pos, pos + 1);
  }
  return out;
}

void selector::feed(size_t source, outcome x) {
  if (source >= ewma_.size())
    return;
  double sample;
  switch (x) {
    case outcome::ok:
      sample = 1.0;
      break;
    case outcome::transient:
    case outcome::source_dead:
    case outcome::rate_limited:
      sample = 0.0;
      break;
    default:
      return;
  }
  ewma_[source] = alpha * sample + (1.0 - alpha) * ewma_[source];
}

void demote_failed(std::vector<size_t>& order,
                   const std::vector<int32_t>& failures_in_call,
                   const std::vector<bool>& costly_in_call) {
  std::stable_partition(order.begin(), order.end(), [&](size_t i) {
    bool costly = i < costly_in_call.size() && costly_in_call[i];
    bool repeated = i < failures_in_call.size() && failures_in_call[i] >= 2;
    return !costly && !repeated;
  });
}

bool is_costly_failure(const std::string& reason) {
  return reason == "total_timeout" || reason == "ttft_timeout"
         || reason == "idle_timeout" || reason == "connect_timeout";
}

double backoff_delay(int64_t round, double base_s, double max_s, double u01) {
  if (round < 1 || base_s <= 0)
    return 0;
  auto exp = std::min<int64_t>(round - 1, 62);
  auto cap = std::min(max_s, base_s * std::ldexp(1.0, static_cast<int>(exp)));
  return std::max(0.0, u01) * cap;
}

} // namespace pgw
