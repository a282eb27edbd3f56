// JSON Schema compilation, the per-digest cache and answer validation. With
// actors/structured_names.cpp and actors/structured_pattern_properties.cpp,
// the only translation units that instantiate valijson's parser and
// validator (template-heavy).

#include "actors/structured_schema.hpp"

#include "actors/structured_checks.hpp"
#include "actors/structured_check_kit.hpp"
#include "actors/structured_repair.hpp"
#include "config/json_text.hpp"
#include "config/scrub.hpp"
#include "config/url.hpp"
#include "messages/errors.hpp"

// valijson throws on a schema it cannot use only with this set (the root
// CMakeLists.txt does); otherwise it aborts the process, and the catches
// below would never run.
#if !VALIJSON_USE_EXCEPTIONS
#error "valijson must be compiled with VALIJSON_USE_EXCEPTIONS=1"
#endif

#include <boost/json.hpp>
#include <openssl/evp.h>
#include <re2/re2.h>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

namespace pgw {

namespace json = boost::json;

class compiled_schema {
public:
  json::value document;
  valijson::Schema schema;
  /// Some subschema says `uniqueItems: true` (valijson compares every pair).
  bool has_unique_items = false;
  /// Its patterns (each may hold up to `max_pattern_memory`).
  size_t patterns = 0;
  /// Subschema checks one answer value may take at most (weighted).
  uint64_t fanout = 1;
};

namespace {

/// The draft-7 meta-schema (https://json-schema.org/draft-07/schema), the
/// standard text, minified.
constexpr const char* draft7_meta_schema =
    R"pgw({"$schema":"http://json-schema.org/draft-07/schema#","$id":"http://jso)pgw"
    R"pgw(n-schema.org/draft-07/schema#","title":"Core schema meta-schema","defi)pgw"
    R"pgw(nitions":{"schemaArray":{"type":"array","minItems":1,"items":{"$ref":")pgw"
    R"pgw(#"}},"nonNegativeInteger":{"type":"integer","minimum":0},"nonNegativeI)pgw"
    R"pgw(ntegerDefault0":{"allOf":[{"$ref":"#/definitions/nonNegativeInteger"},)pgw"
    R"pgw({"default":0}]},"simpleTypes":{"enum":["array","boolean","integer","nu)pgw"
    R"pgw(ll","number","object","string"]},"stringArray":{"type":"array","items")pgw"
    R"pgw(:{"type":"string"},"uniqueItems":true,"default":[]}},"type":["object",)pgw"
    R"pgw("boolean"],"properties":{"$id":{"type":"string","format":"uri-referenc)pgw"
    R"pgw(e"},"$schema":{"type":"string","format":"uri"},"$ref":{"type":"string")pgw"
    R"pgw(,"format":"uri-reference"},"$comment":{"type":"string"},"title":{"type)pgw"
    R"pgw(":"string"},"description":{"type":"string"},"default":true,"readOnly":)pgw"
    R"pgw({"type":"boolean","default":false},"examples":{"type":"array","items":)pgw"
    R"pgw(true},"multipleOf":{"type":"number","exclusiveMinimum":0},"maximum":{")pgw"
    R"pgw(type":"number"},"exclusiveMaximum":{"type":"number"},"minimum":{"type")pgw"
    R"pgw(:"number"},"exclusiveMinimum":{"type":"number"},"maxLength":{"$ref":"#)pgw"
    R"pgw(/definitions/nonNegativeInteger"},"minLength":{"$ref":"#/definitions/n)pgw"
    R"pgw(onNegativeIntegerDefault0"},"pattern":{"type":"string","format":"regex)pgw"
    R"pgw("},"additionalItems":{"$ref":"#"},"items":{"anyOf":[{"$ref":"#"},{"$re)pgw"
    R"pgw(f":"#/definitions/schemaArray"}],"default":true},"maxItems":{"$ref":"#)pgw"
    R"pgw(/definitions/nonNegativeInteger"},"minItems":{"$ref":"#/definitions/no)pgw"
    R"pgw(nNegativeIntegerDefault0"},"uniqueItems":{"type":"boolean","default":f)pgw"
    R"pgw(alse},"contains":{"$ref":"#"},"maxProperties":{"$ref":"#/definitions/n)pgw"
    R"pgw(onNegativeInteger"},"minProperties":{"$ref":"#/definitions/nonNegative)pgw"
    R"pgw(IntegerDefault0"},"required":{"$ref":"#/definitions/stringArray"},"add)pgw"
    R"pgw(itionalProperties":{"$ref":"#"},"definitions":{"type":"object","additi)pgw"
    R"pgw(onalProperties":{"$ref":"#"},"default":{}},"properties":{"type":"objec)pgw"
    R"pgw(t","additionalProperties":{"$ref":"#"},"default":{}},"patternPropertie)pgw"
    R"pgw(s":{"type":"object","additionalProperties":{"$ref":"#"},"propertyNames)pgw"
    R"pgw(":{"format":"regex"},"default":{}},"dependencies":{"type":"object","ad)pgw"
    R"pgw(ditionalProperties":{"anyOf":[{"$ref":"#"},{"$ref":"#/definitions/stri)pgw"
    R"pgw(ngArray"}]}},"propertyNames":{"$ref":"#"},"const":true,"enum":{"type":)pgw"
    R"pgw("array","items":true},"type":{"anyOf":[{"$ref":"#/definitions/simpleTy)pgw"
    R"pgw(pes"},{"type":"array","items":{"$ref":"#/definitions/simpleTypes"},"mi)pgw"
    R"pgw(nItems":1,"uniqueItems":true}]},"format":{"type":"string"},"contentMed)pgw"
    R"pgw(iaType":{"type":"string"},"contentEncoding":{"type":"string"},"if":{"$)pgw"
    R"pgw(ref":"#"},"then":{"$ref":"#"},"else":{"$ref":"#"},"allOf":{"$ref":"#/d)pgw"
    R"pgw(efinitions/schemaArray"},"anyOf":{"$ref":"#/definitions/schemaArray"},)pgw"
    R"pgw("oneOf":{"$ref":"#/definitions/schemaArray"},"not":{"$ref":"#"}},"defa)pgw"
    R"pgw(ult":true})pgw";

