#include "actors/settlement.hpp"

#include "config/limits.hpp"

#include <algorithm>

namespace pgw {

int64_t settle_amount(const attempt_result& res, int64_t est) {
  est = std::max<int64_t>(est, 0);
  // The decoder accepts only counts in [0, 10^9]; anything else that got
  // here (a fake, a future decoder) is unavailable usage, never a wrap.
  auto reported = saturating_add(res.prompt_tokens, res.completion_tokens);
  bool usable = usage_usable(res);
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

bool usage_usable(const attempt_result& res) {
  return res.usage_reported && res.prompt_tokens >= 0
         && res.completion_tokens >= 0
         && saturating_add(res.prompt_tokens, res.completion_tokens)
              <= max_reported_tokens;
}

std::optional<spent_work> settled_work(const attempt_result* res,
                                       int64_t est) {
  spent_work w;
  if (res != nullptr && usage_usable(*res)) {
    w.prompt_tokens = res->prompt_tokens;
    w.completion_tokens = res->completion_tokens;
    return w;
  }
  w.estimated_tokens = res != nullptr ? settle_amount(*res, est)
                                      : settle_cancelled(true, est);
  if (w.estimated_tokens == 0)
    return std::nullopt;
  return w;
}

int64_t settle_cancelled(bool request_started, int64_t est) {
  return request_started ? std::max<int64_t>(est, 0) : 0;
}

} // namespace pgw
