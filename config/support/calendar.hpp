#pragma once

/// The proleptic Gregorian calendar's month lengths, for the date readers
/// (Retry-After's HTTP dates, structured output's RFC 3339 formats).

#include <cstdint>

namespace pgw {

inline bool is_leap_year(int64_t year) {
  return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/// Days of `month` (1..12) in `year`.
inline int days_in_month(int64_t year, int month) {
  static constexpr int days[] = {31, 28, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap_year(year) ? 29 : days[month - 1];
}

} // namespace pgw
