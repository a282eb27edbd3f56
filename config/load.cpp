// Raw configuration → typed `settings` (SPEC §3). This file only turns text
// into typed fields and sorts keys into scopes and sources; every range,
// choice and cross-field rule lives in config/validate.cpp.

#include "config/loader.hpp"
#include "config/keys.hpp"
#include "config/scrub.hpp"
#include "config/support/log.hpp"
#include "config/url.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pgw {

namespace {

namespace json = boost::json;

// -- key anatomy ---------------------------------------------------------------

/// The fields of a source key, `{SCOPE}__{PROVIDER}__{NAME}__{FIELD}`.
const std::vector<std::string> source_fields = {
  "BASE_URL",       "MODEL",          "API_KEY",           "RPM",
  "TPM",            "MAX_CONCURRENCY", "EST_TOKENS",       "TIMEOUT_S",
  "CONNECT_TIMEOUT_S", "TTFT_TIMEOUT_S", "STREAM_IDLE_TIMEOUT_S", "PRIORITY",
  "OVERLAY",        "HEADERS",        "KIND",           "CA_FILE",
  "MAX_BATCH_INPUTS", "MAX_BATCH_TOKENS", "MAX_IMAGE_BYTES",
  "OCR_PROMPT_TEXT", "OCR_PROMPT_LAYOUT",
  "MAX_RESPONSE_BYTES",
};


bool is_source_field(const std::string& field) {
  return std::find(source_fields.begin(), source_fields.end(), field)
         != source_fields.end();
}

/// Source fields that a scope may set for all its sources (`LLM__TIMEOUT_S`,
/// SPEC §12): every field but the source's identity.
bool is_scope_default_field(const std::string& field) {
  return is_source_field(field) && field != "BASE_URL" && field != "MODEL"
         && field != "API_KEY" && field != "PRIORITY" && field != "KIND";
}

/// `[A-Z][A-Z0-9_]*`
bool is_scope_name(const std::string& name) {
  if (name.empty() || name.front() < 'A' || name.front() > 'Z')
    return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
  });
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> segments;
  size_t start = 0;
  for (;;) {
    auto pos = key.find("__", start);
    if (pos == std::string::npos) {
      segments.push_back(key.substr(start));
      return segments;
    }
    segments.push_back(key.substr(start, pos - start));
    start = pos + 2;
  }
}

caf::error bad_value(const std::string& key, const std::string& shown,
                     const std::string& problem) {
  return make_error(error_code::invalid_config,
                    fmt::format("{}={}: {}", key, shown, problem));
}

// -- strict value parsing --------------------------------------------------------

/// `std::from_chars` over the whole of `text`: `errc{}`, `invalid_argument`
/// (empty, not a T, or trailing characters) or `result_out_of_range`.
template <class T>
std::errc read_whole(const std::string& text, T& value) {
  auto first = text.data();
  auto last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ptr != last
      || (ec != std::errc{} && ec != std::errc::result_out_of_range))
    return std::errc::invalid_argument;
  return ec;
}

caf::error parse_int(const std::string& key, const std::string& text,
                     int64_t& out) {
  int64_t value = 0;
  auto ec = read_whole(text, value);
  if (ec == std::errc::invalid_argument)
    return bad_value(key, text,
                     "not an integer (expected a whole number such as 10)");
  if (ec == std::errc::result_out_of_range)
    return bad_value(key, text, "out of range (a 64-bit integer)");
  out = value;
  return {};
}

caf::error parse_number(const std::string& key, const std::string& text,
                        double& out) {
  double value = 0;
  auto ec = read_whole(text, value);
  if (ec == std::errc::invalid_argument)
    return bad_value(key, text,
                     "not a number (expected a decimal number such as 1.5)");
  if (ec == std::errc::result_out_of_range) {
    // Overflow is not finite; underflow reads as (almost) zero.
    value = std::strtod(text.c_str(), nullptr);
    if (std::abs(value) == HUGE_VAL)
      return bad_value(key, text,
                       "not a finite number (expected a decimal number such "
                       "as 1.5)");
  }
  if (!std::isfinite(value))
    return bad_value(key, text,
                     "not a finite number (expected a decimal number such as "
                     "1.5)");
  out = value;
  return {};
}

