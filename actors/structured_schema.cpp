// The only translation unit that instantiates valijson (template-heavy):
// JSON Schema compilation, the per-digest cache and answer validation.

#include "actors/structured_schema.hpp"

#include "actors/structured_repair.hpp"
#include "messages/errors.hpp"

// valijson throws on a schema it cannot use only with this set (the root
// CMakeLists.txt does); otherwise it aborts the process, and the catches
// below would never run.
#if !VALIJSON_USE_EXCEPTIONS
#error "valijson must be compiled with VALIJSON_USE_EXCEPTIONS=1"
#endif

#include <boost/json.hpp>
#include <openssl/evp.h>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string_view>

namespace pgw {

namespace json = boost::json;

class compiled_schema {
public:
  json::value document;
  valijson::Schema schema;
  /// The schema uses `pattern` or `patternProperties` (std::regex).
  bool has_patterns = false;
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

/// Schemas kept compiled at most; the cache starts over when full.
constexpr size_t cache_capacity = 256;

/// Longest string (value or key) checked against a `pattern`: libstdc++'s
/// std::regex recurses per character and overflows an 8 MiB stack near
/// 20,000 characters, and upstream answers are untrusted.
constexpr size_t max_pattern_subject = 2048;

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

/// valijson's context ("<root>", "[name]", "[0]", ...) as a JSON pointer.
std::string to_pointer(const std::vector<std::string>& context) {
  std::string out;
  for (auto& part : context) {
    if (part == "<root>")
      continue;
    auto token = part.size() >= 2 && part.front() == '[' && part.back() == ']'
                   ? part.substr(1, part.size() - 2)
                   : part;
    out += '/';
    for (char c : token) {
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

bool extends(const std::vector<std::string>& longer,
             const std::vector<std::string>& prefix) {
  return longer.size() > prefix.size()
         && std::equal(prefix.begin(), prefix.end(), longer.begin());
}

/// Validates `value` and returns the errors, most specific only (an error
/// whose location has a more specific error below it only says "a child
/// failed"), capped at `max_schema_issues` plus a summary line.
std::vector<schema_issue> validate(const valijson::Schema& schema,
                                   const json::value& value) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::BoostJsonAdapter target(value);
  try {
    if (validator.validate(schema, target, &results))
      return {};
  } catch (const std::exception& e) {
    // A `pattern` that std::regex rejects surfaces only here.
    return {{"", std::string("the schema could not be applied: ") + e.what()}};
  }
  std::vector<valijson::ValidationResults::Error> errors;
  valijson::ValidationResults::Error err;
  while (results.popError(err))
    errors.push_back(err);
  std::vector<schema_issue> out;
  size_t kept = 0;
  for (auto& e : errors) {
    bool general = std::any_of(errors.begin(), errors.end(), [&](auto& other) {
      return extends(other.context, e.context);
    });
    if (general)
      continue;
    if (++kept <= max_schema_issues)
      out.push_back({to_pointer(e.context), e.description});
  }
  if (kept > max_schema_issues)
    out.push_back({"", "... and " + std::to_string(kept - max_schema_issues)
                         + " more errors"});
  if (out.empty())
    out.push_back({"", "the value does not match the schema"});
  return out;
}

// -- checks valijson does not make safely ----------------------------------------

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key)
    out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1")
                                                    : std::string(1, c);
  return out;
}

/// A problem found in the schema document, with its pointer.
struct schema_problem {
  std::string pointer;
  std::string message;
};

/// Walks the subschemas of `node` (draft 7 keywords that hold schemas):
/// every `pattern` and `patternProperties` key must compile as a
/// std::regex (valijson would only fail later, on every answer), and every
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
      has_patterns = true;
      if (auto err = regex_error(p->get_string()))
        return schema_problem{at + "/pattern", *err};
    }
    if (auto pp = obj.if_contains("patternProperties"); pp && pp->is_object()) {
      has_patterns = true;
      for (auto& kv : pp->get_object())
        if (auto err = regex_error(kv.key()))
          return schema_problem{at + "/patternProperties/"
                                  + pointer_token(kv.key()),
                                *err};
    }
    if (auto ref = obj.if_contains("$ref"); ref && ref->is_string())
      if (auto p = check_ref(std::string(ref->get_string()), at + "/$ref",
                             depth))
        return p;
    for (auto& kv : obj) {
      std::string key(kv.key());
      auto& v = kv.value();
      auto here = at + "/" + pointer_token(key);
      if (key == "properties" || key == "patternProperties"
          || key == "definitions" || key == "$defs" || key == "dependencies") {
        if (v.is_object())
          for (auto& sub : v.get_object())
            if (auto p = walk(sub.value(), here + "/" + pointer_token(sub.key()),
                              depth + 1))
              return p;
      } else if (key == "allOf" || key == "anyOf" || key == "oneOf"
                 || (key == "items" && v.is_array())) {
        if (v.is_array())
          for (size_t i = 0; i < v.get_array().size(); ++i)
            if (auto p = walk(v.get_array()[i], here + "/" + std::to_string(i),
                              depth + 1))
              return p;
      } else if (key == "items" || key == "additionalItems"
                 || key == "additionalProperties" || key == "not"
                 || key == "if" || key == "then" || key == "else"
                 || key == "contains" || key == "propertyNames") {
        if (auto p = walk(v, here, depth + 1))
          return p;
      }
    }
    return std::nullopt;
  }

  bool has_patterns = false;

