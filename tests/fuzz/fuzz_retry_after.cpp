// libFuzzer target: Retry-After and retry-after-ms parsing (SPEC §4) on
// header values an upstream sends. Properties: a value, when there is one, is
// finite and >= 0; no header gives no value; the result
// depends only on the bytes (parsing twice agrees).

#include "transport/retry_after.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1)
    return 0;
  // First byte: which headers are present; the rest, split at the first
  // '\n', the Retry-After and the retry-after-ms values.
  auto mode = data[0];
  std::string text{reinterpret_cast<const char*>(data) + 1, size - 1};
  auto nl = text.find('\n');
  std::string ra = text.substr(0, nl);
  std::string ms = nl == std::string::npos ? std::string{} : text.substr(nl + 1);
  const std::string* ra_ptr = (mode & 1) ? &ra : nullptr;
  const std::string* ms_ptr = (mode & 2) ? &ms : nullptr;
  // A fixed "now" (2026-11-30T00:00:00Z) keeps runs reproducible.
  auto now = std::chrono::system_clock::time_point{
    std::chrono::seconds{1796083200}};
  auto a = pgw::parse_retry_after(ra_ptr, ms_ptr, now);
  auto b = pgw::parse_retry_after(ra_ptr, ms_ptr, now);
  if (a.seconds) {
    if (!std::isfinite(*a.seconds) || *a.seconds < 0)
      std::abort(); // an unusable wait leaked out
  }
  if (a.seconds.has_value() != b.seconds.has_value()
      || (a.seconds && *a.seconds != *b.seconds) || a.non_finite != b.non_finite)
    std::abort();
  if (!ra_ptr && !ms_ptr && (a.seconds || a.non_finite))
    std::abort(); // no header, no value
  return 0;
}