caf::error parse_bool(const std::string& key, const std::string& text,
                      bool& out) {
  auto word = detail::to_lower(text);
  if (word == "true" || word == "1" || word == "yes" || word == "on") {
    out = true;
    return {};
  }
  if (word == "false" || word == "0" || word == "no" || word == "off") {
    out = false;
    return {};
  }
  return bad_value(key, text,
                   "not a boolean (expected true/false, 1/0, yes/no, "
                   "on/off)");
}

/// HEADERS: a JSON object of string values. Values may be secrets, so the
/// key's value is shown as `***` in every message.
caf::error parse_headers(const std::string& key, const std::string& text,
                         std::vector<std::pair<std::string, std::string>>& out) {
  boost::system::error_code ec;
  auto doc = json::parse(text, ec);
  if (ec)
    return bad_value(key, "***",
                     fmt::format("not valid JSON: {} (expected a JSON object "
                                 "of header names to string values)",
                                 ec.message()));
  if (!doc.is_object())
    return bad_value(key, "***",
                     "not a JSON object (expected a JSON object of header "
                     "names to string values)");
  std::vector<std::pair<std::string, std::string>> headers;
  for (auto& [name, value] : doc.get_object()) {
    if (!value.is_string())
      return bad_value(key, "***",
                       fmt::format("the value of header \"{}\" is not a "
                                   "string (header values are JSON strings)",
                                   std::string(name)));
    headers.emplace_back(std::string(name), std::string(value.get_string()));
  }
  out = std::move(headers);
  return {};
}

// -- key tables --------------------------------------------------------------------

caf::error parse_into(const std::string& key, const std::string& text,
                      int64_t& out) {
  return parse_int(key, text, out);
}

caf::error parse_into(const std::string& key, const std::string& text,
                      double& out) {
  return parse_number(key, text, out);
}

caf::error parse_into(const std::string& key, const std::string& text,
                      bool& out) {
  return parse_bool(key, text, out);
}

/// Text fields take the value as it is; validate checks them.
caf::error parse_into(const std::string&, const std::string& text,
                      std::string& out) {
  out = text;
  return {};
}

/// An optional field: set when its key is given, parsed as the value is.
template <class T>
caf::error parse_into(const std::string& key, const std::string& text,
                      std::optional<T>& out) {
  T value{};
  if (auto err = parse_into(key, text, value))
    return err;
  out = std::move(value);
  return {};
}

template <class Config>
using setter = std::function<caf::error(Config&, const std::string& key,
                                        const std::string& value)>;

/// A setter that parses into the field `get(config)` returns.
template <class Config, class Get>
setter<Config> field(Get get) {
  return [get](Config& cfg, const std::string& key, const std::string& value) {
    return parse_into(key, value, get(cfg));
  };
}

/// A setter for a direct member.
template <class Config, class T>
setter<Config> field(T Config::*member) {
  return field<Config>([member](Config& cfg) -> T& { return cfg.*member; });
}

/// A setter for a field with a fixed set of names (`setting_values<E>`):
/// any other text is refused with the names and `rule`.
template <class Config, class E>
setter<Config> choice(E Config::*member, const char* rule) {
  return [member, rule](Config& cfg, const std::string& key,
                        const std::string& value) {
    auto parsed = parse_setting<E>(value);
    if (!parsed)
      return bad_value(key, value,
                       fmt::format("must be one of {} ({})",
                                   setting_names<E>(), rule));
    cfg.*member = *parsed;
    return caf::error{};
  };
}

