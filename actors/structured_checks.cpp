// The checks pgw makes instead of valijson's: valijson constraints of ours
// (PolyConstraint), given to the parser under renamed keywords — pattern
// (RE2, from ECMA-262's syntax), format (actors/structured_formats.cpp,
// structured_uri.cpp and structured_idn.cpp read the values), multipleOf,
// type and the bounds on a number here; enum, const and uniqueItems in
// actors/structured_equality.cpp; patternProperties in
// actors/structured_pattern_properties.cpp; and, beside valijson's own,
// propertyNames with its reasons in actors/structured_names.cpp.

#include "actors/structured_checks.hpp"

#include "actors/structured_check_kit.hpp"

// As in actors/structured_schema.cpp: valijson throws rather than aborts.
#if !VALIJSON_USE_EXCEPTIONS
#error "valijson must be compiled with VALIJSON_USE_EXCEPTIONS=1"
#endif

#include <boost/json.hpp>
#include <fmt/format.h>
#include <re2/re2.h>
#include <valijson/constraint_builder.hpp>
#include <valijson/constraints/concrete_constraints.hpp>
#include <valijson/internal/adapter.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pgw {

namespace {

/// Longest string (value or key) always checked against a `pattern`; a
/// longer one is checked while its length times the pattern's RE2 program
/// size stays within `max_pattern_work`, and all of an answer's strings
/// while the sum stays within `max_answer_pattern_work`. RE2 is linear in
/// the subject, but not cheap per instruction when a pattern defeats its
/// DFA: `(?:[ab]?){800}(?:[ab]){800}c` (2,405 instructions) took 14.6 µs
/// per byte, 6 ns per byte and instruction (Release, this VM). So one
/// string's match is bounded to about 0.1 s, one answer's to about 0.8 s,
/// whatever the caller's patterns; a plain `^[a-z]+$` still checks
/// megabytes.
constexpr size_t max_pattern_subject = 2048;
constexpr uint64_t max_pattern_work = uint64_t{1} << 24;
constexpr uint64_t max_answer_pattern_work = uint64_t{1} << 27;

/// Pattern work charged per byte of a string checked as `format: regex`
/// (RE2 compiles it: 22 ms for 64 KiB of "(", ~56 units of ~6 ns).
constexpr uint64_t regex_format_cost = 64;

/// Pattern work left to the check running on this thread
/// (`start_pattern_budget` before each pass; compiled schemas are shared
/// between threads).
thread_local uint64_t pattern_work_left = max_answer_pattern_work;

// -- `pattern` in linear time ---------------------------------------------------

/// What `pattern` is renamed to before valijson parses a schema. valijson
/// 1.0 matches `pattern` with std::regex, a backtracking matcher: a
/// caller's pattern such as `^(a+)+$` takes exponential time on a model's
/// answer (26 characters: 6 s; the answers it checks run to 2048), inside
/// the call's actor, which no deadline interrupts. Renamed, the keyword is
/// a constraint of ours that matches with RE2, whose time is linear in the
/// subject.
constexpr const char* linear_pattern_keyword = "x-pgw-pattern";

class linear_pattern final : public check_of_ours<linear_pattern> {
public:
  explicit linear_pattern(std::shared_ptr<const RE2> re) : re_(std::move(re)) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isString())
      return true;
    std::string why;
    auto found = bounded_match(*re_, target.asString(), &why);
    if (found.value_or(false))
      return true;
    if (results != nullptr)
      results->pushError(context, found ? "Failed to match regex specified "
                                          "by 'pattern' constraint."
                                        : why);
    return false;
  }

private:
  std::shared_ptr<const RE2> re_;
};

class linear_pattern_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    std::string text;
    std::string why;
    if (!value.asString(text))
      throw std::runtime_error("pattern: must be a string");
    auto re = compile_pattern(text, &why);
    if (!re)
      throw std::runtime_error("pattern: " + why);
    return new linear_pattern(std::move(re));
  }
};