/// Schemas kept compiled at most, and patterns in them: the cache starts
/// over when either would be passed (a pattern may hold up to
/// `max_pattern_memory` of RE2 state for as long as its schema is kept).
constexpr size_t cache_capacity = 256;
constexpr size_t cache_pattern_capacity = 256;

/// One schema's patterns at most, and their RE2 instructions together: a
/// caller's 128 KiB schema of `\pL{300}` patterns (357,904 instructions,
/// 111 ms to compile each) held gigabytes and stalled the gateway thread
/// compiling it for most of a minute. Within these, compiling a schema's
/// patterns takes tens of milliseconds and their memory is bounded by
/// `max_schema_patterns` times `max_pattern_memory`.
constexpr size_t max_schema_patterns = 256;
constexpr int64_t max_schema_pattern_program = int64_t{1} << 17;

std::string sha256_hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 0xf];
  }
  return out;
}

/// The most bytes of one answer key in an issue's pointer, and of an
/// issue's message (valijson quotes answer keys and values in it): issues
/// reach re-ask prompts, error messages and the terminal.
constexpr size_t max_shown_key = 64;
constexpr size_t max_shown_message = 300;

/// Answer text as an issue shows it: a control byte as JSON writes it
/// (\u001b), so that a model's answer can neither move a terminal's cursor
/// nor split a log line; at most `max` bytes, cut on a UTF-8 boundary,
/// "..." after.
std::string shown(std::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    // A UTF-8 sequence is not cut: its continuation bytes go with it.
    if (out.size() >= max && (c & 0xC0) != 0x80) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

/// valijson's context ("<root>", "[name]", "[0]", ...) as a JSON pointer,
/// each key as `shown`.
std::string to_pointer(const std::vector<std::string>& context) {
  std::string out;
  for (auto& part : context) {
    if (part == "<root>")
      continue;
    auto token = part.size() >= 2 && part.front() == '[' && part.back() == ']'
                   ? part.substr(1, part.size() - 2)
                   : part;
    out += '/';
    for (char c : shown(scrub(token), max_shown_key)) {
      if (c == '~')
        out += "~0";
      else if (c == '/')
        out += "~1";
      else
        out += c;
    }
  }
  return out;
}

/// valijson's words, where they are garbled.
std::string_view worded(const std::string& message) {
  if (message == "Failed to any values against subschema in 'contains' "
                 "constraint.")
    return "No item matches the subschema of the 'contains' constraint.";
  return message;
}

/// Validates `value` and returns the errors. valijson stops at the first
/// error without a results object, and collects every error with one: the
/// first pass decides; the errors are collected only for an invalid value
/// and only when `list` (the caller bounded the work). valijson's "a child
/// failed" lines (`summary_error`) are left out where a more specific
/// error sits below them; every other error is kept (a missing property
/// beside a wrong one below: both, or a re-asked model fixes one per
/// round). At most `max_schema_issues` plus a summary line. The words
/// quote the answer's keys and values (upstream text): scrubbed before
/// they are cut, so no part of a secret is left.
std::vector<schema_issue> validate(const valijson::Schema& schema,
                                   const json::value& value, bool list) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::BoostJsonAdapter target(value);
  try {
    start_pattern_budget();
    if (validator.validate(schema, target, nullptr))
      return {};
    if (!list)
      return {{"", "the value does not match the schema (too large to list "
                   "the errors: more than "
                     + std::to_string(max_listed_work) + " checks)"}};
    start_pattern_budget();
    validator.validate(schema, target, &results);
  } catch (const std::exception& e) {
    // What valijson throws while applying a schema (a pattern that would
    // not compile is refused when the schema is compiled).
    return {{"", std::string("the schema could not be applied: ") + e.what()}};
  }
  std::vector<valijson::ValidationResults::Error> errors;
  errors.reserve(results.numErrors());
  valijson::ValidationResults::Error err;
  while (results.popError(err))
    errors.push_back(std::move(err));
  // Sorted by location, the locations below one come right after it (and
  // its equals): one look at the next distinct location tells.
  std::vector<size_t> by_context(errors.size());
  for (size_t i = 0; i < by_context.size(); ++i)
    by_context[i] = i;
  std::stable_sort(by_context.begin(), by_context.end(),
                   [&](size_t a, size_t b) {
                     return errors[a].context < errors[b].context;
                   });
  std::vector<bool> general(errors.size(), false);
  for (size_t i = 0; i < by_context.size();) {
    auto& ctx = errors[by_context[i]].context;
    auto j = i;
    while (j < by_context.size() && errors[by_context[j]].context == ctx)
      ++j;
    auto& next = errors[by_context[std::min(j, by_context.size() - 1)]].context;
    bool below = j < by_context.size() && next.size() > ctx.size()
                 && std::equal(ctx.begin(), ctx.end(), next.begin());
    for (; i < j; ++i)
      general[by_context[i]] =
        below && summary_error(errors[by_context[i]].description);
  }
  std::vector<schema_issue> out;
  size_t kept = 0;
  for (size_t i = 0; i < errors.size(); ++i) {
    if (general[i])
      continue;
    if (++kept <= max_schema_issues)
      out.push_back({to_pointer(errors[i].context),
                     shown(scrub(worded(errors[i].description)),
                           max_shown_message)});
  }
  if (kept > max_schema_issues)
    out.push_back({"", "... and " + std::to_string(kept - max_schema_issues)
                         + " more errors"});
  if (out.empty()) // valijson failed it without a word
    out.push_back({"", "the value does not match the schema (a check that "
                       "gives no reason failed: a schema of false, or a "
                       "propertyNames whose subschema holds a $ref)"});
  return out;
}

/// Values in `value` (itself included), and the pairs of items of its
/// arrays (what `uniqueItems` compares).
struct answer_size {
  uint64_t values = 0;
  uint64_t item_pairs = 0;
  /// Integers past int64's range.
  uint64_t wide = 0;
};