/// FIELD → how a source key's text becomes a typed field.
const std::map<std::string, setter<source_config>>& source_setters() {
  using sc = source_config;
  static const std::map<std::string, setter<sc>> table = {
    {"BASE_URL",
     [](sc& src, const std::string&, const std::string& value) {
       src.base_url = value;
       // One trailing slash is stripped: paths are appended with their own.
       // "https://" itself stays whole so validate reports the missing host.
       auto& url = src.base_url;
       if (!url.empty() && url.back() == '/'
           && (url.size() < 3 || url.compare(url.size() - 3, 3, "://") != 0))
         url.pop_back();
       url = normalise_url(url); // HTTP://Host → http://host
       return caf::error{};
     }},
    {"MODEL", field(&sc::model)},
    {"API_KEY", field(&sc::api_key)},
    {"RPM", field(&sc::rpm)},
    {"TPM", field(&sc::tpm)},
    {"MAX_CONCURRENCY", field(&sc::max_concurrency)},
    {"EST_TOKENS", field(&sc::est_tokens)},
    {"TIMEOUT_S", field(&sc::timeout_s)},
    {"CONNECT_TIMEOUT_S", field(&sc::connect_timeout_s)},
    {"TTFT_TIMEOUT_S", field(&sc::ttft_timeout_s)},
    {"STREAM_IDLE_TIMEOUT_S", field(&sc::stream_idle_timeout_s)},
    {"PRIORITY", field(&sc::priority)},
    // OVERLAY must be a JSON object: checked by validate.
    {"OVERLAY", field(&sc::overlay)},
    {"HEADERS",
     [](sc& src, const std::string& key, const std::string& v) {
       return parse_headers(key, v, src.headers);
     }},
    {"KIND", choice(&sc::kind, "what the source serves")},
    {"CA_FILE", field(&sc::ca_file)},
    {"MAX_BATCH_INPUTS", field(&sc::max_batch_inputs)},
    {"MAX_BATCH_TOKENS", field(&sc::max_batch_tokens)},
    {"MAX_IMAGE_BYTES", field(&sc::max_image_bytes)},
    {"OCR_PROMPT_TEXT", field(&sc::ocr_prompt_text)},
    {"OCR_PROMPT_LAYOUT", field(&sc::ocr_prompt_layout)},
    {"MAX_RESPONSE_BYTES", field(&sc::max_response_bytes)},
  };
  return table;
}

/// Scope key suffix (everything after `{SCOPE}__`) → typed field.
const std::map<std::string, setter<scope_config>>& scope_setters() {
  using sc = scope_config;
  static const std::map<std::string, setter<sc>> table = {
    {"SELECTOR",
     choice(&sc::selector, "how sources are ordered for admission")},
    {"STREAM", field(&sc::stream)},
    {"MAX_ATTEMPTS", field(&sc::max_attempts)},
    {"BACKOFF_BASE_S", field(&sc::backoff_base_s)},
    {"BACKOFF_MAX_S", field(&sc::backoff_max_s)},
    {"STALL_WINDOW_S", field(&sc::stall_window_s)},
    {"CALL_DEADLINE_S", field(&sc::call_deadline_s)},
    {"HEDGE__AFTER_S",
     field<sc>([](sc& x) -> auto& { return x.hedge.after_s; })},
    {"HEDGE__MAX_EXTRA",
     field<sc>([](sc& x) -> auto& { return x.hedge.max_extra; })},
    {"BREAKER__THRESHOLD",
     field<sc>([](sc& x) -> auto& { return x.breaker.threshold; })},
    {"BREAKER__COOLDOWN_S",
     field<sc>([](sc& x) -> auto& { return x.breaker.cooldown_s; })},
    {"BREAKER__MIN_CALLS",
     field<sc>([](sc& x) -> auto& { return x.breaker.min_calls; })},
    {"BREAKER__FAIL_RATE",
     field<sc>([](sc& x) -> auto& { return x.breaker.fail_rate; })},
    {"BREAKER__WINDOW_S",
     field<sc>([](sc& x) -> auto& { return x.breaker.window_s; })},
    {"BREAKER__MAX_COOLDOWN_S",
     field<sc>([](sc& x) -> auto& { return x.breaker.max_cooldown_s; })},
    {"CACHE__ENABLED",
     field<sc>([](sc& x) -> auto& { return x.cache.enabled; })},
    {"CACHE__FLEET_SINGLE_FLIGHT",
     field<sc>([](sc& x) -> auto& { return x.cache.fleet_single_flight; })},
    {"CACHE__STORE_LENGTH",
     field<sc>([](sc& x) -> auto& { return x.cache.store_length; })},
    {"CACHE__TTL_S", field<sc>([](sc& x) -> auto& { return x.cache.ttl_s; })},
    {"CACHE__MAX_ENTRIES",
     field<sc>([](sc& x) -> auto& { return x.cache.max_entries; })},
    {"CACHE__MAX_BYTES",
     field<sc>([](sc& x) -> auto& { return x.cache.max_bytes; })},
    {"ON_QUOTA_FULL",
     choice(&sc::on_quota_full, "when every source is out of quota")},
    {"ON_CIRCUIT_OPEN",
     choice(&sc::on_circuit_open, "when every source's circuit is open")},
    {"STRUCTURED__MAX_REASKS", field(&sc::structured_max_reasks)},
    {"BATCH_CONCURRENCY", field(&sc::batch_concurrency)},
  };
  return table;
}

