#include "actors/settlement.hpp"

namespace pgw {

int64_t settle_amount(const attempt_result& res, int64_t est) {
  auto reported = res.prompt_tokens + res.completion_tokens;
  switch (res.kind) {
    case outcome::ok:
    case outcome::result_invalid:
      return res.usage_reported ? reported : est;
    case outcome::request_rejected:
    case outcome::source_rejected:
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
  return request_started ? est : 0;
}

} // namespace pgw