void measure_answer(const json::value& value, answer_size& out) {
  ++out.values;
  out.wide += value.is_uint64() ? 1 : 0;
  if (value.is_array()) {
    uint64_t n = value.get_array().size();
    out.item_pairs += n > 1 ? n * (n - 1) / 2 : 0;
    for (auto& x : value.get_array())
      measure_answer(x, out);
  } else if (value.is_object()) {
    for (auto& kv : value.get_object())
      measure_answer(kv.value(), out);
  }
}

/// Numbers in the forms in which valijson reads them as draft 7 means
/// them. valijson's adapter cannot read an integer past int64's range
/// (Boost.JSON's uint64): a check that reads it as a number passed it
/// (`maximum: 5` let 18446744073709551615 through) or threw, and the
/// meta-schema refused `maximum: 18446744073709551615`; it becomes the
/// nearest double. With `integral`, a double with no fractional part inside
/// int64's range becomes that int64: valijson's parser takes no double for
/// an integer keyword (`minLength: 5.0`). Neither changes what a number is
/// to draft 7.
void as_valijson_reads(json::value& v, bool integral) {
  if (v.is_uint64()) {
    v = static_cast<double>(v.get_uint64());
  } else if (integral && v.is_double()) {
    double d = v.get_double();
    if (d == std::trunc(d) && d >= -0x1p63 && d < 0x1p63)
      v = static_cast<int64_t>(d);
  } else if (v.is_array()) {
    for (auto& x : v.get_array())
      as_valijson_reads(x, integral);
  } else if (v.is_object()) {
    for (auto& kv : v.get_object())
      as_valijson_reads(kv.value(), integral);
  }
}

// -- checks valijson does not make safely ----------------------------------------

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key)
    out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1")
                                                    : std::string(1, c);
  return out;
}

bool holds_nul(std::string_view s) {
  return s.find('\0') != std::string_view::npos;
}

/// "string" or "key" when a string or key of `value` holds U+0000 (`path`
/// is then where, in valijson's context form, for `to_pointer`), else
/// null. valijson's Boost.JSON adapter reads a string up to its first NUL:
/// "a\u0000b" was checked as "a" (so it matched `enum: ["a"]`,
/// `maxLength: 1`, `pattern: "^a$"`) and answered in full.
const char* first_nul(const json::value& value,
                      std::vector<std::string>& path) {
  if (value.is_string())
    return holds_nul(value.get_string()) ? "string" : nullptr;
  if (value.is_array()) {
    size_t i = 0;
    for (auto& x : value.get_array()) {
      path.push_back("[" + std::to_string(i++) + "]");
      if (auto what = first_nul(x, path))
        return what;
      path.pop_back();
    }
  } else if (value.is_object()) {
    for (auto& kv : value.get_object()) {
      path.push_back("[" + std::string(kv.key()) + "]");
      if (holds_nul(kv.key()))
        return "key";
      if (auto what = first_nul(kv.value(), path))
        return what;
      path.pop_back();
    }
  }
  return nullptr;
}

/// The issue naming where `value` holds U+0000, for an answer or (with
/// `schema`) a schema, or nullopt.
std::optional<schema_issue> nul_issue(const json::value& value, bool schema) {
  std::vector<std::string> path;
  auto what = first_nul(value, path);
  if (what == nullptr)
    return std::nullopt;
  return schema_issue{to_pointer(path),
                      std::string("the ") + what + " holds U+0000 (NUL), "
                        + (schema ? "which pgw does not read in a schema"
                                  : "which pgw does not check against a "
                                    "schema")};
}

std::optional<std::string> decode_token(std::string token) {
  auto replace_all = [&token](std::string_view from, char to) {
    for (auto n = token.find(from); n != std::string::npos;
         n = token.find(from, n + 1))
      token.replace(n, from.size(), 1, to);
  };
  replace_all("~1", '/');
  replace_all("~0", '~');
  return percent_decode(token);
}