const std::map<std::string, setter<global_config>>& global_setters() {
  using gc = global_config;
  static const std::map<std::string, setter<gc>> table = {
    {"PGW_LIMITER_BACKEND",
     choice(&gc::limiter_backend, "limiter state backend")},
    {"PGW_BREAKER_BACKEND",
     choice(&gc::breaker_backend, "breaker state backend")},
    {"PGW_CACHE_BACKEND", choice(&gc::cache_backend, "response cache")},
    {"PGW_CACHE_TTL_S", field(&gc::cache_ttl_s)},
    {"PGW_CACHE_NAMESPACE", field(&gc::cache_namespace)},
    {"REDIS_URL", field(&gc::redis_url)},
    {"PGW_PRICING_PATH", field(&gc::pricing_path)},
    {"PGW_TELEMETRY_DB", field(&gc::telemetry_db)},
    {"PGW_TELEMETRY_CONTENT", field(&gc::telemetry_content)},
    {"PGW_TRANSPORT",
     choice(&gc::transport, "upstream HTTP client: beast is event-driven, "
                            "httplib uses a thread per call")},
    {"PGW_TRANSPORT_THREADS", field(&gc::transport_threads)},
    {"PGW_SERVE_KEYS_FILE",
     field<gc>([](gc& x) -> auto& { return x.serve.keys_file; })},
    {"PGW_SERVE_MAX_BODY_BYTES",
     field<gc>([](gc& x) -> auto& { return x.serve.max_body_bytes; })},
    {"PGW_SERVE_MAX_INFLIGHT",
     field<gc>([](gc& x) -> auto& { return x.serve.max_inflight; })},
    {"PGW_SERVE_DRAIN_S",
     field<gc>([](gc& x) -> auto& { return x.serve.drain_s; })},
    {"PGW_SERVE_READ_TIMEOUT_S",
     field<gc>([](gc& x) -> auto& { return x.serve.read_timeout_s; })},
    {"PGW_SERVE_WRITE_TIMEOUT_S",
     field<gc>([](gc& x) -> auto& { return x.serve.write_timeout_s; })},
    // Read elsewhere: load_providers, the logger, the CLI's scheduler.
    {"PGW_PROVIDERS_PATH",
     [](gc& g, const std::string&, const std::string& value) {
       g.providers_path = value;
       return caf::error{};
     }},
    // Checked here (the CLI hands a value from the env file to them).
    {"PGW_LOG",
     [](gc& g, const std::string& key, const std::string& value) {
       g.log_level = value;
       if (log::parse_level(value))
         return caf::error{};
       return bad_value(key, value,
                        "must be one of debug, info, warn, error, off");
     }},
    {"PGW_SCHEDULER_THREADS",
     [](gc& g, const std::string& key, const std::string& value) {
       int threads = 0;
       if (read_whole(value, threads) == std::errc{} && threads >= 1
           && threads <= 256) {
         g.scheduler_threads = threads;
         return caf::error{};
       }
       return bad_value(key, value, "must be an integer from 1 to 256");
     }},
  };
  return table;
}

