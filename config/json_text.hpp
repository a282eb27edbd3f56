#pragma once

/// One JSON writer for everything the project prints, stores or sends:
/// numbers in plain decimal ("381.27", "1", "0.2", "0.00000015"), never the
/// exponent form Boost.JSON 1.81 writes for doubles ("3.8127E2", "2E-1");
/// and a reader for JSON that is passed on, which keeps every number's
/// value as written.

#include <boost/json/error.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <string>
#include <string_view>

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

/// Parses `text` as `boost::json::parse` does (one JSON text, default
/// limits unless `opts`), except that every number with a fraction or an
/// exponent holds the double nearest to its text. Boost.JSON 1.81 reads
/// such a number imprecisely: about a third of 17-digit values come back
/// one unit in the last place off, and large exponents drift further
/// (2.5e229 is read as 2.4999999999999997e229), so a caller's field passed
/// on through its parse and `json_text` would reach the upstream changed.
/// On error, `ec` says why and `consumed` (when given) how far it got.
boost::json::value parse_json(std::string_view text,
                              boost::json::error_code& ec,
                              size_t* consumed = nullptr,
                              const boost::json::parse_options& opts = {});

/// `ms` rounded to whole microseconds (3 decimals), for durations in JSON.
double round_us(double ms);

} // namespace pgw