/// What `format` is renamed to before valijson parses a schema: valijson
/// 1.0 checks the date and time formats with std::regex (see the header);
/// renamed, the keyword is a constraint of ours that reads them in one
/// pass.
constexpr const char* linear_format_keyword = "x-pgw-format";

class linear_format final : public check_of_ours<linear_format> {
public:
  explicit linear_format(std::string format) : format_(std::move(format)) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    // Draft 7: a format constrains strings only.
    if (!target.isString())
      return true;
    auto text = target.asString();
    // `regex` compiles the string with RE2 (about 340 ns a byte, some 56
    // units of the pattern work): charged, so that an answer of many long
    // regex strings is bounded as its patterns are.
    std::string why;
    if (format_ == "regex"
        && !spend_pattern_work(regex_format_cost * std::max<size_t>(text.size(), 1),
                               &why)) {
      if (results != nullptr)
        results->pushError(context, why);
      return false;
    }
    auto problem = format_problem(format_, text);
    if (problem && results != nullptr)
      results->pushError(context, *problem);
    return !problem;
  }

private:
  std::string format_;
};

class linear_format_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    std::string format;
    if (!value.asString(format))
      throw std::runtime_error("format: must be a string");
    return new linear_format(std::move(format));
  }
};

/// What `multipleOf` is renamed to (see the header).
constexpr const char* multiple_of_keyword = "x-pgw-multipleOf";

class multiple_of_check final : public check_of_ours<multiple_of_check> {
public:
  /// `divisor` > 0; exact when the schema wrote an integer.
  explicit multiple_of_check(exact_number divisor) : divisor_(divisor) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isNumber())
      return true;
    auto x = read_number(target);
    bool ok = x
              && (x->whole && divisor_.whole ? multiple_of(x->i, divisor_.i)
                                             : multiple_of(x->d, divisor_.d));
    if (!ok && results != nullptr)
      results->pushError(context, "Value should be a multiple of "
                                    + number_text(divisor_));
    return ok;
  }

private:
  exact_number divisor_;
};

class multiple_of_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    auto divisor = read_number(value);
    if (!divisor || !(divisor->d > 0))
      throw std::runtime_error("multipleOf: must be a number above 0 that pgw "
                               "can read");
    return new multiple_of_check(*divisor);
  }
};

/// The bounds on a number, renamed: valijson 1.0 compares them as doubles
/// and words them with printf's %f ("Expected number less than or equal to
/// 18446744073709551616.000000").
struct bound_keyword {
  const char* key;
  const char* ours;
  /// The answer passes when compare(answer, bound) is one of these.
  bool below, equal, above;
  const char* words;
};

constexpr bound_keyword bound_keywords[] = {
  {"minimum", "x-pgw-minimum", false, true, true, "greater than or equal to"},
  {"maximum", "x-pgw-maximum", true, true, false, "less than or equal to"},
  {"exclusiveMinimum", "x-pgw-exclusiveMinimum", false, false, true,
   "greater than"},
  {"exclusiveMaximum", "x-pgw-exclusiveMaximum", true, false, false,
   "less than"},
};

class bound_check final : public check_of_ours<bound_check> {
public:
  bound_check(const bound_keyword& kind, exact_number bound)
    : kind_(&kind), bound_(bound) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isNumber())
      return true;
    auto x = read_number(target);
    if (!x)
      return true;
    auto c = compare(*x, bound_);
    if (c < 0 ? kind_->below : c == 0 ? kind_->equal : kind_->above)
      return true;
    if (results != nullptr)
      results->pushError(context, fmt::format("Expected a number {} {}, "
                                              "found {}.",
                                              kind_->words,
                                              number_text(bound_),
                                              number_text(*x)));
    return false;
  }

private:
  const bound_keyword* kind_;
  exact_number bound_;
};

class bound_builder final : public valijson::ConstraintBuilder {
public:
  explicit bound_builder(const bound_keyword& kind) : kind_(kind) {
  }

  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    auto bound = read_number(value);
    if (!bound)
      throw std::runtime_error(std::string(kind_.key)
                               + ": must be a number pgw can read");
    return new bound_check(kind_, *bound);
  }

