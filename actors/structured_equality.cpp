// The equality checks pgw makes instead of valijson's: `enum`, `const`
// and `uniqueItems` (actors/structured_checks.hpp says why).

#include "actors/structured_check_kit.hpp"

#include "config/scrub.hpp"

// As in actors/structured_schema.cpp: valijson throws rather than aborts.
#if !VALIJSON_USE_EXCEPTIONS
#error "valijson must be compiled with VALIJSON_USE_EXCEPTIONS=1"
#endif

#include <boost/json.hpp>
#include <fmt/format.h>
#include <valijson/constraint_builder.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>

#include <memory>
#include <string>
#include <vector>

namespace pgw {

namespace {

/// What `enum` and `const` are renamed to: draft 7's equality with numbers
/// compared exactly (valijson compares them as doubles: 9007199254740993
/// matched `const: 9007199254740992`), and an error that says what was
/// expected and found (valijson's named neither, and a re-asked model had
/// to guess the allowed values).
constexpr const char* enum_keyword = "x-pgw-enum";
constexpr const char* const_keyword = "x-pgw-const";

/// A copy of a schema's or an answer's value (numbers as int64 or double:
/// neither holds others by the time valijson reads it).
boost::json::value copy_of(const valijson::adapters::Adapter& v) {
  if (v.isBool())
    return v.getBool();
  if (v.isString())
    return boost::json::string(v.getString());
  if (auto n = read_number(v))
    return n->whole ? boost::json::value(n->i) : boost::json::value(n->d);
  if (v.isArray()) {
    boost::json::array out;
    v.applyToArray([&out](const valijson::adapters::Adapter& item) {
      out.push_back(copy_of(item));
      return true;
    });
    return out;
  }
  if (v.isObject()) {
    boost::json::object out;
    v.applyToObject(
      [&out](const std::string& key, const valijson::adapters::Adapter& item) {
        out[key] = copy_of(item);
        return true;
      });
    return out;
  }
  return nullptr;
}

/// True when the answer's `v` is `expected` as draft 7 compares JSON:
/// numbers by value (1 is 1.0; exact for integers), strings by their
/// bytes, arrays item by item, objects by their members in any order.
bool equal(const boost::json::value& expected,
           const valijson::adapters::Adapter& v) {
  switch (expected.kind()) {
    case boost::json::kind::null:
      return v.isNull();
    case boost::json::kind::bool_:
      return v.isBool() && v.getBool() == expected.get_bool();
    case boost::json::kind::string:
      return v.isString() && v.getString() == expected.get_string();
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_: {
      auto n = v.isNumber() ? read_number(v) : std::nullopt;
      exact_number e;
      e.whole = expected.is_int64();
      e.i = e.whole ? expected.get_int64() : 0;
      e.d = expected.to_number<double>();
      return n && compare(*n, e) == 0;
    }
    case boost::json::kind::array: {
      auto& items = expected.get_array();
      if (!v.isArray() || v.getArraySize() != items.size())
        return false;
      size_t i = 0;
      return v.applyToArray([&](const valijson::adapters::Adapter& item) {
        return equal(items[i++], item);
      });
    }
    case boost::json::kind::object: {
      auto& members = expected.get_object();
      if (!v.isObject() || v.getObjectSize() != members.size())
        return false;
      return v.applyToObject(
        [&](const std::string& key, const valijson::adapters::Adapter& item) {
          auto* e = members.if_contains(key);
          return e != nullptr && equal(*e, item);
        });
    }
  }
  return false;
}

/// Appends `v` as JSON text while `out` stays within `cap` bytes; false
/// (and stops reading) once it would not. Strings and keys are scrubbed
/// (an answer's are upstream text).
bool short_json(const valijson::adapters::Adapter& v, std::string& out,
                size_t cap) {
  if (v.isNull()) {
    out += "null";
  } else if (v.isBool()) {
    out += v.getBool() ? "true" : "false";
  } else if (auto n = v.isNumber() ? read_number(v) : std::nullopt) {
    out += number_text(*n);
  } else if (v.isString()) {
    auto s = scrub(v.getString());
    if (s.size() > cap)
      return false;
    out += boost::json::serialize(boost::json::string(s));
  } else if (v.isArray()) {
    out += '[';
    bool first = true;
    if (!v.applyToArray([&](const valijson::adapters::Adapter& item) {
          out += first ? "" : ",";
          first = false;
          return out.size() <= cap && short_json(item, out, cap);
        }))
      return false;
    out += ']';
  } else if (v.isObject()) {
    out += '{';
    bool first = true;
    if (!v.applyToObject([&](const std::string& key,
                             const valijson::adapters::Adapter& item) {
          out += first ? "" : ",";
          first = false;
          auto k = scrub(key);
          if (k.size() > cap)
            return false;
          out += boost::json::serialize(boost::json::string(k)) + ":";
          return out.size() <= cap && short_json(item, out, cap);
        }))
      return false;
    out += '}';
  }
  return out.size() <= cap;
}

/// A value in a few words for an error: a number or literal as written, a
/// string quoted and cut at 40 bytes (scrubbed first: no part of a secret
/// is left), an array or object as JSON when that takes at most 40 bytes,
/// else by its kind ("an object").
std::string brief(const valijson::adapters::Adapter& v) {
  if (!v.isString()) {
    std::string text;
    if (short_json(v, text, 40))
      return text;
    return v.isArray() ? "an array" : "an object";
  }
  auto s = scrub(v.getString());
  bool cut = s.size() > 40;
  if (cut) {
    size_t n = 40;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
      --n; // not inside a UTF-8 sequence
    s.resize(n);
  }
  return boost::json::serialize(boost::json::string(s)) + (cut ? "…" : "");
}

class equal_check final : public check_of_ours<equal_check> {
public:
  equal_check(bool one, std::vector<boost::json::value> allowed,
              std::string expected)
    : one_(one),
      allowed_(std::make_shared<const std::vector<boost::json::value>>(
        std::move(allowed))),
      expected_(std::move(expected)) {
  }

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (target.isString()) { // the answer's string read once, not per value
      auto s = target.getString();
      for (auto& a : *allowed_)
        if (a.is_string() && a.get_string() == s)
          return true;
    } else {
      for (auto& a : *allowed_)
        if (equal(a, target))
          return true;
    }
    if (results != nullptr)
      results->pushError(context,
                         fmt::format("Failed to match {}: expected {}, found "
                                     "{}.",
                                     one_ ? "expected value set by 'const' "
                                            "constraint"
                                          : "against any enum values",
                                     expected_, brief(target)));
    return false;
  }

private:
  bool one_;
  /// Shared by the copies valijson makes of the constraint.
  std::shared_ptr<const std::vector<boost::json::value>> allowed_;
  /// The allowed values in words ("one of 1, 2, 3").
  std::string expected_;
};

class equal_builder final : public valijson::ConstraintBuilder {
public:
  explicit equal_builder(bool one) : one_(one) {
  }

  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    std::vector<boost::json::value> allowed;
    std::string words;
    size_t shown = 0; // values in `words`: until it is 160 bytes long
    auto add = [&](const valijson::adapters::Adapter& v) {
      allowed.push_back(copy_of(v));
      if (words.size() < 160) {
        words += (shown > 0 ? ", " : "") + brief(v);
        ++shown;
      }
      return true;
    };
    if (one_)
      add(value);
    else
      value.applyToArray(add);
    if (shown < allowed.size())
      words += fmt::format(", … ({} values)", allowed.size());
    if (!one_)
      words = allowed.empty() ? "no value (the enum is empty)"
                              : "one of " + words;
    return new equal_check(one_, std::move(allowed), std::move(words));
  }

private:
  bool one_;
};

