// `--since` parsing and UTC formatting for the telemetry report.

#include "apps/pgw-actor/report/report.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <ctime>

namespace pgw::report {

// -- time -----------------------------------------------------------------------

namespace {

/// Reads exactly `digits` digits at `pos`.
bool read_int(const std::string& s, size_t& pos, size_t digits, int& out) {
  if (pos + digits > s.size())
    return false;
  out = 0;
  for (size_t i = 0; i < digits; ++i) {
    auto ch = s[pos + i];
    if (!std::isdigit(static_cast<unsigned char>(ch)))
      return false;
    out = out * 10 + (ch - '0');
  }
  pos += digits;
  return true;
}

bool expect(const std::string& s, size_t& pos, char ch) {
  if (pos < s.size() && s[pos] == ch) {
    ++pos;
    return true;
  }
  return false;
}

std::optional<double> parse_relative(const std::string& text, double now_ms) {
  if (text.size() < 2)
    return std::nullopt;
  double unit = 0;
  switch (text.back()) {
    case 's':
      unit = 1e3;
      break;
    case 'm':
      unit = 60e3;
      break;
    case 'h':
      unit = 3600e3;
      break;
    case 'd':
      unit = 86400e3;
      break;
    case 'w':
      unit = 7 * 86400e3;
      break;
    default:
      return std::nullopt;
  }
  auto number = text.substr(0, text.size() - 1);
  for (char ch : number)
    if (!std::isdigit(static_cast<unsigned char>(ch)) && ch != '.')
      return std::nullopt;
  char* end = nullptr;
  auto x = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(x) || x < 0)
    return std::nullopt;
  return now_ms - x * unit;
}

std::optional<double> parse_iso(const std::string& s) {
  size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  double fraction = 0;
  if (!read_int(s, pos, 4, year) || !expect(s, pos, '-')
      || !read_int(s, pos, 2, month) || !expect(s, pos, '-')
      || !read_int(s, pos, 2, day))
    return std::nullopt;
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == 't' || s[pos] == ' ')) {
    ++pos;
    if (!read_int(s, pos, 2, hour) || !expect(s, pos, ':')
        || !read_int(s, pos, 2, minute))
      return std::nullopt;
    if (expect(s, pos, ':')) {
      if (!read_int(s, pos, 2, second))
        return std::nullopt;
      if (expect(s, pos, '.')) {
        auto start = pos;
        double scale = 0.1;
        while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
          fraction += (s[pos] - '0') * scale;
          scale /= 10;
          ++pos;
        }
        if (pos == start)
          return std::nullopt;
      }
    }
  }
  int offset_minutes = 0;
  if (pos < s.size()) {
    if (s[pos] == 'Z' || s[pos] == 'z') {
      ++pos;
    } else if (s[pos] == '+' || s[pos] == '-') {
      int sign = s[pos] == '+' ? 1 : -1;
      ++pos;
      int oh = 0, om = 0;
      if (!read_int(s, pos, 2, oh))
        return std::nullopt;
      expect(s, pos, ':');
      if (!read_int(s, pos, 2, om) || oh > 23 || om > 59)
        return std::nullopt;
      offset_minutes = sign * (oh * 60 + om);
    }
  }
  if (pos != s.size())
    return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23
      || minute > 59 || second > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  auto t = ::timegm(&tm);
  // timegm normalizes 2026-02-30 into March: reject dates that moved.
  if (tm.tm_mday != day || tm.tm_mon != month - 1)
    return std::nullopt;
  return (static_cast<double>(t) - offset_minutes * 60.0 + fraction) * 1000.0;
}

} // namespace

std::optional<double> parse_since(const std::string& text, double now_ms) {
  if (text.empty())
    return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(text.front()))
      && !std::isdigit(static_cast<unsigned char>(text.back())))
    if (auto rel = parse_relative(text, now_ms))
      return rel;
  return parse_iso(text);
}

std::string format_utc(double epoch_ms) {
  auto t = static_cast<std::time_t>(std::floor(epoch_ms / 1000.0));
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
}

} // namespace pgw::report