// -- sources -----------------------------------------------------------------------

/// A source being assembled, with the key that set each field so far.
struct source_draft {
  source_config config;
  std::map<std::string, std::string> keys; ///< FIELD → key as spelled
};

std::string known_providers(
  const std::map<std::string, provider_profile>& providers) {
  std::string out;
  for (auto& entry : providers) {
    if (!out.empty())
      out += ", ";
    out += entry.first;
  }
  return out;
}

/// Handles one key `{SCOPE}__{PROVIDER}__{NAME}__{FIELD}` with a known FIELD.
caf::error
add_source_key(const std::string& key, const std::string& value,
               const std::vector<std::string>& seg,
               const std::map<std::string, provider_profile>& providers,
               std::map<std::string, source_draft>& drafts) {
  auto& provider_seg = seg[1];
  auto& name_seg = seg[2];
  auto& field = seg[3];
  if (detail::is_reserved_segment(provider_seg))
    return make_error(error_code::invalid_config,
                      fmt::format("{}: {} is a reserved segment and cannot "
                                  "be a provider name (source keys are "
                                  "{{SCOPE}}__{{PROVIDER}}__{{NAME}}__{{FIELD}})",
                                  key, provider_seg));
  auto provider = detail::to_lower(provider_seg);
  auto profile = providers.find(provider);
  if (profile == providers.end())
    return make_error(error_code::invalid_config,
                      fmt::format("{}: unknown provider {} (known providers: "
                                  "{})",
                                  key, provider_seg,
                                  known_providers(providers)));
  if (!detail::is_name_segment(name_seg))
    return make_error(error_code::invalid_config,
                      fmt::format("{}: invalid source name \"{}\" (letters, "
                                  "digits, '-' and '_', starting and ending "
                                  "with a letter or digit)",
                                  key, name_seg));
  auto name = detail::to_lower(name_seg);
  auto [i, added] = drafts.try_emplace(name);
  auto& draft = i->second;
  if (added) {
    draft.config.scope = seg[0];
    draft.config.provider = provider;
    draft.config.name = name;
    draft.config.profile = profile->second;
  } else if (draft.config.provider != provider) {
    return make_error(error_code::invalid_config,
                      fmt::format("{}: source name {} is already used by "
                                  "provider {} in scope {} (source names "
                                  "must be unique within a scope)",
                                  key, name, draft.config.provider, seg[0]));
  }
  auto [k, fresh] = draft.keys.try_emplace(field, key);
  if (!fresh)
    return make_error(error_code::invalid_config,
                      fmt::format("{}: sets the same field as {} (provider "
                                  "and source names are case-insensitive)",
                                  key, k->second));
  draft.config.origin[field] = "source";
  return source_setters().at(field)(draft.config, key, value);
}

/// Scope-level defaults (`{SCOPE}__{FIELD}`) of one scope: FIELD → (key,
/// value).
using scope_defaults = std::map<std::string, std::pair<std::string, std::string>>;

/// Gives each source of a scope the scope's defaults for the fields it does
/// not set itself.
caf::error apply_scope_defaults(const scope_defaults& defaults,
                                std::map<std::string, source_draft>& drafts) {
  for (auto& [name, draft] : drafts)
    for (auto& [field, entry] : defaults) {
      if (draft.keys.count(field) != 0)
        continue; // the source's own key wins
      if (auto err = source_setters().at(field)(draft.config, entry.first,
                                                entry.second))
        return err;
      draft.config.origin[field] = "scope";
    }
  return {};
}

void warn(settings& s, std::string text) {
  if (std::find(s.warnings.begin(), s.warnings.end(), text)
      == s.warnings.end())
    s.warnings.push_back(std::move(text));
}

