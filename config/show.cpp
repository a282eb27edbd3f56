// The effective settings for `pgw-actor config show`, secrets masked.

#include "config/loader.hpp"
#include "config/keys.hpp"
#include "config/json_text.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace pgw {

namespace {

namespace json = boost::json;

using detail::format_number;
using detail::mask_url;

constexpr const char* unset = "(unset)";
constexpr const char* masked = "***";

/// Unset = max(300, cooldown) (SPEC §3).
double effective_max_cooldown(const breaker_config& br) {
  return br.max_cooldown_s ? *br.max_cooldown_s
                           : std::max(300.0, br.cooldown_s);
}

std::string text(double x) {
  return format_number(x);
}

std::string text(int64_t x) {
  return std::to_string(x);
}

std::string text(bool x) {
  return x ? "true" : "false";
}

template <class T>
std::string text(const std::optional<T>& x) {
  return x ? text(*x) : unset;
}

json::value value_of(double x) {
  return x;
}

json::value value_of(int64_t x) {
  return x;
}

template <class T>
json::value value_of(const std::optional<T>& x) {
  return x ? value_of(*x) : json::value{};
}

/// Header names with every value replaced by `***`.
json::object masked_headers(const source_config& src) {
  json::object out;
  for (auto& header : src.headers)
    out[header.first] = masked;
  return out;
}

/// The overlay as JSON; text that does not parse (only possible for settings
/// that skipped validate) is kept as a string.
json::value overlay_value(const source_config& src) {
  boost::system::error_code ec;
  auto doc = parse_json(src.overlay, ec);
  if (ec)
    return json::string(src.overlay);
  return doc;
}

/// Compact text of a JSON value, numbers in plain decimal.
std::string to_text(const json::value& v) {
  return json_text(v);
}

/// Where `field` of `src` came from: "source", "scope" or "default".
std::string origin_of(const source_config& src, const std::string& field) {
  auto o = src.origin.find(field);
  return o == src.origin.end() ? "default" : o->second;
}

/// (key, value) pairs of a source in env-key spelling, values as shown.
std::vector<std::pair<std::string, std::string>>
source_lines(const std::string& scope, const source_config& src) {
  auto key = [&](const char* field) {
    return detail::own_source_key(scope, src, field);
  };
  return {
    {key("BASE_URL"), mask_url(src.base_url)},
    {key("MODEL"), src.model},
    {key("API_KEY"), src.api_key.empty() ? unset : masked},
    {key("RPM"), text(src.rpm)},
    {key("TPM"), text(src.tpm)},
    {key("MAX_CONCURRENCY"), text(src.max_concurrency)},
    {key("EST_TOKENS"), text(src.est_tokens)},
    {key("TIMEOUT_S"), text(src.timeout_s)},
    {key("CONNECT_TIMEOUT_S"), text(src.connect_timeout_s)},
    {key("TTFT_TIMEOUT_S"), text(src.ttft_timeout_s)},
    {key("STREAM_IDLE_TIMEOUT_S"), text(src.stream_idle_timeout_s)},
    {key("PRIORITY"), text(src.priority)},
    {key("OVERLAY"), to_text(overlay_value(src))},
    {key("HEADERS"), to_text(masked_headers(src))},
    {key("KIND"), to_string(src.kind)},
    {key("CA_FILE"), src.ca_file.empty() ? unset : src.ca_file},
    {key("MAX_RESPONSE_BYTES"), text(src.max_response_bytes)},
    {key("MAX_BATCH_INPUTS"), text(src.max_batch_inputs)},
    {key("MAX_BATCH_TOKENS"), text(src.max_batch_tokens)},
    {key("MAX_IMAGE_BYTES"), text(src.max_image_bytes)},
    {key("OCR_PROMPT_TEXT"), src.ocr_prompt_text},
    {key("OCR_PROMPT_LAYOUT"), src.ocr_prompt_layout},
  };
}

/// Comment lines saying which of a source's values came from the scope's
/// defaults and which are built in (the rest are its own keys).
std::string provenance(const std::string& scope, const source_config& src) {
  std::string from_scope, built_in;
  for (auto& line : source_lines(scope, src)) {
    auto field = line.first.substr(
      detail::own_source_key(scope, src, "").size());
    auto origin = origin_of(src, field);
    auto& list = origin == "scope" ? from_scope : built_in;
    if (origin == "source" || field == "API_KEY")
      continue;
    list += (list.empty() ? "" : ", ")
            + (origin == "scope" ? detail::scope_key(scope, field) : field);
  }
  std::string out;
  if (!from_scope.empty())
    out += "# from the scope: " + from_scope + "\n";
  if (!built_in.empty())
    out += "# built-in defaults: " + built_in + "\n";
  return out;
}

std::vector<std::pair<std::string, std::string>>
scope_lines(const std::string& name, const scope_config& sc) {
  auto key = [&](const char* suffix) { return detail::scope_key(name, suffix); };
  auto& br = sc.breaker;
  return {
    {key("SELECTOR"), to_string(sc.selector)},
    {key("STREAM"), text(sc.stream)},
    {key("MAX_ATTEMPTS"), text(sc.max_attempts)},
    {key("BACKOFF_BASE_S"), text(sc.backoff_base_s)},
    {key("BACKOFF_MAX_S"), text(sc.backoff_max_s)},
    {key("STALL_WINDOW_S"), text(sc.stall_window_s)},
    {key("CALL_DEADLINE_S"), text(sc.call_deadline_s)},
    {key("HEDGE__AFTER_S"), text(sc.hedge.after_s)},
    {key("HEDGE__MAX_EXTRA"), text(sc.hedge.max_extra)},
    {key("BREAKER__THRESHOLD"), text(br.threshold)},
    {key("BREAKER__COOLDOWN_S"), text(br.cooldown_s)},
    {key("BREAKER__MIN_CALLS"), text(br.min_calls)},
    {key("BREAKER__FAIL_RATE"), text(br.fail_rate)},
    {key("BREAKER__WINDOW_S"), text(br.window_s)},
    {key("BREAKER__MAX_COOLDOWN_S"), text(effective_max_cooldown(br))},
    {key("ON_QUOTA_FULL"), to_string(sc.on_quota_full)},
    {key("ON_CIRCUIT_OPEN"), to_string(sc.on_circuit_open)},
    {key("STRUCTURED__MAX_REASKS"), text(sc.structured_max_reasks)},
    {key("BATCH_CONCURRENCY"), text(sc.batch_concurrency)},
    {key("CACHE__ENABLED"), text(sc.cache.enabled)},
    {key("CACHE__FLEET_SINGLE_FLIGHT"), text(sc.cache.fleet_single_flight)},
    {key("CACHE__STORE_LENGTH"), text(sc.cache.store_length)},
    {key("CACHE__TTL_S"), text(sc.cache.ttl_s)},
    {key("CACHE__MAX_ENTRIES"), text(sc.cache.max_entries)},
    {key("CACHE__MAX_BYTES"), text(sc.cache.max_bytes)},
  };
}

std::vector<std::pair<std::string, std::string>>
global_lines(const global_config& g) {
  return {
    {"PGW_LIMITER_BACKEND", to_string(g.limiter_backend)},
    {"PGW_BREAKER_BACKEND", to_string(g.breaker_backend)},
    {"PGW_CACHE_BACKEND", to_string(g.cache_backend)},
    {"PGW_CACHE_TTL_S", text(g.cache_ttl_s)},
    {"PGW_CACHE_NAMESPACE", g.cache_namespace},
    {"REDIS_URL", mask_url(g.redis_url)},
    {"PGW_PRICING_PATH", g.pricing_path},
    {"PGW_TELEMETRY_DB", g.telemetry_db ? *g.telemetry_db : unset},
    {"PGW_TELEMETRY_CONTENT", g.telemetry_content ? "on" : "off"},
    {"PGW_TRANSPORT", to_string(g.transport)},
    {"PGW_TRANSPORT_THREADS", text(g.transport_threads)},
    {"PGW_LOG", g.log_level},
    {"PGW_SCHEDULER_THREADS", text(g.scheduler_threads)},
    {"PGW_PROVIDERS_PATH",
     g.providers_path.empty() ? unset : g.providers_path},
    {"PGW_SERVE_KEYS_FILE",
     g.serve.keys_file.empty() ? unset : g.serve.keys_file},
    {"PGW_SERVE_MAX_BODY_BYTES", text(g.serve.max_body_bytes)},
    {"PGW_SERVE_MAX_INFLIGHT", text(g.serve.max_inflight)},
    {"PGW_SERVE_DRAIN_S", text(g.serve.drain_s)},
    {"PGW_SERVE_READ_TIMEOUT_S", text(g.serve.read_timeout_s)},
    {"PGW_SERVE_WRITE_TIMEOUT_S", text(g.serve.write_timeout_s)},
  };
}

void append(std::string& out,
            const std::vector<std::pair<std::string, std::string>>& lines) {
  for (auto& [key, value] : lines) {
    out += key;
    out += '=';
    out += value;
    out += '\n';
  }
}

/// FIELD (lower case) → "source", "scope" or "default" for every field.
json::object origin_json(const source_config& src) {
  json::object out;
  for (auto field : {"BASE_URL", "MODEL", "API_KEY", "RPM", "TPM",
                     "MAX_CONCURRENCY", "EST_TOKENS", "TIMEOUT_S",
                     "CONNECT_TIMEOUT_S", "TTFT_TIMEOUT_S",
                     "STREAM_IDLE_TIMEOUT_S", "PRIORITY", "OVERLAY", "HEADERS",
                     "KIND", "CA_FILE"})
    out[detail::to_lower(field)] = origin_of(src, field);
  return out;
}

} // namespace