/// The member or item of `node` a decoded pointer token names (arrays
/// indexed by digits), or nullptr.
const json::value* child(const json::value& node, const std::string& token) {
  if (node.is_object())
    return node.get_object().if_contains(token);
  if (node.is_array() && !token.empty() && token.size() < 10
      && std::all_of(token.begin(), token.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
    auto index = std::stoul(token);
    auto& arr = node.get_array();
    return index < arr.size() ? &arr[index] : nullptr;
  }
  return nullptr;
}

/// Follows a `$ref` fragment from `root` as valijson reads it (empty
/// tokens skipped, `~1` `~0` and then %-escapes decoded, arrays indexed by
/// digits), calling `step(node, token)` before each move from `node` to
/// its child `token`: a false return stops there. The node reached, or
/// nullptr (a token that does not decode or names nothing, or a stop).
template <class Step>
const json::value* follow(const json::value& root, const std::string& pointer,
                          Step&& step) {
  if (!pointer.empty() && pointer.front() != '/')
    return nullptr;
  const json::value* node = &root;
  size_t start = 0;
  while (node != nullptr && start < pointer.size()) {
    auto end = std::min(pointer.find('/', start + 1), pointer.size());
    auto token = decode_token(pointer.substr(start + 1, end - start - 1));
    start = end;
    if (!token)
      return nullptr;
    if (token->empty())
      continue;
    if (!step(*node, *token))
      return nullptr;
    node = child(*node, *token);
  }
  return node;
}

/// The node a `$ref` fragment names, or nullptr.
const json::value* resolve(const json::value& root,
                            const std::string& pointer) {
  return follow(root, pointer, [](const json::value&, const std::string&) {
    return true;
  });
}

/// What a draft-7 keyword of a subschema holds, for the walks that must
/// agree on where subschemas are (the checks, the pattern renaming).
enum class keyword_holds {
  named_schemas, ///< properties, definitions, ...: name -> subschema
  schema_list,   ///< allOf, anyOf, oneOf, items as an array
  schema,        ///< items, not, if, additionalProperties, ...
  other,         ///< data (enum, const, ...) or not a keyword
};

keyword_holds holds_of(std::string_view key, const json::value& v) {
  if ((key == "properties" || key == "patternProperties"
       || key == "definitions" || key == "$defs" || key == "dependencies")
      && v.is_object())
    return keyword_holds::named_schemas;
  if ((key == "allOf" || key == "anyOf" || key == "oneOf" || key == "items")
      && v.is_array())
    return keyword_holds::schema_list;
  if (key == "items" || key == "additionalItems"
      || key == "additionalProperties" || key == "not" || key == "if"
      || key == "then" || key == "else" || key == "contains"
      || key == "propertyNames")
    return keyword_holds::schema;
  return keyword_holds::other;
}

/// A problem found in the schema document, with its pointer.
struct schema_problem {
  std::string pointer;
  std::string message;
};

/// Walks the subschemas of `node` (draft 7 keywords that hold schemas):
/// every `pattern` must compile for RE2 (it would only fail later, on
/// every answer) within the schema's pattern bounds, and so must every
/// key of `patternProperties`, and every
/// `$ref` must be local, resolve and not loop (valijson aborts, fetches or
/// recurses forever otherwise). A `$ref`'s target is walked too: valijson
/// parses it as a schema wherever it sits.
class schema_walker {
public:
  explicit schema_walker(const json::value& root) : root_(root) {
  }

  std::optional<schema_problem> walk(const json::value& node,
                                     const std::string& at, int depth = 0) {
    if (!node.is_object())
      return std::nullopt;
    // Unreachable through JSON nesting alone (json::parse stops at 32
    // levels), but `$ref` targets add levels; past this, nothing checked.
    if (depth > max_walk_depth)
      return schema_problem{at, "nests deeper than "
                                  + std::to_string(max_walk_depth)
                                  + " subschemas (counting $ref targets)"};
    auto& obj = node.get_object();
    if (auto p = obj.if_contains("pattern"); p && p->is_string()) {
      if (auto err = pattern_error(p->get_string()))
        return schema_problem{at + "/pattern", *err};
    }
    // Matched by a check of ours with RE2 (actors/structured_pattern_
    // properties.cpp), within the same bounds as `pattern`.
    if (auto pp = obj.if_contains("patternProperties"); pp && pp->is_object())
      for (auto& kv : pp->get_object())
        if (auto err = pattern_error(std::string_view(kv.key().data(),
                                                      kv.key().size())))
          return schema_problem{at + "/patternProperties/"
                                  + pointer_token(kv.key()),
                                *err};
    if (auto u = obj.if_contains("uniqueItems"); u && u->is_bool())
      has_unique_items = has_unique_items || u->get_bool();
    // The meta-schema says these are unique; checked here, in linear time
    // (valijson's uniqueItems compares every pair).
    if (auto r = obj.if_contains("required"))
      if (auto p = repeated_string(*r, at + "/required"))
        return p;
    if (auto t = obj.if_contains("type"))
      if (auto p = repeated_string(*t, at + "/type"))
        return p;
    if (auto d = obj.if_contains("dependencies"); d && d->is_object())
      for (auto& kv : d->get_object())
        if (auto p = repeated_string(kv.value(), at + "/dependencies/"
                                                   + pointer_token(kv.key())))
          return p;
    if (auto ref = obj.if_contains("$ref"); ref && ref->is_string())
      if (auto p = check_ref(std::string(ref->get_string()), at + "/$ref",
                             depth))
        return p;
    for (auto& kv : obj) {
      auto& v = kv.value();
      auto here = at + "/" + pointer_token(kv.key());
      switch (holds_of(kv.key(), v)) {
        case keyword_holds::named_schemas:
          for (auto& sub : v.get_object())
            if (auto p = walk(sub.value(), here + "/" + pointer_token(sub.key()),
                              depth + 1))
              return p;
          break;
        case keyword_holds::schema_list:
          for (size_t i = 0; i < v.get_array().size(); ++i)
            if (auto p = walk(v.get_array()[i], here + "/" + std::to_string(i),
                              depth + 1))
              return p;
          break;
        case keyword_holds::schema:
          if (auto p = walk(v, here, depth + 1))
            return p;
          break;
        case keyword_holds::other:
          break;
      }
    }
    return std::nullopt;
  }

  /// Some subschema says `uniqueItems: true`.
  bool has_unique_items = false;
  /// Patterns compiled, and their RE2 instructions together.
  size_t patterns = 0;
  int64_t pattern_program = 0;

private:
  /// An array of strings that names one twice.
  static std::optional<schema_problem> repeated_string(const json::value& v,
                                                       const std::string& at) {
    if (!v.is_array())
      return std::nullopt;
    std::set<std::string_view> seen;
    auto& arr = v.get_array();
    for (size_t i = 0; i < arr.size(); ++i)
      if (arr[i].is_string() && !seen.insert(arr[i].get_string()).second)
        return schema_problem{at + "/" + std::to_string(i),
                              "\"" + std::string(arr[i].get_string())
                                + "\" is listed twice (the items must be "
                                  "unique)"};
    return std::nullopt;
  }

  /// Compiles `pattern` and counts it against the schema's bounds.
  std::optional<std::string> pattern_error(std::string_view pattern) {
    std::string why;
    auto re = compile_pattern(pattern, &why);
    if (!re)
      return why;
    ++patterns;
    pattern_program += re->ProgramSize();
    if (patterns > max_schema_patterns)
      return "more than " + std::to_string(max_schema_patterns)
             + " patterns in one schema (each may hold up to "
             + std::to_string(max_pattern_memory >> 10)
             + " KiB of matching state)";
    if (pattern_program > max_schema_pattern_program)
      return "the schema's patterns compile to more than "
             + std::to_string(max_schema_pattern_program)
             + " RE2 instructions together (this one: "
             + std::to_string(re->ProgramSize())
             + "; a repetition {n} copies what it repeats n times): use "
               "fewer or smaller patterns";
    return std::nullopt;
  }

  static constexpr int max_walk_depth = 64;

  /// A `$ref` valijson can follow safely: local, resolving, not a loop; its
  /// target is walked once.
  std::optional<schema_problem> check_ref(const std::string& ref,
                                          const std::string& at, int depth) {
    if (ref.empty() || ref.front() != '#')
      return schema_problem{at, "$ref \"" + ref
                                  + "\": only local $ref (\"#/...\") are "
                                    "supported"};
    auto target = resolve(root_, ref.substr(1));
    if (target == nullptr)
      return schema_problem{at, "$ref \"" + ref
                                  + "\" does not resolve in the schema"};
    refs.push_back({at, ref.substr(1), target});
    if (!walked_targets_.insert(target).second)
      return std::nullopt;
    return walk(*target, ref.substr(1), depth + 1);
  }

public:
  /// Each `$ref` followed: where it is, its fragment, what it names.
  struct followed_ref {
    std::string at;
    std::string fragment;
    const json::value* target;
  };
  std::vector<followed_ref> refs;

private:
  const json::value& root_;
  std::set<const json::value*> walked_targets_;
};

/// Whether `node` holds the key `key` anywhere (as a keyword or as a
/// name: a property so named counts too, which only costs `propertyNames`
/// its reason).
bool holds_key(const json::value& node, std::string_view key) {
  if (node.is_object()) {
    for (auto& kv : node.get_object())
      if (kv.key() == key || holds_key(kv.value(), key))
        return true;
  } else if (node.is_array()) {
    for (auto& item : node.get_array())
      if (holds_key(item, key))
        return true;
  }
  return false;
}

/// A copy of `node` (a subschema) for valijson: each `pattern`, `format`,
/// `multipleOf` and `type` of a subschema renamed to a check of ours
/// (`renamed_keyword`, actors/structured_checks.hpp), the rest as it is.
/// Names (properties, definitions) and data (enum, const, default,
/// examples) are copied unchanged. `schemas` collects the subschemas of the original
/// document (for `names_data`).
json::value linear_keywords(const json::value& node,
                            std::set<const json::value*>& schemas) {
  schemas.insert(&node); // true and false are subschemas too
  if (!node.is_object())
    return node;
  json::object out;
  auto* pattern_props = node.get_object().if_contains("patternProperties");
  if (pattern_props != nullptr && !pattern_props->is_object())
    pattern_props = nullptr;
  for (auto& kv : node.get_object()) {
    auto& v = kv.value();
    // patternProperties and additionalProperties: the subschemas under
    // keys that match nothing, the patterns in a check of ours
    // (actors/structured_pattern_properties.cpp).
    if (pattern_props != nullptr && kv.key() == "additionalProperties")
      continue;
    if (pattern_props != nullptr && kv.key() == "patternProperties") {
      json::array subs;
      json::array patterns;
      for (auto& sub : v.get_object()) {
        subs.push_back(linear_keywords(sub.value(), schemas));
        patterns.push_back(json::string(sub.key()));
      }
      bool additional = false;
      if (auto* a = node.get_object().if_contains("additionalProperties")) {
        subs.push_back(linear_keywords(*a, schemas));
        additional = true;
      }
      json::array names;
      if (auto* p = node.get_object().if_contains("properties");
          p != nullptr && p->is_object())
        for (auto& name : p->get_object())
          names.push_back(json::string(name.key()));
      json::object held;
      if (!subs.empty()) // valijson refuses an empty allOf
        held["allOf"] = std::move(subs);
      out[kv.key()] = {{pattern_placeholder, std::move(held)}};
      out[pattern_properties_keyword] = {{"patterns", std::move(patterns)},
                                         {"names", std::move(names)},
                                         {"additional", additional}};
      continue;
    }
    // A keyword of ours written by the author is no keyword of draft 7's:
    // ignored, as any unknown one (valijson would build our check from it,
    // and x-pgw-property-names from a subschema that $ref "#" could loop).
    if (std::string_view(kv.key().data(), kv.key().size()).rfind("x-pgw-", 0) == 0)
      continue;
    if (auto to = renamed_keyword(kv.key(), v)) {
      out[to] = v;
      continue;
    }
    switch (holds_of(kv.key(), v)) {
      case keyword_holds::named_schemas: {
        json::object subs;
        for (auto& sub : v.get_object())
          subs[sub.key()] = linear_keywords(sub.value(), schemas);
        out[kv.key()] = std::move(subs);
        break;
      }
      case keyword_holds::schema_list: {
        json::array subs;
        for (auto& sub : v.get_array())
          subs.push_back(linear_keywords(sub, schemas));
        out[kv.key()] = std::move(subs);
        break;
      }
      case keyword_holds::schema:
        out[kv.key()] = linear_keywords(v, schemas);
        // Beside it, the same check with a reason (structured_names.cpp),
        // when the subschema can be compiled on its own.
        // Not with a `$ref` (it names the whole document), nor around
        // another propertyNames (a key is a string: it never applies, and
        // each level would double the copy).
        if (kv.key() == "propertyNames" && !holds_key(v, "$ref")
            && !holds_key(v, "propertyNames"))
          out[property_names_keyword] = out[kv.key()];
        break;
      case keyword_holds::other:
        out[kv.key()] = v;
        break;
    }
  }
  return out;
}

/// True when `fragment` (a `$ref`'s, read as `resolve` reads it) passes
/// through the enum, const, default or examples of a subschema (one of
/// `schemas` or of `targets`, the `$ref` targets, which valijson reads as
/// schemas wherever they sit): data that validation compares, which
/// valijson would also read as a schema.
bool names_data(const json::value& root, const std::string& fragment,
                const std::set<const json::value*>& schemas,
                const std::set<const json::value*>& targets) {
  bool data = false;
  follow(root, fragment, [&](const json::value& node, const std::string& t) {
    data = (schemas.count(&node) != 0 || targets.count(&node) != 0)
           && (t == "enum" || t == "const" || t == "default"
               || t == "examples");
    return !data;
  });
  return data;
}

// -- what validating an answer can cost ------------------------------------------

/// The subschemas valijson applies from one subschema, by where they apply.
struct subschema_links {
  /// To the same answer value (allOf, anyOf, oneOf, not, if, then, else, a
  /// dependency's schema, a `$ref` target), with the pointer of each.
  std::vector<std::pair<size_t, std::string>> same;
  /// To a member's value: at most one of `properties`, and all of
  /// `patternProperties` and `additionalProperties`.
  std::vector<size_t> member_one, member_all;
  /// To each key (a string): `propertyNames`.
  std::vector<size_t> key;
  /// To an item: at most one of tuple `items` and `additionalItems`, and
  /// all of a single `items` and `contains`.
  std::vector<size_t> item_one, item_all;
};

/// The subschemas reachable from the root as a graph (a `$ref` is an edge
/// to its target), and what validating one answer value can cost: a loop
/// of edges that stay on the same value never ends (valijson recurses
/// until the stack overflows); a loop that descends into the answer ends
/// with the answer's depth, at most `max_answer_depth`.
class schema_cost {
public:
  explicit schema_cost(const json::value& root) : root_(root) {
    id_of(&root, "");
    // The root's definitions too: a loop there is refused even unused.
    if (root.is_object())
      for (auto key : {"definitions", "$defs"})
        if (auto d = root.get_object().if_contains(key); d && d->is_object())
          for (auto& kv : d->get_object())
            id_of(&kv.value(), std::string("/") + key + "/"
                                 + pointer_token(kv.key()));
    for (size_t i = 0; i < nodes_.size(); ++i)
      link(i);
  }

  /// A loop that stays on one value, or a schema whose validation applies
  /// more than `max_schema_fanout` subschema checks to one answer value or
  /// nests them deeper than `max_schema_nesting`.
  std::optional<schema_problem> check() {
    if (auto loop = find_loop())
      return loop;
    measure();
    if (fanout > max_schema_fanout)
      return schema_problem{"", "validating one answer value may take "
                                  + std::to_string(fanout)
                                  + " subschema checks, more than "
                                  + std::to_string(max_schema_fanout)};
    if (nesting > max_schema_nesting)
      return schema_problem{"", "subschemas (counting $ref targets) nest "
                                  + std::to_string(nesting)
                                  + " deep in an answer, more than "
                                  + std::to_string(max_schema_nesting)};
    return std::nullopt;
  }

  /// Checks (weighted by the names and values a subschema lists) applied to
  /// one answer value at most, and the deepest nesting of subschemas.
  uint64_t fanout = 0;
  uint64_t nesting = 0;

private:
  struct node {
    const json::value* value;
    std::string pointer;
    subschema_links links;
    uint64_t weight = 1;
  };

  size_t id_of(const json::value* v, const std::string& pointer) {
    auto [i, added] = ids_.emplace(v, nodes_.size());
    if (added)
      nodes_.push_back({v, pointer, {}, 1});
    return i->second;
  }

  void link(size_t id) {
    auto* v = nodes_[id].value;
    if (!v->is_object())
      return;
    subschema_links out;
    uint64_t weight = 1;
    auto at = nodes_[id].pointer;
    for (auto& kv : v->get_object()) {
      std::string key(kv.key());
      auto& x = kv.value();
      auto here = at + "/" + pointer_token(key);
      auto sub = [&](const json::value& s, const std::string& p) {
        return id_of(&s, p);
      };
      auto each_of_array = [&](auto&& fn) {
        if (x.is_array())
          for (size_t i = 0; i < x.get_array().size(); ++i)
            fn(x.get_array()[i], here + "/" + std::to_string(i));
      };
      auto each_of_object = [&](auto&& fn) {
        if (x.is_object())
          for (auto& m : x.get_object())
            fn(m.value(), here + "/" + pointer_token(m.key()));
      };
      if (key == "$ref" && x.is_string()) {
        auto fragment = std::string(x.get_string()).substr(1);
        if (auto target = resolve(root_, fragment))
          out.same.emplace_back(sub(*target, fragment), here);
      } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
        each_of_array([&](auto& s, auto p) {
          out.same.emplace_back(sub(s, p), p);
        });
      } else if (key == "not" || key == "if" || key == "then"
                 || key == "else") {
        out.same.emplace_back(sub(x, here), here);
      } else if (key == "dependencies") {
        each_of_object([&](auto& s, auto p) {
          if (s.is_object() || s.is_bool())
            out.same.emplace_back(sub(s, p), p);
          else if (s.is_array())
            weight += s.get_array().size();
        });
      } else if (key == "properties") {
        each_of_object([&](auto& s, auto p) {
          out.member_one.push_back(sub(s, p));
        });
        weight += x.is_object() ? x.get_object().size() : 0;
      } else if (key == "patternProperties") {
        each_of_object([&](auto& s, auto p) {
          out.member_all.push_back(sub(s, p));
        });
        weight += x.is_object() ? x.get_object().size() : 0;
      } else if (key == "additionalProperties") {
        out.member_all.push_back(sub(x, here));
      } else if (key == "propertyNames") {
        out.key.push_back(sub(x, here));
      } else if (key == "items" && x.is_array()) {
        each_of_array([&](auto& s, auto p) {
          out.item_one.push_back(sub(s, p));
        });
      } else if (key == "items" || key == "contains") {
        out.item_all.push_back(sub(x, here));
      } else if (key == "additionalItems") {
        out.item_one.push_back(sub(x, here));
      } else if ((key == "required" || key == "enum") && x.is_array()) {
        weight += x.get_array().size();
      }
    }
    nodes_[id].links = std::move(out);
    nodes_[id].weight = weight;
  }

  static std::string shown(const std::string& pointer) {
    return pointer.empty() ? std::string("(root)") : pointer;
  }

  /// Depth-first over the same-value edges (no recursion: the chain may be
  /// as long as the schema); fills `order_` children first.
  std::optional<schema_problem> find_loop() {
    std::vector<int> color(nodes_.size(), 0); // 0 new, 1 on path, 2 done
    std::vector<std::pair<size_t, size_t>> path; // node, next edge
    for (size_t start = 0; start < nodes_.size(); ++start) {
      if (color[start] != 0)
        continue;
      path.emplace_back(start, 0);
      color[start] = 1;
      while (!path.empty()) {
        auto& [u, e] = path.back();
        auto& same = nodes_[u].links.same;
        if (e == same.size()) {
          color[u] = 2;
          order_.push_back(u);
          path.pop_back();
          continue;
        }
        auto v = same[e++].first;
        if (color[v] == 1) {
          auto first = std::find_if(path.begin(), path.end(),
                                    [v](auto& x) { return x.first == v; });
          std::string chain;
          for (auto i = first; i != path.end(); ++i)
            chain += shown(nodes_[i->first].pointer) + " -> ";
          chain += shown(nodes_[v].pointer);
          auto& edge = nodes_[v].links.same[first->second - 1];
          return schema_problem{edge.second,
                                "$ref chain refers back to itself without "
                                "descending into the answer, an endless "
                                "loop: "
                                  + chain};
        }
        if (color[v] == 0) {
          color[v] = 1;
          path.emplace_back(v, 0);
        }
      }
    }
    return std::nullopt;
  }

  /// Fills `fanout` and `nesting`: for each answer depth k and kind of
  /// value (object, array, other), what a subschema applies to a value k
  /// levels below the one it is applied to, children before parents.
  void measure() {
    constexpr uint64_t cap = uint64_t{1} << 40;
    auto add = [cap](uint64_t a, uint64_t b) {
      return std::min(a + b, cap);
    };
    using per_kind = std::array<uint64_t, 3>; // object, array, other
    std::vector<per_kind> f_prev(nodes_.size()), f(nodes_.size());
    std::vector<per_kind> d_prev(nodes_.size()), d(nodes_.size());
    auto best = [](const per_kind& x) {
      return std::max({x[0], x[1], x[2]});
    };
    for (size_t k = 0; k <= max_answer_depth; ++k) {
      for (auto u : order_) {
        auto& n = nodes_[u];
        for (size_t kind = 0; kind < 3; ++kind) {
          uint64_t work = k == 0 ? n.weight : 0;
          uint64_t deepest = 0;
          for (auto& [c, p] : n.links.same) {
            work = add(work, f[c][kind]);
            deepest = std::max(deepest, d[c][kind]);
          }
          if (k > 0 && kind != 2) {
            auto& one = kind == 0 ? n.links.member_one : n.links.item_one;
            auto& all = kind == 0 ? n.links.member_all : n.links.item_all;
            uint64_t below = 0;
            for (size_t ck = 0; ck < 3; ++ck) {
              uint64_t w = 0;
              for (auto c : one)
                w = std::max(w, f_prev[c][ck]);
              for (auto c : all)
                w = add(w, f_prev[c][ck]);
              below = std::max(below, w);
            }
            if (kind == 0)
              for (auto c : n.links.key)
                below = std::max(below, f_prev[c][2]);
            work = add(work, below);
            for (auto* group : {&one, &all, &n.links.key})
              for (auto c : *group)
                deepest = std::max(deepest, best(d_prev[c]));
          }
          f[u][kind] = work;
          d[u][kind] = deepest + 1;
        }
      }
      fanout = std::max(fanout, best(f[0]));
      nesting = std::max(nesting, best(d[0]));
      std::swap(f, f_prev);
      std::swap(d, d_prev);
    }
  }

  const json::value& root_;
  std::vector<node> nodes_;
  std::map<const json::value*, size_t> ids_;
  std::vector<size_t> order_;
};