private:
  const bound_keyword& kind_;
};

/// What `type` is renamed to. valijson 1.0 takes "integer" for an int64
/// alone: an answer's 5.0 or 1e3 (draft 7: a number with a zero
/// fractional part is an integer) and an integer past int64's range
/// (18446744073709551615, read as uint64) were "Value type not permitted".
constexpr const char* type_keyword = "x-pgw-type";

/// Draft 7's simple types, as bits.
enum type_bit : unsigned {
  type_null = 1,
  type_boolean = 2,
  type_object = 4,
  type_array = 8,
  type_string = 16,
  type_number = 32,
  type_integer = 64,
};

constexpr std::pair<const char*, unsigned> type_names[] = {
  {"null", type_null},     {"boolean", type_boolean}, {"object", type_object},
  {"array", type_array},   {"string", type_string},   {"number", type_number},
  {"integer", type_integer},
};

/// The type of an answer value: integer for any whole number.
unsigned type_of(const valijson::adapters::Adapter& v) {
  if (v.isNull())
    return type_null;
  if (v.isBool())
    return type_boolean;
  if (v.isObject())
    return type_object;
  if (v.isArray())
    return type_array;
  if (v.isString())
    return type_string;
  double d = 0;
  if (v.isDouble() && v.asDouble(d))
    return std::isfinite(d) && d == std::trunc(d) ? type_integer : type_number;
  return type_integer; // int64, or uint64 past int64's range
}

class type_check final : public check_of_ours<type_check> {
public:
  explicit type_check(unsigned allowed) : allowed_(allowed) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    auto is = type_of(target);
    // An integer is a number too.
    if ((allowed_ & is) != 0
        || (is == type_integer && (allowed_ & type_number) != 0))
      return true;
    if (results != nullptr) {
      std::string expected, found;
      for (auto& [name, bit] : type_names) {
        if ((allowed_ & bit) != 0)
          expected += (expected.empty() ? "" : " or ") + std::string(name);
        if (bit == is)
          found = name;
      }
      results->pushError(context, "Value type not permitted by 'type' "
                                  "constraint: expected "
                                    + expected + ", found " + found + ".");
    }
    return false;
  }

private:
  unsigned allowed_;
};

class type_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    unsigned allowed = 0;
    auto add = [&allowed](const std::string& name) {
      for (auto& [known, bit] : type_names)
        if (name == known)
          allowed |= bit;
    };
    std::string one;
    if (value.asString(one)) {
      add(one);
    } else if (value.isArray()) {
      value.applyToArray([&](const valijson::adapters::Adapter& item) {
        std::string name;
        if (item.asString(name))
          add(name);
        return true;
      });
    }
    // The meta-schema let through only names of draft 7's types.
    return new type_check(allowed);
  }
};

/// ECMA-262's white space and line terminators (`\s`), as the items of an
/// RE2 class. RE2's `\s` is [\t\n\f\r ] alone.
constexpr const char* ecma_space =
  "\\t\\n\\v\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
  "\\x{202f}\\x{205f}\\x{3000}\\x{feff}";

/// The code point of `\uXXXX` at `at` (four hex digits after "\u"), or -1.
long utf16_unit(std::string_view text, size_t at) {
  if (at + 6 > text.size() || text[at] != '\\' || text[at + 1] != 'u')
    return -1;
  for (size_t k = at + 2; k < at + 6; ++k)
    if (!is_hex_digit(text[k]))
      return -1;
  return std::stol(std::string(text.substr(at + 2, 4)), nullptr, 16);
}

} // namespace

