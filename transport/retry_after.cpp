#include "transport/retry_after.hpp"

#include "config/support/calendar.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>
#include <vector>

namespace pgw {

namespace {

// -- text helpers -------------------------------------------------------------

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_space(s.back()))
    s.remove_suffix(1);
  return s;
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i]))
      return false;
  return true;
}

// -- numbers ------------------------------------------------------------------

enum class number_kind { finite, infinite, invalid };

struct parsed_number {
  number_kind kind = number_kind::invalid;
  double value = 0;
};

/// Parses a whole decimal number (`2`, `1.5`, `.5`, `1e3`, `-1`, `inf`,
/// `Infinity`, `1e999`) without locale dependence. `nan` and anything with
/// trailing bytes are invalid. Values too large for a double are infinite;
/// values too small are zero.
parsed_number parse_number(std::string_view s) {
  parsed_number result;
  if (s.empty())
    return result;
  bool negative = false;
  if (s.front() == '+' || s.front() == '-') {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (iequals(s, "inf") || iequals(s, "infinity")) {
    result.kind = number_kind::infinite;
    result.value = negative ? -std::numeric_limits<double>::infinity()
                            : std::numeric_limits<double>::infinity();
    return result;
  }
  // Strict grammar: digits [. digits] [e [sign] digits], at least one
  // mantissa digit. Remember the decimal magnitude for out-of-range values.
  size_t i = 0;
  size_t int_digits = 0;
  int64_t first_nonzero = -1; // index among all mantissa digits
  int64_t mantissa_digits = 0;
  while (i < s.size() && is_digit(s[i])) {
    if (s[i] != '0' && first_nonzero < 0)
      first_nonzero = mantissa_digits;
    ++int_digits;
    ++mantissa_digits;
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) {
      if (s[i] != '0' && first_nonzero < 0)
        first_nonzero = mantissa_digits;
      ++mantissa_digits;
      ++i;
    }
  }
  if (mantissa_digits == 0)
    return result;
  int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
      exp_negative = s[i] == '-';
      ++i;
    }
    size_t exp_digits = 0;
    while (i < s.size() && is_digit(s[i])) {
      if (exponent < 1'000'000)
        exponent = exponent * 10 + (s[i] - '0');
      ++exp_digits;
      ++i;
    }
    if (exp_digits == 0)
      return result;
    if (exp_negative)
      exponent = -exponent;
  }
  if (i != s.size())
    return result;
  double value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value,
                                   std::chars_format::general);
  if (ec == std::errc::result_out_of_range) {
    // Decimal exponent of the leading significant digit decides between
    // overflow and underflow.
    auto magnitude = static_cast<int64_t>(int_digits) - 1 - first_nonzero
                     + exponent;
    if (first_nonzero >= 0 && magnitude > 0) {
      result.kind = number_kind::infinite;
      result.value = negative ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity();
    } else {
      result.kind = number_kind::finite;
      result.value = 0;
    }
    return result;
  }
  if (ec != std::errc{} || ptr != s.data() + s.size())
    return result;
  result.kind = number_kind::finite;
  result.value = negative ? -value : value;
  return result;
}

// -- HTTP-date ----------------------------------------------------------------

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// days_from_civil).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/// The Gregorian year of a day count since 1970-01-01.
int64_t year_from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  return yoe + era * 400 + (m <= 2);
}

constexpr std::array<std::string_view, 7> short_days = {
  "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr std::array<std::string_view, 7> long_days = {
  "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
constexpr std::array<std::string_view, 12> months = {
  "Jan", "Feb", "Mar", "Apr", "May", "Jun",
  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

bool is_day_name(std::string_view s) {
  for (auto name : short_days)
    if (iequals(s, name))
      return true;
  for (auto name : long_days)
    if (iequals(s, name))
      return true;
  return false;
}

/// 1..12, or 0 when `s` is no month name.
int month_number(std::string_view s) {
  for (size_t i = 0; i < months.size(); ++i)
    if (iequals(s, months[i]))
      return static_cast<int>(i) + 1;
  return 0;
}

/// Parses between `min_digits` and `max_digits` decimal digits.
bool parse_uint(std::string_view s, size_t min_digits, size_t max_digits,
                int64_t& out) {
  if (s.size() < min_digits || s.size() > max_digits)
    return false;
  int64_t value = 0;
  for (char c : s) {
    if (!is_digit(c))
      return false;
    value = value * 10 + (c - '0');
  }
  out = value;
  return true;
}

struct civil_time {
  int64_t year = 0;
  int64_t month = 0;
  int64_t day = 0;
  int64_t hour = 0;
  int64_t minute = 0;
  int64_t second = 0;
};

/// Parses `hh:mm:ss`.
bool parse_clock(std::string_view s, civil_time& t) {
  return s.size() == 8 && s[2] == ':' && s[5] == ':'
         && parse_uint(s.substr(0, 2), 2, 2, t.hour)
         && parse_uint(s.substr(3, 2), 2, 2, t.minute)
         && parse_uint(s.substr(6, 2), 2, 2, t.second);
}

bool is_gmt(std::string_view s) {
  return iequals(s, "GMT") || iequals(s, "UTC");
}

std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && s[i] == ' ')
      ++i;
    size_t start = i;
    while (i < s.size() && s[i] != ' ')
      ++i;
    if (i > start)
      tokens.push_back(s.substr(start, i - start));
  }
  return tokens;
}

