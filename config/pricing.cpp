// The price table: config/prices.json (compiled in as a fallback) or the file
// PGW_PRICING_PATH names.

#include "config/pricing.hpp"
#include "config/file.hpp"

#include "config/keys.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pgw::detail {

/// Generated from config/prices.json by CMake.
const std::string& embedded_prices_json();

} // namespace pgw::detail

namespace pgw {

namespace {

namespace json = boost::json;

constexpr const char* default_prices_path = "config/prices.json";

caf::error fail(const std::string& origin, const std::string& what) {
  return make_error(error_code::invalid_config,
                    fmt::format("price table {}: {}", origin, what));
}

/// `models["gpt-4.1"]`: keys quoted, since model names contain dots.
std::string member_path(const std::string& parent, const std::string& key) {
  return fmt::format("{}[\"{}\"]", parent, key);
}

bool is_comment(const std::string& key) {
  return !key.empty() && key.front() == '_';
}

/// "SCOPE/name" as stored and looked up: scope upper case, name lower case,
/// the spelling config/load.cpp gives them.
std::string source_key(const std::string& scope, const std::string& name) {
  return detail::to_upper(scope) + "/" + detail::to_lower(name);
}

caf::error parse_price(const std::string& origin, const std::string& path,
                       const json::value& entry, token_price& out) {
  if (!entry.is_object())
    return fail(origin, fmt::format("{}: must be an object {{\"input\": x, "
                                    "\"output\": y}} (USD per million tokens)"
                                    " or {{\"page\": z}} (USD per page)",
                                    path));
  bool has_input = false;
  bool has_output = false;
  for (auto& [key, value] : entry.get_object()) {
    std::string field{key};
    if (is_comment(field))
      continue;
    if (field != "input" && field != "output" && field != "page")
      return fail(origin, fmt::format("{}: unknown field \"{}\" (expected "
                                      "input and output, or page)",
                                      path, field));
    auto where = path + "." + field;
    auto unit = field == "page" ? "USD per page" : "USD per million tokens";
    if (!value.is_number())
      return fail(origin, fmt::format("{}: must be a number ({})", where,
                                      unit));
    auto x = value.to_number<double>();
    if (!std::isfinite(x) || x < 0)
      return fail(origin, fmt::format("{}: must be finite and >= 0, not {}",
                                      where, x));
    if (field == "input") {
      out.input_per_million = x;
      has_input = true;
    } else if (field == "output") {
      out.output_per_million = x;
      has_output = true;
    } else {
      out.per_page = x;
    }
  }
  // A page price alone prices pages only; tokens need both prices.
  out.per_token = has_input || has_output || !out.per_page;
  if (out.per_token && !has_input)
    return fail(origin, fmt::format("{}.input: missing (USD per million "
                                    "input tokens)",
                                    path));
  if (out.per_token && !has_output)
    return fail(origin, fmt::format("{}.output: missing (USD per million "
                                    "output tokens)",
                                    path));
  return {};
}

/// Parses the members of "models" or "sources" into `out`.
caf::error parse_section(const std::string& origin, const std::string& name,
                         const json::value& section, bool sources,
                         std::map<std::string, token_price>& out) {
  if (!section.is_object())
    return fail(origin, fmt::format("{}: must be an object mapping {} to "
                                    "prices",
                                    name,
                                    sources ? "\"SCOPE/name\"" : "model names"));
  for (auto& [key, entry] : section.get_object()) {
    std::string raw{key};
    if (is_comment(raw))
      continue;
    auto path = member_path(name, raw);
    std::string stored = raw;
    if (sources) {
      auto slash = raw.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == raw.size()
          || raw.find('/', slash + 1) != std::string::npos)
        return fail(origin, fmt::format("{}: a per-source key is "
                                        "\"SCOPE/name\" (e.g. \"LLM/a\")",
                                        path));
      stored = source_key(raw.substr(0, slash), raw.substr(slash + 1));
    } else if (raw.empty()) {
      return fail(origin, fmt::format("{}: a model name must not be empty",
                                      path));
    }
    token_price price;
    if (auto err = parse_price(origin, path, entry, price))
      return err;
    if (!out.emplace(stored, price).second)
      return fail(origin, fmt::format("{}: defined twice (source names are "
                                      "case-insensitive)",
                                      path));
  }
  return {};
}

/// Parses a whole table into the given members.
caf::error parse_into(const std::string& origin, const std::string& json_text,
                      std::map<std::string, token_price>& models,
                      std::map<std::string, token_price>& srcs,
                      std::string& read_on) {
  boost::system::error_code ec;
  auto doc = json::parse(json_text, ec);
  if (ec)
    return fail(origin, fmt::format("not valid JSON ({})", ec.message()));
  if (!doc.is_object())
    return fail(origin, "must be a JSON object {\"models\": {...}, "
                        "\"sources\": {...}, \"read_on\": \"...\"}");
  for (auto& [key, value] : doc.get_object()) {
    std::string field{key};
    if (is_comment(field))
      continue;
    if (field == "models") {
      if (auto err = parse_section(origin, "models", value, false, models))
        return err;
    } else if (field == "sources") {
      if (auto err = parse_section(origin, "sources", value, true, srcs))
        return err;
    } else if (field == "read_on") {
      if (!value.is_string())
        return fail(origin, "read_on: must be a string (when the prices "
                            "were read)");
      read_on = std::string{value.get_string()};
    } else {
      return fail(origin, fmt::format("{}: unknown field (expected models, "
                                      "sources, read_on; '_' keys are "
                                      "comments)",
                                      field));
    }
  }
  return {};
}

} // namespace

