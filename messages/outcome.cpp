#include "messages/outcome.hpp"

namespace pgw {

const char* to_string(outcome x) {
  switch (x) {
    case outcome::ok:
      return "ok";
    case outcome::request_rejected:
      return "request_rejected";
    case outcome::source_rejected:
      return "source_rejected";
    case outcome::result_invalid:
      return "result_invalid";
    case outcome::source_dead:
      return "source_dead";
    case outcome::transient:
      return "transient";
    case outcome::rate_limited:
      return "rate_limited";
    case outcome::cancelled:
      return "cancelled";
    case outcome::hedge_cancelled:
      return "hedge_cancelled";
  }
  return "unknown";
}

bool upstream_at_fault(const attempt_result& r) {
  return r.kind == outcome::source_rejected
         && (r.reason == reason_response_too_large || r.reason == "redirect");
}

bool local_failure(const attempt_result& r) {
  return r.kind == outcome::source_rejected && r.reason == reason_local_exhausted;
}

} // namespace pgw