/// Parses an HTTP-date (RFC 9110 §5.6.7) in any of its three forms into
/// seconds since the epoch. `now_year` resolves RFC 850's two-digit years.
bool parse_http_date(std::string_view s, int64_t now_year, int64_t& out) {
  auto tokens = split_spaces(s);
  civil_time t;
  auto strip_comma = [](std::string_view day, std::string_view& name) {
    if (day.empty() || day.back() != ',')
      return false;
    name = day.substr(0, day.size() - 1);
    return true;
  };
  std::string_view day_name;
  if (tokens.size() == 6) {
    // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
    if (!strip_comma(tokens[0], day_name) || !is_day_name(day_name)
        || !parse_uint(tokens[1], 1, 2, t.day)
        || (t.month = month_number(tokens[2])) == 0
        || !parse_uint(tokens[3], 4, 4, t.year) || !parse_clock(tokens[4], t)
        || !is_gmt(tokens[5]))
      return false;
  } else if (tokens.size() == 4) {
    // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
    auto date = tokens[1];
    if (!strip_comma(tokens[0], day_name) || !is_day_name(day_name)
        || date.size() != 9 || date[2] != '-' || date[6] != '-'
        || !parse_uint(date.substr(0, 2), 2, 2, t.day)
        || (t.month = month_number(date.substr(3, 3))) == 0
        || !parse_uint(date.substr(7, 2), 2, 2, t.year)
        || !parse_clock(tokens[2], t) || !is_gmt(tokens[3]))
      return false;
    // RFC 9110: a two-digit year more than 50 years in the future is the
    // most recent past year with the same last two digits.
    t.year += now_year - now_year % 100;
    if (t.year > now_year + 50)
      t.year -= 100;
  } else if (tokens.size() == 5) {
    // asctime: Sun Nov  6 08:49:37 1994
    if (!is_day_name(tokens[0]) || (t.month = month_number(tokens[1])) == 0
        || !parse_uint(tokens[2], 1, 2, t.day) || !parse_clock(tokens[3], t)
        || !parse_uint(tokens[4], 4, 4, t.year))
      return false;
  } else {
    return false;
  }
  if (t.day < 1 || t.day > days_in_month(t.year, static_cast<int>(t.month))
      || t.hour > 23 || t.minute > 59 || t.second > 60)
    return false;
  out = days_from_civil(t.year, t.month, t.day) * 86400 + t.hour * 3600
        + t.minute * 60 + t.second;
  return true;
}

// -- the two headers ----------------------------------------------------------

/// Applies one parsed number (in seconds) to `result`/`seconds`.
void take(parsed_number n, double scale, retry_after_value& result,
          std::optional<double>& seconds) {
  if (n.kind == number_kind::infinite) {
    // A negative infinity is just a negative number: ignored silently.
    if (n.value > 0)
      result.non_finite = true;
  } else if (n.kind == number_kind::finite && n.value >= 0) {
    // `+ 0.0` turns a "-0" into 0.
    seconds = n.value / scale + 0.0;
  }
}

} // namespace

retry_after_value parse_retry_after(const std::string* retry_after,
                                    const std::string* retry_after_ms,
                                    std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  retry_after_value result;
  std::optional<double> from_ms;
  std::optional<double> from_header;
  if (retry_after_ms != nullptr)
    take(parse_number(trim(*retry_after_ms)), 1000.0, result, from_ms);
  if (retry_after != nullptr) {
    auto text = trim(*retry_after);
    auto n = parse_number(text);
    if (n.kind != number_kind::invalid) {
      take(n, 1.0, result, from_header);
    } else if (!text.empty()) {
      auto now_floor = floor<seconds>(now);
      int64_t now_s = now_floor.time_since_epoch().count();
      auto now_days = now_s >= 0 ? now_s / 86400 : (now_s - 86399) / 86400;
      int64_t date = 0;
      if (parse_http_date(text, year_from_days(now_days), date)) {
        // Whole seconds in integers (no overflow for far dates), then the
        // sub-second part of `now`.
        auto delta = static_cast<double>(date - now_s)
                     - duration<double>(now - now_floor).count();
        from_header = delta > 0 ? delta : 0.0;
      }
    }
  }
  if (from_ms)
    result.seconds = from_ms;
  else
    result.seconds = from_header;
  return result;
}

} // namespace pgw