const valijson::Schema& meta_schema() {
  static const auto compiled = [] {
    auto doc = json::parse(draft7_meta_schema);
    // uniqueItems compares every pair: 60,000 `required` names took 35 s.
    // schema_walker checks the same lists in linear time instead.
    doc.at_pointer("/definitions/stringArray").as_object().erase("uniqueItems");
    doc.at_pointer("/properties/type/anyOf/1").as_object().erase("uniqueItems");
    // The formats of `$id`, `$schema` and `$ref` (uri, uri-reference) and
    // of patterns (regex) are not checked here: a `$ref` is resolved by
    // schema_walker (a `#/definitions/名前` resolves, though no URI holds
    // it raw), and a pattern is compiled there, with RE2's own words.
    for (auto at : {"/properties/$id", "/properties/$schema", "/properties/$ref",
                    "/properties/pattern",
                    "/properties/patternProperties/propertyNames"})
      doc.at_pointer(at).as_object().erase("format");
    // `type` is ours here too: an error names what was expected and found.
    std::set<const json::value*> renamed;
    doc = linear_keywords(doc, renamed);
    auto schema = std::make_unique<valijson::Schema>();
    valijson::SchemaParser parser{valijson::SchemaParser::kDraft7};
    add_checks_of_ours(parser);
    parser.populateSchema(valijson::adapters::BoostJsonAdapter(doc), *schema);
    return schema;
  }();
  return *compiled;
}

