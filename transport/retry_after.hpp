#pragma once

/// Retry-After handling (SPEC §4) as a plain function.

#include <chrono>
#include <optional>
#include <string>

namespace pgw {

/// What a response said about when to come back.
struct retry_after_value {
  /// Seconds to wait (≥ 0), when a usable value was present.
  std::optional<double> seconds;
  /// True when a value was present but infinite (`inf`, `1e999`): ignored,
  /// and the caller logs one warning naming the source (never the header).
  bool non_finite = false;
};

/// Parses `Retry-After` (delta-seconds, possibly fractional, or an HTTP-date
/// in IMF-fixdate, RFC 850 or asctime form, relative to `now`) and
/// `retry-after-ms` (milliseconds). Either pointer may be null (header
/// absent). When both are usable, `retry-after-ms` wins (it is more precise).
/// `nan`, negative numbers, empty or garbage values are ignored silently; an
/// HTTP-date in the past means 0.
retry_after_value parse_retry_after(const std::string* retry_after,
                                    const std::string* retry_after_ms,
                                    std::chrono::system_clock::time_point now);

} // namespace pgw
