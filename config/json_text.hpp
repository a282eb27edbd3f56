#pragma once

/// One JSON writer for everything the project prints, stores or sends:
/// numbers in plain decimal ("381.27", "1", "0.2", "0.00000015"), never the
/// exponent form Boost.JSON 1.81 writes for doubles ("3.8127E2", "2E-1").

#include <boost/json/value.hpp>

#include <cstddef>
#include <string>

namespace pgw {

/// Shortest plain-decimal text that reads back as `x` ("0.2", "1",
/// "100000000000000000000"); "null" for NaN and infinities (JSON has no
/// such numbers).
std::string plain_number(double x);

/// Room enough for any `plain_number_chars` text (a double's 17 digits
/// and up to 324 zeros).
constexpr size_t plain_number_max = 400;

/// Writes `plain_number(x)` into `buf` (`plain_number_max` bytes) and
/// returns its length: no allocation, for writers of many numbers.
size_t plain_number_chars(double x, char* buf);

/// Compact JSON text of `v`, doubles as `plain_number` writes them.
std::string json_text(const boost::json::value& v);

/// `ms` rounded to whole microseconds (3 decimals), for durations in JSON.
double round_us(double ms);

} // namespace pgw