caf::expected<price_table> price_table::parse(const std::string& json_text) {
  price_table result;
  if (auto err = parse_into("(inline)", json_text, result.models_,
                            result.sources_, result.read_on_))
    return err;
  return result;
}

caf::expected<price_table> price_table::load(const std::string& path) {
  std::string origin = path;
  std::string text;
  std::error_code fs_err;
  if (path == default_prices_path
      && !std::filesystem::exists(path, fs_err)) {
    origin = "(built in)";
    text = detail::embedded_prices_json();
  } else {
    if (path.empty())
      return make_error(error_code::invalid_config,
                        "PGW_PRICING_PATH=: must name a price table JSON "
                        "file");
    auto content = read_config_file(
      path, fmt::format("PGW_PRICING_PATH={} (price table JSON file)", path));
    if (!content)
      return std::move(content.error());
    text = std::move(*content);
  }
  price_table result;
  if (auto err = parse_into(origin, text, result.models_, result.sources_,
                            result.read_on_))
    return err;
  return result;
}

std::optional<token_price> price_table::find(const std::string& scope,
                                             const std::string& source,
                                             const std::string& model) const {
  if (!sources_.empty()) {
    if (auto i = sources_.find(source_key(scope, source)); i != sources_.end())
      return i->second;
  }
  if (auto i = models_.find(model); i != models_.end())
    return i->second;
  // Longest prefix: every prefix of `model` is a candidate; try the longest
  // first. Model names are short, so this is a handful of map lookups.
  for (auto len = model.size(); len > 0; --len) {
    if (auto i = models_.find(model.substr(0, len)); i != models_.end())
      return i->second;
  }
  return std::nullopt;
}

std::optional<double> price_table::cost(const std::string& scope,
                                        const std::string& source,
                                        const std::string& model,
                                        int64_t input_tokens,
                                        int64_t output_tokens) const {
  auto price = find(scope, source, model);
  if (!price || !price->per_token)
    return std::nullopt;
  return (static_cast<double>(input_tokens) * price->input_per_million
          + static_cast<double>(output_tokens) * price->output_per_million)
         / 1e6;
}

std::optional<double> price_table::page_cost(const std::string& scope,
                                             const std::string& source,
                                             const std::string& model,
                                             int64_t pages) const {
  auto price = find(scope, source, model);
  if (!price || !price->per_page)
    return std::nullopt;
  return static_cast<double>(pages) * *price->per_page;
}

} // namespace pgw