private:
  static std::optional<std::string> regex_error(std::string_view pattern) {
    try {
      std::regex re{std::string(pattern)};
      return std::nullopt;
    } catch (const std::regex_error& e) {
      return std::string("not a regular expression this validator accepts (")
             + e.what() + ")";
    }
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
    auto target = resolve(ref.substr(1));
    if (target == nullptr)
      return schema_problem{at, "$ref \"" + ref
                                  + "\" does not resolve in the schema"};
    if (ref_loops(ref))
      return schema_problem{at, "$ref chain refers back to itself"};
    if (!walked_targets_.insert(target).second)
      return std::nullopt;
    return walk(*target, ref.substr(1), depth + 1);
  }

  /// The node a `$ref` fragment names, read as valijson reads it (empty
  /// tokens skipped, `~1` `~0` and then %-escapes decoded, arrays indexed
  /// by digits), or nullptr.
  const json::value* resolve(const std::string& pointer) const {
    if (!pointer.empty() && pointer.front() != '/')
      return nullptr;
    const json::value* node = &root_;
    size_t start = 0;
    while (node != nullptr && start < pointer.size()) {
      auto end = std::min(pointer.find('/', start + 1), pointer.size());
      auto token = decode_token(pointer.substr(start + 1, end - start - 1));
      start = end;
      if (!token)
        return nullptr;
      if (token->empty())
        continue;
      if (node->is_object()) {
        node = node->get_object().if_contains(*token);
      } else if (node->is_array() && token->size() < 10
                 && std::all_of(token->begin(), token->end(),
                                [](char c) { return c >= '0' && c <= '9'; })) {
        auto index = std::stoul(*token);
        auto& arr = node->get_array();
        node = index < arr.size() ? &arr[index] : nullptr;
      } else {
        node = nullptr;
      }
    }
    return node;
  }

  static std::optional<std::string> decode_token(std::string token) {
    auto replace_all = [&token](std::string_view from, char to) {
      for (auto n = token.find(from); n != std::string::npos;
           n = token.find(from, n + 1))
        token.replace(n, from.size(), 1, to);
    };
    replace_all("~1", '/');
    replace_all("~0", '~');
    auto hex = [&token](size_t i) {
      return i < token.size()
             && std::isxdigit(static_cast<unsigned char>(token[i])) != 0;
    };
    for (auto n = token.find('%'); n != std::string::npos;
         n = token.find('%', n + 1)) {
      if (!hex(n + 1) || !hex(n + 2))
        return std::nullopt;
      token.replace(n, 3, 1,
                    static_cast<char>(std::stoi(token.substr(n + 1, 2),
                                                nullptr, 16)));
    }
    return token;
  }

  /// True when following local `$ref`s from `ref` through nodes that are
  /// themselves `$ref`s comes back to a node already seen.
  bool ref_loops(std::string ref) const {
    std::set<const json::value*> seen;
    while (!ref.empty() && ref.front() == '#') {
      auto target = resolve(ref.substr(1));
      if (target == nullptr || !target->is_object())
        return false;
      if (!seen.insert(target).second)
        return true;
      auto next = target->get_object().if_contains("$ref");
      if (next == nullptr || !next->is_string())
        return false;
      ref = std::string(next->get_string());
    }
    return false;
  }

  const json::value& root_;
  std::set<const json::value*> walked_targets_;
};

