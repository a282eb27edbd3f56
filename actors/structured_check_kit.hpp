#pragma once

/// What the checks of pgw's share (actors/structured_checks.cpp,
/// actors/structured_equality.cpp, actors/structured_formats.cpp,
/// actors/structured_names.cpp, actors/structured_uri.cpp):
/// valijson's constraint boilerplate, numbers read exactly, hex digits,
/// URI syntax. Internal to those units; valijson's parser and validator
/// stay in actors/structured_schema.cpp (and, for one key's subschema,
/// actors/structured_names.cpp).

#include <valijson/constraints/concrete_constraints.hpp>
#include <valijson/internal/adapter.hpp>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace boost::json {
class value;
} // namespace boost::json

namespace re2 {
class RE2;
} // namespace re2

namespace valijson {
class SchemaParser;
class Subschema;
} // namespace valijson

namespace pgw {

/// A constraint of ours that valijson applies (a keyword renamed to it):
/// valijson copies it into place and asks its size.
template <class Self>
class check_of_ours : public valijson::constraints::PolyConstraint {
  valijson::constraints::Constraint* cloneInto(void* at) const override {
    return new (at) Self(static_cast<const Self&>(*this));
  }

  size_t sizeOf() const override {
    return sizeof(Self);
  }
};

inline bool is_hex_digit(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

/// Whether `text` is an IPv6 address in RFC 4291 §2.2's text forms
/// (inet_pton's; no zone index). The `ipv6` format and a URI's IP-literal.
bool ipv6(std::string_view text);

/// Calls `fn` with each dot-separated label of `text` (an empty one too),
/// in order, until it returns false; whether every one returned true.
template <class Fn>
bool each_label(std::string_view text, Fn fn) {
  size_t start = 0;
  for (;;) {
    auto dot = text.find('.', start);
    if (!fn(text.substr(start, dot == std::string_view::npos
                                 ? std::string_view::npos
                                 : dot - start)))
      return false;
    if (dot == std::string_view::npos)
      return true;
    start = dot + 1;
  }
}

/// A number of the answer or the schema: its int64 when it is one.
struct exact_number {
  bool whole = false;
  int64_t i = 0;
  double d = 0;
};

/// `v` as a number, or nullopt when it is none (or an integer past int64's
/// range, which valijson's adapter cannot read: pgw makes those doubles
/// before valijson sees them).
std::optional<exact_number> read_number(const valijson::adapters::Adapter& v);

/// As a person writes it: 5, 0.5, 1.8446744073709552e+19 (the shortest
/// text that reads back as the same double).
std::string number_text(const exact_number& n);

/// Where `a` lies from `b`: -1, 0 or 1, exactly (an int64 against a double
/// without rounding). valijson compares doubles: 9007199254740993 passed
/// `maximum: 9007199254740992`.
int compare(const exact_number& a, const exact_number& b);

/// An ECMA-262 `pattern` in RE2's syntax where the two differ (see
/// actors/structured_checks.cpp), or nullopt and why not.
std::optional<std::string> ecma_to_re2(std::string_view text,
                                       std::string* why);

/// Whether `text` is of the reference `format` (uri, uri-reference, iri,
/// iri-reference, uri-template, json-pointer, relative-json-pointer;
/// actors/structured_uri.cpp). True for any other format.
bool uri_format(std::string_view format, std::string_view text);

/// Whether `text` is of the internationalized `format` (idn-hostname,
/// idn-email; actors/structured_idn.cpp). True for any other format.
bool idn_format(std::string_view format, std::string_view text);

/// Whether `text` may be an ECMA-262 regular expression: false only for
/// what both ECMA-262 and RE2 refuse (unbalanced parentheses or brackets,
/// a quantifier with nothing to repeat, a range out of order, a trailing
/// backslash). A string past 64 KiB passes unread.
bool ecma_regex(std::string_view text);

/// The keyword of ours `enum`, `const` or `uniqueItems` becomes, or null
/// (actors/structured_equality.cpp).
const char* equality_keyword(std::string_view key,
                             const boost::json::value& value);

/// Gives `parser` the builders of `equality_keyword`'s keywords.
void add_equality_checks(valijson::SchemaParser& parser);

/// Whether `re` finds a match in `subject` (ECMA-262's `pattern` is a
/// search), within the pattern bounds of actors/structured_checks.cpp:
/// nullopt and why when the subject is too long for this pattern, or the
/// answer's pattern work is spent (`start_pattern_budget`).
std::optional<bool> bounded_match(const re2::RE2& re, std::string_view subject,
                                  std::string* why);

/// Takes `work` (bytes times pattern size) from the answer's pattern work
/// (`start_pattern_budget`), or false and why when too little is left.
bool spend_pattern_work(uint64_t work, std::string* why);

/// The key of the never-matching pattern pgw's copy of a schema holds
/// under `patternProperties`, with `{"allOf": [each pattern's subschema,
/// then additionalProperties' if any]}` for valijson to parse (their
/// `$ref`s resolve where they sit); the check under
/// `pattern_properties_keyword` matches the real patterns and applies them
/// (actors/structured_pattern_properties.cpp).
extern const char* const pattern_placeholder;

/// Gives `parser` the builder of `pattern_properties_keyword`.
void add_pattern_properties_check(valijson::SchemaParser& parser);

/// Hands each `pattern_properties_keyword` check under `root` (a compiled
/// schema) the subschemas valijson parsed for it. Run once, after
/// `populateSchema`, before the schema validates anything.
void link_pattern_properties(const valijson::Subschema& root);

/// Gives `parser` the builder of `property_names_keyword`
/// (actors/structured_names.cpp).
void add_property_names_check(valijson::SchemaParser& parser);

/// True for valijson's lines that only say a part below failed: "Failed
/// to validate item #0 in array.", "... against schema associated with
/// property name 'x'.", "... against child schema #1.", "... against any
/// schemas allowed by anyOf constraint.", "Cannot validate item #2 ...".
bool summary_error(const std::string& message);

/// The location of an object's member `key` below `at` (valijson's error
/// context: `[key]` appended; issues print it as a JSON pointer).
inline std::vector<std::string> member_context(std::vector<std::string> at,
                                               const std::string& key) {
  at.push_back("[" + key + "]");
  return at;
}

} // namespace pgw
