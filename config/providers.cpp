// Provider profiles: config/providers.json (compiled in) or the file
// PGW_PROVIDERS_PATH names.

#include "config/file.hpp"
#include "config/json_text.hpp"
#include "config/loader.hpp"
#include "config/keys.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace pgw::detail {

/// Generated from config/providers.json by CMake.
const std::string& embedded_providers_json();

} // namespace pgw::detail

namespace pgw {

namespace {

namespace json = boost::json;

caf::error fail(const std::string& origin, const std::string& what) {
  return make_error(error_code::invalid_config,
                    fmt::format("providers table {}: {}", origin, what));
}

const char* kind_name(json::kind k) {
  switch (k) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value";
}

/// Provider names become key segments: letters and digits, `-` or single
/// `_` inside.
bool is_provider_name(const std::string& name) {
  return name.find("__") == std::string::npos && detail::is_name_segment(name);
}

/// A dotted body path: non-empty segments separated by single dots.
bool is_body_path(const std::string& path) {
  if (path.empty() || path.front() == '.' || path.back() == '.'
      || path.find("..") != std::string::npos)
    return false;
  for (char ch : path)
    if (std::isspace(static_cast<unsigned char>(ch)))
      return false;
  return true;
}

caf::error parse_effort(const std::string& origin, const std::string& name,
                        const json::value& effort, provider_profile& out) {
  if (effort.is_null())
    return {};
  auto where = fmt::format("provider {} field effort", name);
  if (!effort.is_object())
    return fail(origin, fmt::format("{}: must be null or an object "
                                    "{{\"field\", \"values\"}}, not {}",
                                    where, kind_name(effort.kind())));
  auto& obj = effort.get_object();
  for (auto& [key, value] : obj) {
    (void) value;
    if (key != "field" && key != "values")
      return fail(origin, fmt::format("{}: unknown field \"{}\" (expected "
                                      "field and values)",
                                      where, std::string(key)));
  }
  auto field = obj.if_contains("field");
  if (field == nullptr || !field->is_string())
    return fail(origin, fmt::format("{}.field: must be a string (dotted "
                                    "body path such as reasoning.effort)",
                                    where));
  std::string path{field->get_string()};
  if (!is_body_path(path))
    return fail(origin, fmt::format("{}.field: \"{}\" is not a dotted body "
                                    "path such as reasoning.effort",
                                    where, path));
  auto values = obj.if_contains("values");
  if (values == nullptr || !values->is_object())
    return fail(origin, fmt::format("{}.values: must be an object mapping "
                                    "none/low/medium/high to JSON values",
                                    where));
  std::map<std::string, std::string> mapped;
  for (auto& [level, value] : values->get_object()) {
    std::string level_name{level};
    if (level_name != "none" && level_name != "low" && level_name != "medium"
        && level_name != "high")
      return fail(origin, fmt::format("{}.values: unknown effort \"{}\" "
                                      "(expected none, low, medium, high)",
                                      where, level_name));
    if (value.is_null())
      return fail(origin,
                  fmt::format("{}.values.{}: must not be null (leave the "
                              "name out to not send the effort)",
                              where, level_name));
    mapped[level_name] = json_text(value);
  }
  out.effort_field = std::move(path);
  out.effort_values = std::move(mapped);
  return {};
}

/// `structured`: the response-format rungs the provider supports, as an
/// array of json_schema / json_object / prompt; kept strongest first, with
/// `prompt` always available.
caf::error parse_structured(const std::string& origin, const std::string& name,
                            const json::value& value, provider_profile& out) {
  auto where = fmt::format("provider {} field structured", name);
  if (!value.is_array())
    return fail(origin, fmt::format("{}: must be an array of json_schema, "
                                    "json_object, prompt, not {}",
                                    where, kind_name(value.kind())));
  std::vector<schema_strategy> rungs;
  for (auto& v : value.get_array()) {
    auto rung = v.is_string() ? parse_schema_strategy(std::string(v.get_string()))
                              : std::nullopt;
    if (!rung || *rung == schema_strategy::auto_select)
      return fail(origin, fmt::format("{}: {} is not one of json_schema, "
                                      "json_object, prompt",
                                      where, json::serialize(v)));
    rungs.push_back(*rung);
  }
  out.structured.clear();
  for (auto rung : {schema_strategy::json_schema, schema_strategy::json_object,
                    schema_strategy::prompt})
    if (rung == schema_strategy::prompt
        || std::find(rungs.begin(), rungs.end(), rung) != rungs.end())
      out.structured.push_back(rung);
  return {};
}

caf::error parse_profile(const std::string& origin, const std::string& name,
                         const json::value& entry, provider_profile& out) {
  if (!entry.is_object())
    return fail(origin, fmt::format("provider {}: must be an object, not {}",
                                    name, kind_name(entry.kind())));
  out.name = name;
  for (auto& [key, value] : entry.get_object()) {
    std::string field{key};
    if (!field.empty() && field.front() == '_')
      continue; // comment
    if (field == "effort") {
      if (auto err = parse_effort(origin, name, value, out))
        return err;
    } else if (field == "max_tokens_field") {
      if (!value.is_string() || value.get_string().empty())
        return fail(origin,
                    fmt::format("provider {} field max_tokens_field: must be "
                                "a non-empty string (e.g. max_tokens)",
                                name));
      out.max_tokens_field = std::string{value.get_string()};
    } else if (field == "stream_usage") {
      if (!value.is_bool())
        return fail(origin, fmt::format("provider {} field stream_usage: "
                                        "must be true or false, not {}",
                                        name, kind_name(value.kind())));
      out.stream_usage = value.get_bool();
    } else if (field == "structured") {
      if (auto err = parse_structured(origin, name, value, out))
        return err;
    } else {
      return fail(origin,
                  fmt::format("provider {}: unknown field \"{}\" (expected "
                              "effort, max_tokens_field, stream_usage, "
                              "structured)",
                              name, field));
    }
  }
  return {};
}

caf::expected<std::map<std::string, provider_profile>>
parse_table(const std::string& origin, const std::string& json_text) {
  boost::system::error_code ec;
  auto doc = json::parse(json_text, ec);
  if (ec)
    return fail(origin, fmt::format("not valid JSON ({})", ec.message()));
  if (!doc.is_object())
    return fail(origin, fmt::format("must be a JSON object of providers, "
                                    "not {}",
                                    kind_name(doc.kind())));
  std::map<std::string, provider_profile> result;
  for (auto& [key, entry] : doc.get_object()) {
    std::string raw{key};
    if (!raw.empty() && raw.front() == '_')
      continue; // comment
    if (!is_provider_name(raw))
      return fail(origin, fmt::format("provider \"{}\": a name is letters, "
                                      "digits, '-' or single '_' inside",
                                      raw));
    if (detail::is_reserved_segment(raw))
      return fail(origin, fmt::format("provider {}: the name is a reserved "
                                      "scope-key segment",
                                      raw));
    auto name = detail::to_lower(raw);
    if (result.count(name) > 0)
      return fail(origin, fmt::format("provider {}: defined twice (names "
                                      "are case-insensitive)",
                                      name));
    provider_profile profile;
    if (auto err = parse_profile(origin, name, entry, profile))
      return err;
    result.emplace(name, std::move(profile));
  }
  if (result.empty())
    return fail(origin, "defines no provider");
  return result;
}

} // namespace

caf::expected<std::map<std::string, provider_profile>>
parse_providers(const std::string& json_text) {
  return parse_table("(inline)", json_text);
}

caf::expected<std::map<std::string, provider_profile>>
load_providers(const env_map& env) {
  auto i = env.find("PGW_PROVIDERS_PATH");
  if (i == env.end())
    return parse_table("(built in)", detail::embedded_providers_json());
  auto& path = i->second;
  if (path.empty())
    return make_error(error_code::invalid_config,
                      "PGW_PROVIDERS_PATH=: must name a providers JSON file "
                      "(unset it to use the built-in table)");
  auto text = read_config_file(
    path, fmt::format("PGW_PROVIDERS_PATH={} (providers JSON file)", path));
  if (!text)
    return std::move(text.error());
  return parse_table(path, *text);
}

} // namespace pgw
