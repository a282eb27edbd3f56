#include "transport/structured_body.hpp"

#include "config/json_text.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <string_view>

namespace pgw {

namespace {

namespace json = boost::json;

constexpr int max_strict_depth = 10;

bool strict_keyword(std::string_view key) {
  for (std::string_view k :
       {"type", "properties", "required", "additionalProperties", "items",
        "enum", "const", "anyOf", "description", "title", "$defs",
        "definitions", "$ref", "$schema"})
    if (key == k)
      return true;
  return false;
}

bool names_object_type(const json::value* type) {
  if (type == nullptr)
    return false;
  if (type->is_string())
    return type->get_string() == "object";
  if (type->is_array())
    for (auto& t : type->get_array())
      if (t.is_string() && t.get_string() == "object")
        return true;
  return false;
}

bool strict_node(const json::value& v, int depth);

bool strict_members(const json::value* members, int depth) {
  if (members == nullptr)
    return true;
  if (!members->is_object())
    return false;
  for (auto& kv : members->get_object())
    if (!strict_node(kv.value(), depth + 1))
      return false;
  return true;
}

bool strict_node(const json::value& v, int depth) {
  if (depth > max_strict_depth || !v.is_object())
    return false;
  auto& obj = v.get_object();
  for (auto& kv : obj)
    if (!strict_keyword(kv.key()))
      return false;
  auto props = obj.if_contains("properties");
  if (names_object_type(obj.if_contains("type")) || props != nullptr) {
    auto extra = obj.if_contains("additionalProperties");
    if (extra == nullptr || !extra->is_bool() || extra->get_bool())
      return false;
    auto required = obj.if_contains("required");
    size_t count = props != nullptr && props->is_object()
                     ? props->get_object().size()
                     : 0;
    if (count > 0) {
      if (required == nullptr || !required->is_array())
        return false;
      for (auto& kv : props->get_object()) {
        auto& req = required->get_array();
        if (std::find(req.begin(), req.end(), json::value(kv.key()))
            == req.end())
          return false;
      }
    }
  }
  if (!strict_members(props, depth) || !strict_members(obj.if_contains("$defs"), depth)
      || !strict_members(obj.if_contains("definitions"), depth))
    return false;
  if (auto items = obj.if_contains("items"); items && !strict_node(*items, depth + 1))
    return false;
  if (auto any = obj.if_contains("anyOf")) {
    if (!any->is_array())
      return false;
    for (auto& alt : any->get_array())
      if (!strict_node(alt, depth + 1))
        return false;
  }
  return true;
}

} // namespace

std::string schema_instructions(const std::string& schema_json) {
  return "Answer with one JSON value only: no code fences, no text before or "
         "after it. The value must conform to this JSON Schema:\n"
         + schema_json;
}

bool fits_strict_subset(const json::value& schema) {
  if (!schema.is_object())
    return false;
  auto& obj = schema.get_object();
  if (obj.contains("anyOf") || !names_object_type(obj.if_contains("type")))
    return false;
  return strict_node(schema, 0);
}

caf::error apply_structured(json::object& body, const std::string& schema_text,
                            schema_strategy rung) {
  json::error_code ec;
  auto schema = parse_json(schema_text, ec);
  if (ec)
    return make_error(error_code::invalid_request,
                      "schema: not valid JSON (" + ec.message() + ")");
  if (rung == schema_strategy::auto_select || rung == schema_strategy::json_schema) {
    bool strict = fits_strict_subset(schema);
    body["response_format"] = json::object{
      {"type", "json_schema"},
      {"json_schema", json::object{{"name", "response"},
                                   {"schema", std::move(schema)},
                                   {"strict", strict}}}};
    return {};
  }
  // The rung decides the format: one from OVERLAY or extra_body goes.
  if (rung == schema_strategy::json_object)
    body["response_format"] = json::object{{"type", "json_object"}};
  else
    body.erase("response_format");
  auto text = schema_instructions(json_text(schema));
  auto& messages = body["messages"];
  if (!messages.is_array())
    messages = json::array{};
  auto& list = messages.get_array();
  if (!list.empty() && list.front().is_object()) {
    auto& first = list.front().get_object();
    auto role = first.if_contains("role");
    auto content = first.if_contains("content");
    if (role && role->is_string() && role->get_string() == "system" && content
        && content->is_string()) {
      std::string merged{content->get_string()};
      first["content"] = merged + (merged.empty() ? "" : "\n\n") + text;
      return {};
    }
  }
  list.insert(list.begin(), json::object{{"role", "system"}, {"content", text}});
  return {};
}

} // namespace pgw
