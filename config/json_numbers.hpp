#pragma once

/// Numbers of a JSON text that a parsed Boost.JSON value cannot carry as
/// written. Boost.JSON 1.81 holds an integer literal exactly only inside
/// int64 or uint64 ([-2^63, 2^64)); past that it reads the literal as a
/// double, which rounds it (-9223372036854775809 would be passed on as
/// -9223372036854775808), and a literal beyond a double's range (1e400) as
/// infinity, which JSON cannot write. A literal with a fraction or an
/// exponent (1e20, 2.5) is a double as written: passed on, it keeps its
/// value (the nearest double, as `parse_json` reads it).

#include <optional>
#include <string>
#include <string_view>

namespace pgw {

/// The first number in `text` (valid JSON) that would not be passed on as
/// written: "PATH: number out of range" with PATH as the serve errors
/// name fields ("metadata.ids[1]", "logit_bias.50256"; empty at the top).
/// Nothing when every number is carried as written, or `text` does not
/// parse.
std::optional<std::string> unheld_number(std::string_view text);

} // namespace pgw
