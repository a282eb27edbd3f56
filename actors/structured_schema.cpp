// The only translation unit that instantiates valijson (template-heavy):
// JSON Schema compilation, the per-digest cache and answer validation.

#include "actors/structured_schema.hpp"

#include "actors/structured_repair.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <algorithm>
#include <map>
#include <mutex>

namespace pgw {

namespace json = boost::json;

class compiled_schema {
public:
  json::value document;
  valijson::Schema schema;
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
  auto out = std::make_shared<compiled_schema>();
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