/// Strings and keys of `value` too long to check against a pattern.
void long_strings(const json::value& value, const std::string& at,
                  std::vector<schema_issue>& out) {
  auto too_long = [&](size_t n, const std::string& where) {
    if (n > max_pattern_subject && out.size() < max_schema_issues)
      out.push_back({where, "a string of " + std::to_string(n)
                              + " bytes is longer than "
                              + std::to_string(max_pattern_subject)
                              + ", the most checked against a pattern"});
  };
  if (value.is_string()) {
    too_long(value.get_string().size(), at);
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.get_array().size(); ++i)
      long_strings(value.get_array()[i], at + "/" + std::to_string(i), out);
  } else if (value.is_object()) {
    for (auto& kv : value.get_object()) {
      auto here = at + "/" + pointer_token(kv.key());
      too_long(kv.key().size(), here);
      long_strings(kv.value(), here, out);
    }
  }
}

const valijson::Schema& meta_schema() {
  static const auto compiled = [] {
    auto doc = json::parse(draft7_meta_schema);
    auto schema = std::make_unique<valijson::Schema>();
    valijson::SchemaParser parser{valijson::SchemaParser::kDraft7};
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
  json::error_code ec;
  auto doc = json::parse(text, ec);
  if (ec)
    return make_error(error_code::invalid_request,
                      "schema: not valid JSON (" + ec.message() + ")");
  if (!doc.is_object() && !doc.is_bool())
    return invalid_schema("", "a JSON Schema is an object (or a boolean)");
  auto issues = validate(meta_schema(), doc);
  if (!issues.empty())
    return invalid_schema(issues.front().pointer, issues.front().message);
  schema_walker walker{doc};
  if (auto problem = walker.walk(doc, ""))
    return invalid_schema(problem->pointer, problem->message);
  auto out = std::make_shared<compiled_schema>();
  out->has_patterns = walker.has_patterns;
  out->document = std::move(doc);
  try {
    valijson::SchemaParser parser{valijson::SchemaParser::kDraft7};
    parser.populateSchema(valijson::adapters::BoostJsonAdapter(out->document),
                          out->schema);
  } catch (const std::exception& e) {
    return invalid_schema("", e.what());
  }
  return schema_ptr{std::move(out)};
}

struct schema_cache {
  std::mutex mtx;
  std::map<std::string, schema_ptr> by_digest;
};

schema_cache& cache() {
  static schema_cache instance;
  return instance;
}

} // namespace

caf::expected<schema_ptr> compile_schema(const std::string& schema_text) {
  auto digest = sha256_hex(schema_text);
  auto& c = cache();
  {
    std::lock_guard<std::mutex> guard{c.mtx};
    if (auto i = c.by_digest.find(digest); i != c.by_digest.end())
      return i->second;
  }
  // Compiled outside the lock; two threads may compile the same text once
  // each, and the first stored wins.
  auto compiled = compile(schema_text);
  if (!compiled)
    return compiled;
  std::lock_guard<std::mutex> guard{c.mtx};
  if (c.by_digest.size() >= cache_capacity)
    c.by_digest.clear();
  return c.by_digest.emplace(digest, *compiled).first->second;
}

size_t compiled_schema_count() {
  auto& c = cache();
  std::lock_guard<std::mutex> guard{c.mtx};
  return c.by_digest.size();
}

structured_check check_answer(const compiled_schema& schema,
                              const std::string& content) {
  structured_check out;
  json::error_code ec;
  auto value = json::parse(content, ec);
  if (ec) {
    auto fixed = repair_json(content);
    json::error_code ec2;
    if (fixed.changed)
      value = json::parse(fixed.text, ec2);
    if (!fixed.changed || ec2) {
      out.issues.push_back(
        {"", "the answer is not valid JSON (" + ec.message() + ")"});
      return out;
    }
    out.repaired = true;
  }
  out.json = json::serialize(value);
  if (schema.has_patterns) {
    long_strings(value, "", out.issues);
    if (!out.issues.empty())
      return out;
  }
  out.issues = validate(schema.schema, value);
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