// -- keys meant for pgw ------------------------------------------------------------

/// True when load_settings reads `key` (a source, scope or global key) in a
/// configuration whose scopes are `scopes`.
bool is_known_key(const std::string& key,
                  const std::set<std::string>& scopes) {
  auto seg = split_key(key);
  if (seg.size() >= 2 && scopes.count(seg[0]) > 0) {
    if (seg.size() == 4 && is_source_field(seg[3]))
      return true;
    auto suffix = key.substr(seg[0].size() + 2);
    return (seg.size() == 2 && is_scope_default_field(suffix))
           || scope_setters().count(suffix) > 0;
  }
  return global_setters().count(key) > 0;
}

/// `why` and the key probably meant when pgw would read `candidate`, else
/// `otherwise`.
std::string hint(const std::string& why, const std::string& candidate,
                 const std::set<std::string>& scopes,
                 const std::string& otherwise) {
  if (is_known_key(candidate, scopes))
    return fmt::format("{}: did you mean {}?", why, candidate);
  return otherwise;
}

/// For a key that is neither a configured scope's nor a known global one:
/// why it still looks meant for pgw and, when pgw would read the corrected
/// spelling, that spelling (README, Configuration). Nothing for a variable
/// that is not ours (PATH, HOME, LLM_API_KEY, OTHER__THING): the process
/// environment is full of those, and warning about them would bury the
/// warnings that matter.
std::optional<std::string>
near_miss(const std::string& key, const std::set<std::string>& scopes) {
  auto upper = detail::to_upper(key);
  // `Llm__…`: a scope's name in another letter case.
  auto head = upper.substr(0, upper.find("__"));
  if (head != upper && scopes.count(head) > 0)
    return hint("scope names are case-sensitive", upper, scopes,
                fmt::format("scope names are case-sensitive: the scope is {}",
                            head));
  // `LLM_GENERIC__A__…`, `LLM_MAX_ATTEMPTS`: one '_' after a scope's name.
  // The longest such name wins (scopes `LLM` and `LLM_X`).
  const std::string* scope = nullptr;
  for (auto& name : scopes)
    if (upper.size() > name.size() + 1
        && upper.compare(0, name.size() + 1, name + "_") == 0
        && upper[name.size() + 1] != '_'
        && (scope == nullptr || name.size() > scope->size()))
      scope = &name;
  if (scope != nullptr) {
    auto candidate = *scope + "__" + upper.substr(scope->size() + 1);
    // Without a "__" only a key that the fix makes pgw's counts: another
    // program's LLM_API_KEY is none of ours.
    if (key.find("__") == std::string::npos
        && !is_known_key(candidate, scopes))
      return std::nullopt;
    auto why = fmt::format("keys of scope {} start with {}__", *scope, *scope);
    return hint(why, candidate, scopes, why);
  }
  if (upper.rfind("PGW_", 0) == 0) {
    if (key.rfind("PGW_", 0) != 0)
      return hint("keys are case-sensitive", upper, scopes,
                  "keys are case-sensitive: pgw's are upper case");
    // A PGW_ key pgw does not have, perhaps a misspelt one of its own.
    std::vector<std::string> keys;
    for (auto& entry : global_setters())
      keys.push_back(entry.first);
    auto meant = detail::closest_spelling(key, keys);
    return meant.empty() ? "" : fmt::format("did you mean {}?", meant);
  }
  return std::nullopt;
}

/// The key of scope `seg[0]` that `key` (which pgw does not read) most
/// likely misspells, or "": a source's field (`LLM__OPENAI__A__APIKEY`) or a
/// scope's own key (`LLM__MAX_ATTEMPT`).
std::string scope_key_meant(const std::string& key,
                            const std::vector<std::string>& seg) {
  if (seg.size() == 4) {
    auto field = detail::closest_spelling(seg[3], source_fields);
    return field.empty()
             ? ""
             : fmt::format("{}__{}__{}__{}", seg[0], seg[1], seg[2], field);
  }
  std::vector<std::string> suffixes;
  for (auto& entry : scope_setters())
    suffixes.push_back(entry.first);
  for (auto& field : source_fields)
    if (is_scope_default_field(field))
      suffixes.push_back(field);
  auto suffix = detail::closest_spelling(key.substr(seg[0].size() + 2),
                                         suffixes);
  return suffix.empty() ? "" : detail::scope_key(seg[0], suffix);
}

} // namespace

