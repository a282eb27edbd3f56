#pragma once

/// Structured output: the JSON Schema checks pgw makes instead of
/// valijson's (actors/structured_schema.cpp renames their keywords).
///
/// - `format`: draft 7's date and time formats (RFC 3339 §5.6), in one
///   pass over the string. valijson 1.0 checks them with std::regex, which
///   recurses per character (a 20,000 character answer string overflowed
///   the stack), and reads them loosely (any number of year digits, 29
///   February in every year, `|` as an offset's sign, a leap second at any
///   minute).
/// - `multipleOf`: valijson 1.0 truncates a non-integer answer for an
///   integer divisor (2.5 passed `multipleOf: 1`, 3.5 `multipleOf: 3`;
///   1e300 is undefined behaviour, a float-to-integer overflow) and
///   compares a double remainder with an absolute epsilon (0.3 failed
///   `multipleOf: 0.1`).
/// - `enum`, `const`, `uniqueItems`: draft 7's JSON equality with
///   integers exact (valijson 1.0 compares numbers as doubles), and an
///   error naming the allowed values and the value found (uniqueItems: the
///   repeated item and its first equal, once per repeat).
/// - `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`: exact
///   for integers (valijson 1.0 compares doubles: 9007199254740993 passed
///   `maximum: 9007199254740992`), and the error names the bound and the
///   number found as JSON writes them.
/// - `propertyNames`: valijson 1.0 gives no reason when a key fails; a
///   check of ours beside it names the key and what is wrong with it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace boost::json {
class value;
} // namespace boost::json

namespace re2 {
class RE2;
} // namespace re2

namespace valijson {
class SchemaParser;
} // namespace valijson

namespace pgw {

/// The keyword pgw's copy of a schema gets beside a `propertyNames` whose
/// subschema holds no `$ref`: the same subschema, checked again when the
/// errors are listed, to name the key that failed and why (valijson's own
/// check gives no reason; actors/structured_names.cpp).
constexpr const char* property_names_keyword = "x-pgw-property-names";

/// The keyword pgw's copy of a schema gets beside a `patternProperties`
/// (whose subschemas it holds under keys that match nothing): the patterns
/// matched with RE2, the names of `properties`, and whether there is an
/// `additionalProperties` (actors/structured_pattern_properties.cpp).
constexpr const char* pattern_properties_keyword = "x-pgw-pattern-properties";

/// RE2 memory of one pattern: its program (about 16 bytes an instruction,
/// at most a sixth of this: ~10,900 instructions; `^.{1,500}$` takes
/// 4,501) and its DFA's states (the rest; when they would pass it, RE2
/// starts its cache over or matches without one, no slower than the work
/// bound of `pattern` assumes). RE2's default is 8 MiB.
constexpr int64_t max_pattern_memory = int64_t{1} << 20;

/// `pattern` compiled for RE2 (ECMA-262 `pattern` is a search, as RE2's
/// PartialMatch), or null and why not (`why`, in words for the schema's
/// error: too large, or what RE2 cannot run).
std::shared_ptr<const re2::RE2> compile_pattern(std::string_view text,
                                                std::string* why);

/// The keyword of ours a subschema's `key` (holding `value`) becomes in
/// valijson's copy of the schema, or null when valijson checks it itself:
/// `pattern` (RE2, bounded), `format` (the date and time formats below),
/// `multipleOf`, `type` (below, and draft 7's integer), `enum`, `const`,
/// `uniqueItems` and the four bounds on a number.
const char* renamed_keyword(std::string_view key,
                            const boost::json::value& value);

/// Gives `parser` the builders of the keywords `renamed_keyword` names
/// (the parser owns and deletes them).
void add_checks_of_ours(valijson::SchemaParser& parser);

/// Starts a validation pass on this thread: its strings may take
/// `pattern` matching work up to the answer's bound again.
void start_pattern_budget();

/// What is wrong with `text` as a `format` value, in words a model can act
/// on (they reach re-ask prompts): "date" (full-date, 2026-12-07), "time"
/// (full-time, 16:52:45Z or 16:52:45.5+02:00), "date-time" (the two joined
/// by T), "email", "hostname", "ipv4", "ipv6", "uuid" or "duration" (the
/// formats OpenAI's strict mode names; actors/structured_formats.cpp),
/// "uri", "uri-reference", "iri", "iri-reference", "uri-template",
/// "json-pointer", "relative-json-pointer" and "regex" (draft 7's;
/// actors/structured_uri.cpp), "idn-hostname" and "idn-email"
/// (actors/structured_idn.cpp). nullopt when `text` is one, and for every
/// other format (draft 7 lets a validator ignore a format).
std::optional<std::string> format_problem(std::string_view format,
                                          std::string_view text);

/// True when the number `x` is an integer multiple of `divisor` (> 0).
/// Exact for an integer answer and divisor; for others, the quotient is an
/// integer up to the rounding of the two doubles (relative 1e-15, at least
/// 1e-9): 0.3 is a multiple of 0.1, 0.00751 is not of 0.0001. A quotient
/// past 2^53 is an integer; one that overflows, or a non-finite `x`, is not
/// a multiple.
bool multiple_of(int64_t x, int64_t divisor);
bool multiple_of(double x, double divisor);

} // namespace pgw