/// What `uniqueItems` is renamed to: the same equality as `enum` (valijson
/// compares numbers as doubles), and each item equal to an earlier one is
/// one error naming both and the value (valijson listed every equal pair:
/// 100 equal items, 4,950 errors).
constexpr const char* unique_items_keyword = "x-pgw-uniqueItems";

class unique_items_check final : public check_of_ours<unique_items_check> {
public:
  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isArray())
      return true;
    std::vector<boost::json::value> seen;
    seen.reserve(target.getArraySize());
    bool ok = true;
    target.applyToArray([&](const valijson::adapters::Adapter& item) {
      for (size_t i = 0; i < seen.size(); ++i) {
        if (!equal(seen[i], item))
          continue;
        ok = false;
        if (results != nullptr)
          results->pushError(context,
                             fmt::format("Elements at indexes #{} and #{} "
                                         "are equal ({}): uniqueItems "
                                         "allows each value once.",
                                         i, seen.size(), brief(item)));
        break;
      }
      seen.push_back(copy_of(item));
      return ok || results != nullptr; // without a list, the first is enough
    });
    return ok;
  }
};

class unique_items_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    // `uniqueItems: false` constrains nothing (renamed only when true).
    (void)value;
    return new unique_items_check;
  }
};

} // namespace

const char* equality_keyword(std::string_view key,
                             const boost::json::value& value) {
  if (key == "enum" && value.is_array())
    return enum_keyword;
  if (key == "const")
    return const_keyword;
  if (key == "uniqueItems" && value.is_bool() && value.get_bool())
    return unique_items_keyword;
  return nullptr;
}

void add_equality_checks(valijson::SchemaParser& parser) {
  parser.addConstraintBuilder(enum_keyword, new equal_builder(false));
  parser.addConstraintBuilder(const_keyword, new equal_builder(true));
  parser.addConstraintBuilder(unique_items_keyword, new unique_items_builder);
}

} // namespace pgw
