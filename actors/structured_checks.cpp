#include "actors/structured_checks.hpp"

#include <algorithm>
#include <cmath>

namespace pgw {

namespace {

/// A cursor over the string being read: each reader takes what it names
/// at the cursor and moves past it, or returns false (the cursor then
/// does not matter: the value is refused).
struct reader {
  std::string_view text;
  size_t at = 0;

  bool done() const {
    return at == text.size();
  }

  bool digit() const {
    return at < text.size() && text[at] >= '0' && text[at] <= '9';
  }

  /// Exactly `n` digits, their value in `out`.
  bool digits(int n, int& out) {
    out = 0;
    for (int i = 0; i < n; ++i) {
      if (!digit())
        return false;
      out = out * 10 + (text[at++] - '0');
    }
    return true;
  }

  /// One of `chars` (a letter matching either case when both are listed).
  bool one_of(std::string_view chars) {
    if (at < text.size() && chars.find(text[at]) != std::string_view::npos) {
      ++at;
      return true;
    }
    return false;
  }
};

bool leap_year(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int days_in_month(int year, int month) {
  static constexpr int days[] = {31, 28, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31};
  return month == 2 && leap_year(year) ? 29 : days[month - 1];
}

/// full-date: date-fullyear "-" date-month "-" date-mday.
bool full_date(reader& r) {
  int year = 0, month = 0, day = 0;
  return r.digits(4, year) && r.one_of("-") && r.digits(2, month)
         && month >= 1 && month <= 12 && r.one_of("-") && r.digits(2, day)
         && day >= 1 && day <= days_in_month(year, month);
}

/// full-time: partial-time time-offset. A leap second (second 60) is the
/// last second of a UTC day: 23:59:60 once the offset is taken off.
bool full_time(reader& r) {
  int hour = 0, minute = 0, second = 0;
  if (!(r.digits(2, hour) && hour <= 23 && r.one_of(":")
        && r.digits(2, minute) && minute <= 59 && r.one_of(":")
        && r.digits(2, second) && second <= 60))
    return false;
  if (r.one_of(".")) {
    if (!r.digit())
      return false;
    while (r.digit())
      ++r.at;
  }
  int offset = 0; // minutes east of UTC
  if (!r.one_of("Zz")) {
    bool west = r.at < r.text.size() && r.text[r.at] == '-';
    int oh = 0, om = 0;
    if (!(r.one_of("+-") && r.digits(2, oh) && oh <= 23 && r.one_of(":")
          && r.digits(2, om) && om <= 59))
      return false;
    offset = (west ? -1 : 1) * (oh * 60 + om);
  }
  if (second == 60) {
    int utc = ((hour * 60 + minute - offset) % 1440 + 1440) % 1440;
    if (utc != 23 * 60 + 59)
      return false;
  }
  return true;
}

} // namespace

std::optional<std::string> format_problem(std::string_view format,
                                          std::string_view text) {
  reader r{text};
  if (format == "date") {
    if (full_date(r) && r.done())
      return std::nullopt;
    return std::string{"String should be a valid date (RFC 3339 full-date: "
                       "YYYY-MM-DD, a day the month has)"};
  }
  if (format == "time") {
    if (full_time(r) && r.done())
      return std::nullopt;
    return std::string{"String should be a valid time (RFC 3339 full-time: "
                       "HH:MM:SS, optional .fraction, then Z or +HH:MM or "
                       "-HH:MM)"};
  }
  if (format == "date-time") {
    if (full_date(r) && r.one_of("Tt") && full_time(r) && r.done())
      return std::nullopt;
    return std::string{"String should be a valid date-time (RFC 3339: "
                       "YYYY-MM-DDTHH:MM:SS, optional .fraction, then Z or "
                       "+HH:MM or -HH:MM)"};
  }
  return std::nullopt;
}

bool multiple_of(int64_t x, int64_t divisor) {
  // divisor > 0 (the meta-schema): no INT64_MIN / -1.
  return divisor > 0 && x % divisor == 0;
}

bool multiple_of(double x, double divisor) {
  if (!std::isfinite(x) || !(divisor > 0))
    return false;
  if (x == 0)
    return true;
  auto q = x / divisor;
  if (!std::isfinite(q))
    return false;
  if (std::fabs(q) >= 9007199254740992.0) // 2^53: every double is whole
    return true;
  auto off = std::fabs(q - std::nearbyint(q));
  return off <= std::max(1e-9, std::fabs(q) * 1e-15);
}

} // namespace pgw
