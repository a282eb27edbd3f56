#pragma once

/// Structured output: the JSON Schema `format`s pgw checks (draft 7's date
/// and time formats, RFC 3339 §5.6), in one pass over the string. valijson
/// 1.0 checks them with std::regex, which recurses per character (a 20,000
/// character answer string overflowed the stack), and reads them loosely
/// (any number of year digits, 29 February in every year, `|` as an
/// offset's sign, a leap second at any minute).

#include <optional>
#include <string>
#include <string_view>

namespace pgw {

/// What is wrong with `text` as a `format` value, in words a model can act
/// on (they reach re-ask prompts): "date" (full-date, 2026-12-07), "time"
/// (full-time, 16:52:45Z or 16:52:45.5+02:00) or "date-time" (the two
/// joined by T). nullopt when `text` is one, and for every other format
/// (draft 7 lets a validator ignore a format; valijson ignores the rest).
std::optional<std::string> format_problem(std::string_view format,
                                          std::string_view text);

} // namespace pgw