caf::error invalid_schema(const std::string& pointer, const std::string& what) {
  return make_error(error_code::invalid_request,
                    "schema " + (pointer.empty() ? std::string("(root)")
                                                 : pointer)
                      + ": " + what);
}

caf::expected<schema_ptr> compile(const std::string& text) {
  if (text.size() > max_schema_bytes)
    return make_error(error_code::invalid_request,
                      "schema: " + std::to_string(text.size())
                        + " bytes, larger than "
                        + std::to_string(max_schema_bytes) + " bytes");
  json::error_code ec;
  auto doc = parse_json(text, ec);
  if (ec)
    return make_error(error_code::invalid_request,
                      "schema: not valid JSON (" + ec.message() + ")");
  if (!doc.is_object() && !doc.is_bool())
    return invalid_schema("", "a JSON Schema is an object (or a boolean)");
  // valijson reads a string up to its first NUL (a pattern, a property's
  // name, an enum value would be another than written).
  if (auto nul = nul_issue(doc, true))
    return invalid_schema(nul->pointer, nul->message);
  as_valijson_reads(doc, true);
  auto issues = validate(meta_schema(), doc, true);
  if (!issues.empty())
    return invalid_schema(issues.front().pointer, issues.front().message);
  schema_walker walker{doc};
  if (auto problem = walker.walk(doc, ""))
    return invalid_schema(problem->pointer, problem->message);
  schema_cost cost{doc};
  if (auto problem = cost.check())
    return invalid_schema(problem->pointer, problem->message);
  auto out = std::make_shared<compiled_schema>();
  out->has_unique_items = walker.has_unique_items;
  out->patterns = walker.patterns;
  out->fanout = cost.fanout;
  // The subschemas whose copy has its checks renamed.
  std::set<const json::value*> renamed;
  out->document = linear_keywords(doc, renamed);
  // A `$ref` may name a node under a key of the author's (OpenAPI's
  // components/schemas, say): valijson reads it as a schema, so its
  // checks are renamed there too, outer targets first. Data is refused.
  auto refs = walker.refs;
  std::stable_sort(refs.begin(), refs.end(), [](auto& a, auto& b) {
    return a.fragment.size() < b.fragment.size();
  });
  std::set<const json::value*> targets;
  for (auto& r : refs)
    targets.insert(r.target);
  for (auto& r : refs) {
    if (names_data(doc, r.fragment, renamed, targets))
      return invalid_schema(r.at, "$ref \"#" + r.fragment
                                    + "\" names data (an enum, const, default "
                                      "or examples value), not a subschema");
    // Held elsewhere in the copy (under a placeholder's allOf).
    if (r.fragment.find("/patternProperties/") != std::string::npos)
      return invalid_schema(r.at, "$ref \"#" + r.fragment
                                    + "\" names a subschema of "
                                      "patternProperties, which pgw cannot "
                                      "follow: move it under definitions "
                                      "and $ref it from both places");
    if (renamed.count(r.target) != 0)
      continue;
    // The copy has the original's shape: the same fragment names the same
    // place in it (replaced whole: no other node of the copy moves).
    auto* slot = resolve(out->document, r.fragment);
    if (slot != nullptr)
      *const_cast<json::value*>(slot) = linear_keywords(*r.target, renamed);
  }
  try {
    valijson::SchemaParser parser{valijson::SchemaParser::kDraft7};
    add_checks_of_ours(parser);
    parser.populateSchema(valijson::adapters::BoostJsonAdapter(out->document),
                          out->schema);
    link_pattern_properties(out->schema);
  } catch (const std::exception& e) {
    return invalid_schema("", e.what());
  }
  return schema_ptr{std::move(out)};
}

