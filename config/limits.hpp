#pragma once

/// Bounds every number that comes from outside (config, callers, upstreams)
/// is held to, and the saturating conversions that keep arithmetic on them
/// from overflowing (SPEC §12, "Untrusted upstreams").

#include <caf/timespan.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

namespace pgw {

/// The longest duration any key, deadline or cooldown may name: 30 days.
constexpr double max_duration_s = 30.0 * 24 * 3600;

/// The largest token count an upstream may report; beyond it (or negative,
/// or not an integer) the usage is `unavailable`.
constexpr int64_t max_reported_tokens = 1000000000;

/// The most tokens one limiter entry may hold (estimates and settled
/// amounts are clamped to [0, this]): sums over a window stay exact far
/// beyond any real traffic and saturate instead of wrapping.
constexpr int64_t max_entry_tokens = int64_t{1} << 40;

/// `tokens` clamped to [0, max_entry_tokens].
inline int64_t clamp_tokens(int64_t tokens) {
  return tokens < 0 ? 0 : tokens > max_entry_tokens ? max_entry_tokens : tokens;
}

/// Default cap on a whole answer (content, reasoning, tool-call arguments).
constexpr int64_t default_max_response_bytes = 8 * 1024 * 1024;

/// `seconds` as a duration, saturating: NaN and negatives are 0, anything
/// above `max_duration_s` (infinity included) is `max_duration_s`.
template <class Duration = caf::timespan>
Duration saturating_duration(double seconds) {
  if (!(seconds > 0)) // NaN, negative, zero
    return Duration::zero();
  if (seconds > max_duration_s)
    seconds = max_duration_s;
  // Rounded up, so a wait never ends just before what it waits for.
  return std::chrono::ceil<Duration>(std::chrono::duration<double>(seconds));
}

/// `a + b` clamped to [INT64_MIN, INT64_MAX].
inline int64_t saturating_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    return b > 0 ? std::numeric_limits<int64_t>::max()
                 : std::numeric_limits<int64_t>::min();
  return out;
}

/// `a - b` clamped to [INT64_MIN, INT64_MAX].
inline int64_t saturating_sub(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out))
    return b < 0 ? std::numeric_limits<int64_t>::max()
                 : std::numeric_limits<int64_t>::min();
  return out;
}

} // namespace pgw
