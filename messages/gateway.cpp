#include "messages/gateway.hpp"

namespace pgw {

const char* to_string(skip_reason x) {
  switch (x) {
    case skip_reason::cooling:
      return "cooling";
    case skip_reason::circuit_open:
      return "circuit_open";
    case skip_reason::quota:
      return "quota";
  }
  return "unknown";
}

const char* to_string(timer_kind x) {
  switch (x) {
    case timer_kind::stall:
      return "stall";
    case timer_kind::deadline:
      return "deadline";
    case timer_kind::retry:
      return "retry";
    case timer_kind::hedge:
      return "hedge";
  }
  return "unknown";
}

const char* to_string(admission_refusal x) {
  switch (x) {
    case admission_refusal::none:
      return "none";
    case admission_refusal::cooling:
      return "cooling";
    case admission_refusal::circuit_open:
      return "circuit_open";
    case admission_refusal::quota:
      return "quota";
    case admission_refusal::mixed:
      return "mixed";
  }
  return "unknown";
}

} // namespace pgw