struct schema_cache {
  std::mutex mtx;
  std::map<std::string, schema_ptr> by_digest;
  /// Patterns of the schemas in `by_digest`.
  size_t patterns = 0;
};

schema_cache& cache() {
  static schema_cache instance;
  return instance;
}

} // namespace

namespace {

/// The compiled schema kept for this digest; null when there is none.
schema_ptr compiled_by_digest(const std::string& digest) {
  auto& c = cache();
  std::lock_guard<std::mutex> guard{c.mtx};
  auto i = c.by_digest.find(digest);
  return i != c.by_digest.end() ? i->second : nullptr;
}

} // namespace

caf::expected<schema_ptr> compile_schema(const std::string& schema_text) {
  auto digest = sha256_hex(schema_text);
  if (auto known = compiled_by_digest(digest))
    return known;
  auto& c = cache();
  // Compiled outside the lock; two threads may compile the same text once
  // each, and the first stored wins.
  auto compiled = compile(schema_text);
  if (!compiled)
    return compiled;
  std::lock_guard<std::mutex> guard{c.mtx};
  if (c.by_digest.size() >= cache_capacity
      || c.patterns + (*compiled)->patterns > cache_pattern_capacity) {
    c.by_digest.clear();
    c.patterns = 0;
  }
  auto [at, added] = c.by_digest.emplace(digest, *compiled);
  if (added)
    c.patterns += (*compiled)->patterns;
  return at->second;
}