known_key_names known_keys() {
  known_key_names out;
  for (auto& entry : global_setters())
    out.global.push_back(entry.first);
  for (auto& entry : scope_setters())
    out.scope.push_back(entry.first);
  out.source = source_fields;
  return out;
}

namespace {

/// load_settings' work into `result`; its warnings so far stay there when
/// it fails.
caf::error load_into(const env_map& env, settings& result) {
  auto providers = load_providers(env);
  if (!providers)
    return providers.error();
  // A scope is a first segment with at least one source key.
  std::set<std::string> scope_names;
  for (auto& entry : env) {
    auto seg = split_key(entry.first);
    if (seg.size() == 4 && is_scope_name(seg[0]) && is_source_field(seg[3]))
      scope_names.insert(seg[0]);
  }
  std::map<std::string, std::map<std::string, source_draft>> drafts;
  std::map<std::string, scope_defaults> defaults;
  for (auto& [key, value] : env) {
    auto seg = split_key(key);
    if (seg.size() >= 2 && scope_names.count(seg[0]) > 0) {
      auto& scope = result.scopes[seg[0]];
      scope.name = seg[0];
      if (seg.size() == 4 && is_source_field(seg[3])) {
        if (auto err = add_source_key(key, value, seg, *providers,
                                      drafts[seg[0]]))
          return err;
        continue;
      }
      auto suffix = key.substr(seg[0].size() + 2);
      auto& setters = scope_setters();
      if (seg.size() == 2 && is_scope_default_field(suffix)) {
        defaults[seg[0]][suffix] = {key, value};
      } else if (auto i = setters.find(suffix); i != setters.end()) {
        if (auto err = i->second(scope, key, value))
          return err;
      } else if (auto meant = scope_key_meant(key, seg); !meant.empty()) {
        warn(result, fmt::format("unknown key {} ignored (did you mean {}?)",
                                 key, meant));
      } else {
        warn(result, fmt::format("unknown key {} ignored", key));
      }
      continue;
    }
    auto& globals = global_setters();
    if (auto i = globals.find(key); i != globals.end()) {
      if (auto err = i->second(result.global, key, value))
        return err;
    } else if (auto why = near_miss(key, scope_names)) {
      warn(result, why->empty()
                     ? fmt::format("unknown key {} ignored", key)
                     : fmt::format("unknown key {} ignored ({})", key, *why));
    }
    // Anything else (PATH, HOME, …) is not ours.
  }
  for (auto& [scope_name, by_name] : drafts) {
    if (auto d = defaults.find(scope_name); d != defaults.end())
      if (auto err = apply_scope_defaults(d->second, by_name))
        return err;
    auto& sources = result.scopes[scope_name].sources;
    for (auto& entry : by_name) { // std::map: ordered by name
      auto& src = entry.second.config;
      // MonkeyOCR-style servers process one request at a time.
      if (src.kind == source_kind::ocr_monkey && !src.max_concurrency)
        src.max_concurrency = 1;
      sources.push_back(std::move(src));
    }
  }
  return validate(result);
}

} // namespace

caf::expected<settings> load_settings(const env_map& env,
                                      std::vector<std::string>* warnings) {
  settings result;
  if (auto err = load_into(env, result)) {
    // A misspelt key's "did you mean" often explains the error.
    if (warnings != nullptr)
      warnings->insert(warnings->end(), result.warnings.begin(),
                       result.warnings.end());
    return err;
  }
  // Upstream text is scrubbed of these from now on (config/scrub.hpp).
  register_secrets(secrets_of(result));
  return result;
}

} // namespace pgw