/// An ECMA-262 `pattern` (JSON Schema's dialect) in RE2's syntax, where the
/// two differ and RE2 can say the same: `\uXXXX` (surrogate pairs joined)
/// and `\u{X}` become `\x{X}` (`^[\u4e00-\u9fa5]+$` was refused), named
/// groups `(?<name>` become `(?P<name>`, `\cJ` becomes `\x{a}`,
/// `\s` and `\S` take ECMA's white space, and `[^]` / `[]` become any /
/// no character. Everything else is passed as written (RE2 refuses what it
/// cannot run: lookaround, backreferences). nullopt and why for a lone
/// surrogate, which no UTF-8 string holds.
std::optional<std::string> ecma_to_re2(std::string_view text,
                                       std::string* why) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      char d = text[i + 1];
      if (d == 'u' && i + 2 < text.size() && text[i + 2] == '{') {
        auto close = text.find('}', i + 3);
        if (close != std::string_view::npos && close > i + 3) {
          out += "\\x";
          out += text.substr(i + 2, close - i - 1); // {X...}
          i = close + 1;
          continue;
        }
      }
      if (auto unit = utf16_unit(text, i); unit >= 0) {
        long cp = unit;
        size_t used = 6;
        if (unit >= 0xD800 && unit <= 0xDBFF) {
          auto low = utf16_unit(text, i + 6);
          if (low >= 0xDC00 && low <= 0xDFFF) {
            cp = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            used = 12;
          }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
          if (why != nullptr)
            *why = fmt::format("\\u{:04X} is half of a UTF-16 surrogate "
                               "pair, not a character (write the pair, or "
                               "\\u{{...}})",
                               cp);
          return std::nullopt;
        }
        out += fmt::format("\\x{{{:x}}}", cp);
        i += used;
        continue;
      }
      if (d == 'c' && i + 2 < text.size()
          && std::isalpha(static_cast<unsigned char>(text[i + 2])) != 0) {
        out += fmt::format("\\x{{{:x}}}", text[i + 2] % 32);
        i += 3;
        continue;
      }
      if (d == 's') {
        out += in_class ? ecma_space : std::string("[") + ecma_space + "]";
        i += 2;
        continue;
      }
      if (d == 'S' && !in_class) {
        out += std::string("[^") + ecma_space + "]";
        i += 2;
        continue;
      }
      out += c; // any other escape, as written (and never a class bracket)
      out += d;
      i += 2;
      continue;
    }
    if (in_class) {
      in_class = c != ']';
    } else if (c == '[' && text.substr(i, 3) == "[^]") {
      out += "[\\x{0}-\\x{10ffff}]";
      i += 3;
      continue;
    } else if (c == '[' && text.substr(i, 2) == "[]") {
      out += "[^\\x{0}-\\x{10ffff}]";
      i += 2;
      continue;
    } else if (c == '[') {
      in_class = true;
      // ECMA's `]` right after `[` or `[^` closes the class (handled
      // above); RE2 would read it as a literal: never reached here.
    } else if (c == '(' && text.substr(i, 3) == "(?<" && i + 3 < text.size()
               && text[i + 3] != '=' && text[i + 3] != '!') {
      out += "(?P<";
      i += 3;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

std::shared_ptr<const re2::RE2> compile_pattern(std::string_view ecma,
                                                std::string* why) {
  auto text = ecma_to_re2(ecma, why);
  if (!text)
    return nullptr;
  RE2::Options opts;
  opts.set_log_errors(false);
  opts.set_never_capture(true);
  opts.set_max_mem(max_pattern_memory);
  auto re = std::make_shared<const RE2>(re2::StringPiece(text->data(), text->size()),
                                        opts);
  if (re->ok())
    return re;
  if (why == nullptr)
    return nullptr;
  if (re->error_code() == RE2::ErrorPatternTooLarge)
    *why = "larger than pgw runs: it would take more than "
           + std::to_string(max_pattern_memory >> 10)
           + " KiB of RE2 memory (a repetition {n} copies what it repeats n "
             "times)";
  else
    *why = "not a regular expression pgw runs (" + re->error()
           + "; patterns are matched by RE2, in linear time: no lookaround "
             "or backreferences)";
  return nullptr;
}

const char* renamed_keyword(std::string_view key,
                            const boost::json::value& value) {
  if (key == "pattern" && value.is_string())
    return linear_pattern_keyword;
  if (key == "format" && value.is_string())
    return linear_format_keyword;
  if (key == "multipleOf" && value.is_number())
    return multiple_of_keyword;
  if (key == "type" && (value.is_string() || value.is_array()))
    return type_keyword;
  if (auto ours = equality_keyword(key, value))
    return ours;
  if (value.is_number())
    for (auto& b : bound_keywords)
      if (key == b.key)
        return b.ours;
  return nullptr;
}

void add_checks_of_ours(valijson::SchemaParser& parser) {
  parser.addConstraintBuilder(linear_pattern_keyword,
                              new linear_pattern_builder);
  parser.addConstraintBuilder(linear_format_keyword,
                              new linear_format_builder);
  parser.addConstraintBuilder(multiple_of_keyword, new multiple_of_builder);
  parser.addConstraintBuilder(type_keyword, new type_builder);
  for (auto& b : bound_keywords)
    parser.addConstraintBuilder(b.ours, new bound_builder(b));
  add_equality_checks(parser);
  add_property_names_check(parser);
  add_pattern_properties_check(parser);
}

std::optional<exact_number> read_number(const valijson::adapters::Adapter& v) {
  exact_number n;
  if (v.isInteger() && v.asInteger(n.i)) {
    n.whole = true;
    n.d = static_cast<double>(n.i);
    return n;
  }
  if (v.isDouble() && v.asDouble(n.d))
    return n;
  return std::nullopt; // an integer past int64's range: never here (the
                       // answer's and schema's are doubles by then)
}

/// As a person writes it: 5, 0.5, 1.8446744073709552e+19 (the shortest
/// text that reads back as the same double).
std::string number_text(const exact_number& n) {
  return n.whole ? std::to_string(n.i) : fmt::format("{}", n.d);
}

/// Where `a` lies from `b`: -1, 0 or 1, exactly. valijson compares doubles:
/// 9007199254740993 passed `maximum: 9007199254740992`.
int compare(const exact_number& a, const exact_number& b) {
  if (a.whole && b.whole)
    return (a.i > b.i) - (a.i < b.i);
  if (!a.whole && !b.whole)
    return (a.d > b.d) - (a.d < b.d);
  if (!a.whole)
    return -compare(b, a);
  // An int64 and a finite double (JSON has no others).
  if (b.d >= 0x1p63)
    return -1;
  if (b.d < -0x1p63)
    return 1;
  double t = std::trunc(b.d); // inside int64's range: exact
  auto ti = static_cast<int64_t>(t);
  if (a.i != ti)
    return a.i < ti ? -1 : 1;
  double fraction = b.d - t; // exact
  return fraction > 0 ? -1 : fraction < 0 ? 1 : 0;
}

std::optional<bool> bounded_match(const RE2& re, std::string_view subject,
                                  std::string* why) {
  auto size = static_cast<uint64_t>(std::max(re.ProgramSize(), 1));
  auto longest = std::max<uint64_t>(max_pattern_subject, max_pattern_work / size);
  if (subject.size() > longest) {
    *why = "a string of " + std::to_string(subject.size())
           + " bytes is longer than " + std::to_string(longest)
           + ", the most checked against this pattern";
    return std::nullopt;
  }
  if (!spend_pattern_work(std::max<uint64_t>(subject.size(), 1) * size, why))
    return std::nullopt;
  return RE2::PartialMatch(re2::StringPiece(subject.data(), subject.size()), re);
}

bool spend_pattern_work(uint64_t work, std::string* why) {
  if (work > pattern_work_left) {
    *why = "the answer's strings are too long for the schema's patterns: "
           "checking them would take more than "
           + std::to_string(max_answer_pattern_work)
           + " steps (bytes times pattern size)";
    return false;
  }
  pattern_work_left -= work;
  return true;
}

void start_pattern_budget() {
  pattern_work_left = max_answer_pattern_work;
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