std::string show_settings(const settings& s) {
  std::string out = "# global\n";
  append(out, global_lines(s.global));
  for (auto& [name, sc] : s.scopes) {
    out += fmt::format("\n# scope {} ({} source{})\n", name,
                       sc.sources.size(), sc.sources.size() == 1 ? "" : "s");
    append(out, scope_lines(name, sc));
    for (auto& src : sc.sources) {
      out += fmt::format("\n# source {} of scope {} (provider {})\n",
                         src.name, name, src.provider);
      out += provenance(name, src);
      append(out, source_lines(name, src));
    }
  }
  return out;
}

std::string show_settings_json(const settings& s) {
  auto& g = s.global;
  json::object global{
    {"limiter_backend", to_string(g.limiter_backend)},
    {"breaker_backend", to_string(g.breaker_backend)},
    {"cache_backend", to_string(g.cache_backend)},
    {"cache_ttl_s", g.cache_ttl_s},
    {"cache_namespace", g.cache_namespace},
    {"redis_url", mask_url(g.redis_url)},
    {"pricing_path", g.pricing_path},
    {"telemetry_db", g.telemetry_db ? json::value(*g.telemetry_db)
                                    : json::value{}},
    {"telemetry_content", g.telemetry_content},
    {"transport", to_string(g.transport)},
    {"transport_threads", g.transport_threads},
    {"log", g.log_level},
    {"scheduler_threads", g.scheduler_threads},
    {"providers_path", g.providers_path.empty()
                         ? json::value{}
                         : json::value(g.providers_path)},
    {"serve",
     json::object{{"keys_file", g.serve.keys_file.empty()
                                  ? json::value{}
                                  : json::value(g.serve.keys_file)},
                  {"max_body_bytes", g.serve.max_body_bytes},
                  {"max_inflight", g.serve.max_inflight},
                  {"drain_s", g.serve.drain_s},
                  {"read_timeout_s", g.serve.read_timeout_s},
                  {"write_timeout_s", g.serve.write_timeout_s}}},
  };
  json::object scopes;
  for (auto& [name, sc] : s.scopes) {
    json::array sources;
    for (auto& src : sc.sources) {
      sources.push_back(json::object{
        {"name", src.name},
        {"provider", src.provider},
        {"base_url", mask_url(src.base_url)},
        {"model", src.model},
        {"api_key", src.api_key.empty() ? json::value{} : json::value(masked)},
        {"rpm", value_of(src.rpm)},
        {"tpm", value_of(src.tpm)},
        {"max_concurrency", value_of(src.max_concurrency)},
        {"est_tokens", src.est_tokens},
        {"timeout_s", src.timeout_s},
        {"connect_timeout_s", src.connect_timeout_s},
        {"ttft_timeout_s", value_of(src.ttft_timeout_s)},
        {"stream_idle_timeout_s", src.stream_idle_timeout_s},
        {"priority", src.priority},
        {"overlay", overlay_value(src)},
        {"headers", masked_headers(src)},
        {"kind", to_string(src.kind)},
        {"ca_file", src.ca_file.empty() ? json::value{}
                                        : json::value(src.ca_file)},
        {"origin", origin_json(src)},
        {"max_response_bytes", src.max_response_bytes},
        {"max_batch_inputs", src.max_batch_inputs},
        {"max_batch_tokens", src.max_batch_tokens},
        {"max_image_bytes", src.max_image_bytes},
        {"ocr_prompt_text", src.ocr_prompt_text},
        {"ocr_prompt_layout", src.ocr_prompt_layout},
      });
    }
    auto& br = sc.breaker;
    scopes[name] = json::object{
      {"selector", to_string(sc.selector)},
      {"stream", sc.stream},
      {"max_attempts", sc.max_attempts},
      {"backoff_base_s", sc.backoff_base_s},
      {"backoff_max_s", sc.backoff_max_s},
      {"stall_window_s", sc.stall_window_s},
      {"call_deadline_s", value_of(sc.call_deadline_s)},
      {"hedge",
       json::object{{"after_s", value_of(sc.hedge.after_s)},
                    {"max_extra", sc.hedge.max_extra}}},
      {"breaker",
       json::object{{"threshold", br.threshold},
                    {"cooldown_s", br.cooldown_s},
                    {"min_calls", br.min_calls},
                    {"fail_rate", br.fail_rate},
                    {"window_s", br.window_s},
                    {"max_cooldown_s", effective_max_cooldown(br)}}},
      {"on_quota_full", to_string(sc.on_quota_full)},
      {"on_circuit_open", to_string(sc.on_circuit_open)},
      {"structured", json::object{{"max_reasks", sc.structured_max_reasks}}},
      {"batch_concurrency", sc.batch_concurrency},
      {"cache",
       json::object{{"enabled", sc.cache.enabled},
                    {"fleet_single_flight", sc.cache.fleet_single_flight},
                    {"store_length", sc.cache.store_length},
                    {"ttl_s", value_of(sc.cache.ttl_s)},
                    {"max_entries", sc.cache.max_entries},
                    {"max_bytes", sc.cache.max_bytes}}},
      {"sources", std::move(sources)},
    };
  }
  return to_text(json::object{{"global", std::move(global)},
                              {"scopes", std::move(scopes)}});
}

} // namespace pgw
