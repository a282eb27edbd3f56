#include "actors/settlement.hpp"

#include "config/limits.hpp"

#include <algorithm>

namespace pgw {

int64_t settle_amount(const attempt_result& res, int64_t est) {
  est = std::max<int64_t>(est, 0);
  // The decoder accepts only counts in [0, 10^9]; anything else that got
  // here (a fake, a future decoder) is unavailable usage, never a wrap.
  auto reported = saturating_add(res.prompt_tokens, res.completion_tokens);
  bool usable = res.usage_reported && res.prompt_tokens >= 0
                && res.completion_tokens >= 0
                && reported <= max_reported_tokens;
  switch (res.kind) {
    case outcome::ok:
    case outcome::result_invalid:
      return usable ? reported : est;
    case outcome::source_rejected:
      // An answer cut for its size did generate tokens.
      return res.reason == reason_response_too_large ? est : 0;
    case outcome::request_rejected:
    case outcome::source_dead:
    case outcome::rate_limited:
      return 0;
    case outcome::transient:
      return res.upstream_reached ? est : 0;
    case outcome::cancelled:
    case outcome::hedge_cancelled:
      return est;
  }
  return est;
}

int64_t settle_cancelled(bool request_started, int64_t est) {
  return request_started ? std::max<int64_t>(est, 0) : 0;
}

} // namespace pgw
