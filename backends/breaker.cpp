#include "backends/breaker.hpp"

#include <algorithm>

namespace pgw {

breaker_backend::~breaker_backend() = default;

int64_t effective_threshold(int64_t threshold,
                            std::optional<int64_t> max_concurrency) {
  if (!max_concurrency)
    return threshold;
  return std::max(threshold, 2 * *max_concurrency);
}

breaker_feed feed_for(outcome x) {
  switch (x) {
    case outcome::ok:
      return breaker_feed::success;
    case outcome::result_invalid:
      return breaker_feed::success_no_count;
    case outcome::transient:
      return breaker_feed::failure;
    case outcome::source_dead:
      return breaker_feed::force_open;
    case outcome::request_rejected:
    case outcome::source_rejected:
    case outcome::rate_limited:
    case outcome::cancelled:
    case outcome::hedge_cancelled:
      return breaker_feed::none;
  }
  return breaker_feed::none;
}

} // namespace pgw
