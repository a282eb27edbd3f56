#include "messages/cache.hpp"

namespace pgw {

const char* to_string(cache_verdict_kind x) {
  switch (x) {
    case cache_verdict_kind::hit:
      return "hit";
    case cache_verdict_kind::lead:
      return "lead";
    case cache_verdict_kind::pass:
      return "pass";
  }
  return "?";
}

} // namespace pgw