schema_ptr compiled_schema_of(const std::string& schema_text) {
  return compiled_by_digest(sha256_hex(schema_text));
}

// Declared in actors/structured_check_kit.hpp.
bool summary_error(const std::string& message) {
  return message.rfind("Failed to validate ", 0) == 0
         || message.rfind("Cannot validate item ", 0) == 0
         || message.rfind("Failed to any values against subschema", 0) == 0;
}

size_t compiled_schema_count() {
  auto& c = cache();
  std::lock_guard<std::mutex> guard{c.mtx};
  return c.by_digest.size();
}

namespace {

std::atomic<uint64_t> checked_answers{0};

} // namespace

uint64_t checked_answer_count() {
  return checked_answers.load(std::memory_order_relaxed);
}

structured_check check_answer(const compiled_schema& schema,
                              const std::string& content) {
  checked_answers.fetch_add(1, std::memory_order_relaxed);
  structured_check out;
  json::error_code ec;
  json::parse_options depth_bound;
  depth_bound.max_depth = max_answer_depth;
  auto value = parse_json(content, ec, nullptr, depth_bound);
  if (ec) {
    auto fixed = repair_json(content);
    json::error_code ec2;
    if (fixed.changed)
      value = parse_json(fixed.text, ec2, nullptr, depth_bound);
    if (!fixed.changed || ec2) {
      out.issues.push_back(
        {"", "the answer is not valid JSON (" + ec.message() + ")"});
      return out;
    }
    out.repaired = true;
  }
  out.json = json_text(value);
  if (auto nul = nul_issue(value, false)) {
    out.issues.push_back(std::move(*nul));
    return out;
  }
  answer_size size;
  measure_answer(value, size);
  auto work = size.values * schema.fanout
              + (schema.has_unique_items ? size.item_pairs : 0);
  if (work > max_validation_work) {
    out.issues.push_back(
      {"", "the answer has " + std::to_string(size.values)
             + " values: validating it against this schema could take "
             + std::to_string(work) + " checks, more than "
             + std::to_string(max_validation_work)});
    return out;
  }
  if (size.wide != 0)
    as_valijson_reads(value, false); // after out.json: the answer as written
  out.issues = validate(schema.schema, value, work <= max_listed_work);
  out.valid = out.issues.empty();
  return out;
}

std::string format_issues(const std::vector<schema_issue>& issues) {
  std::string out;
  for (auto& i : issues) {
    if (!out.empty())
      out += '\n';
    out += (i.pointer.empty() ? std::string("(root)") : i.pointer) + ": "
           + i.message;
  }
  return out;
}

} // namespace pgw

namespace pgw {

std::string format_issues_line(const std::vector<schema_issue>& issues) {
  std::string out;
  bool in_break = false;
  for (auto c : format_issues(issues)) {
    bool brk = c == '\r' || c == '\n';
    if (brk && !in_break)
      out += "; ";
    else if (!brk)
      out += c;
    in_break = brk;
  }
  return out;
}

} // namespace pgw
