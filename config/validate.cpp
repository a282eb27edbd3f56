// Every configuration rule (SPEC §3): ranges, finite numbers, choices,
// cross-field rules, features not built yet. Parsing (config/load.cpp) only
// produces typed fields; a new rule goes here.
//
// Messages: `KEY=VALUE: problem (rule)` naming the full key; a required key
// that is missing is `KEY: missing (rule)`; secrets (API_KEY, HEADERS,
// passwords and query values in URLs) are shown as `***`, and `validate`
// masks any configured secret that shows up elsewhere in a message.

#include "config/file.hpp"
#include "config/loader.hpp"
#include "config/keys.hpp"
#include "config/limits.hpp"
#include "config/scrub.hpp"
#include "config/url.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace pgw {

namespace {

using detail::format_number;
using detail::mask_url;
using detail::scope_key;
using detail::source_key;

// -- message helpers -------------------------------------------------------------

caf::error violation(const std::string& key, const std::string& shown,
                     const std::string& problem, const std::string& rule) {
  return make_error(error_code::invalid_config,
                    fmt::format("{}={}: {} ({})", key, shown, problem, rule));
}

caf::error missing(const std::string& key, const std::string& rule) {
  return make_error(error_code::invalid_config,
                    fmt::format("{}: missing ({})", key, rule));
}

void warn(settings& s, std::string text) {
  if (std::find(s.warnings.begin(), s.warnings.end(), text)
      == s.warnings.end())
    s.warnings.push_back(std::move(text));
}

/// Every duration key (`…_S`) is at most 30 days (SPEC §12).
caf::error at_most_30_days(const std::string& key, double x,
                           const char* rule) {
  auto is_duration = key.size() > 2
                     && key.compare(key.size() - 2, 2, "_S") == 0;
  if (!is_duration || x <= max_duration_s)
    return {};
  return violation(key, format_number(x),
                   fmt::format("must be at most {} seconds (30 days)",
                               format_number(max_duration_s)),
                   rule);
}

caf::error positive(const std::string& key, double x, const char* rule) {
  if (std::isfinite(x) && x > 0)
    return at_most_30_days(key, x, rule);
  return violation(key, format_number(x), "must be a finite number > 0",
                   rule);
}

caf::error non_negative(const std::string& key, double x, const char* rule) {
  if (std::isfinite(x) && x >= 0)
    return at_most_30_days(key, x, rule);
  return violation(key, format_number(x), "must be a finite number >= 0",
                   rule);
}

caf::error at_least(const std::string& key, int64_t x, int64_t min,
                    const char* rule) {
  if (x >= min)
    return {};
  return violation(key, std::to_string(x),
                   fmt::format("must be an integer >= {}", min), rule);
}

bool has_control_char(const std::string& text) {
  return std::any_of(text.begin(), text.end(), [](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return (c < 0x20 && c != '\t') || c == 0x7f;
  });
}

/// BASE_URL: `http(s)://host[:port][/path]` (config/url.hpp parses it).
/// Returns the problem or an empty string.
std::string check_base_url(const std::string& url) {
  url_parts parts;
  auto problem = parse_url(url, parts);
  if (!problem.empty() && parts.scheme.empty())
    return "must start with http:// or https://";
  if (parts.scheme != "http" && parts.scheme != "https")
    return "must start with http:// or https://";
  if (std::any_of(url.begin(), url.end(), [](char ch) {
        return std::isspace(static_cast<unsigned char>(ch)) != 0;
      })
      || has_control_char(url))
    return "must not contain spaces or control characters";
  if (url.find_first_of("?#") != std::string::npos)
    return "must not contain a query or fragment (request paths are "
           "appended to it)";
  if (parts.has_userinfo)
    return "must not contain credentials (user:password@); put them in "
           "API_KEY or HEADERS";
  return problem;
}

/// REDIS_URL: `redis://[[user]:password@]host:port[/db]`.
std::string check_redis_url(const std::string& url) {
  redis_url_parts parts;
  return split_redis_url(url, parts, true);
}

/// RFC 9110 token characters.
bool is_header_name(const std::string& name) {
  static const std::string extra = "!#$%&'*+-.^_`|~";
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch))
           || extra.find(ch) != std::string::npos;
  });
}

// -- global keys -----------------------------------------------------------------

caf::error check_serve(const serve_config& s) {
  if (auto err = at_least("PGW_SERVE_MAX_BODY_BYTES", s.max_body_bytes, 1024,
                          "request body limit of serve"))
    return err;
  if (auto err = at_least("PGW_SERVE_MAX_INFLIGHT", s.max_inflight, 1,
                          "concurrent requests of serve"))
    return err;
  if (auto err = non_negative("PGW_SERVE_DRAIN_S", s.drain_s,
                              "seconds to finish in-flight calls on SIGTERM"))
    return err;
  if (auto err = positive("PGW_SERVE_READ_TIMEOUT_S", s.read_timeout_s,
                          "seconds to read a request"))
    return err;
  return positive("PGW_SERVE_WRITE_TIMEOUT_S", s.write_timeout_s,
                  "seconds to write a response chunk");
}

caf::error check_global(const global_config& g) {
  if (auto err = at_least("PGW_TRANSPORT_THREADS", g.transport_threads, 0,
                          "beast transport loop threads, 0 = one per core"))
    return err;
  if (g.transport_threads > 1024)
    return violation("PGW_TRANSPORT_THREADS",
                     std::to_string(g.transport_threads),
                     "must be at most 1024",
                     "beast transport loop threads, 0 = one per core");
  if (auto err = positive("PGW_CACHE_TTL_S", g.cache_ttl_s,
                          "cache entry lifetime"))
    return err;
  if (g.cache_namespace.empty())
    return violation("PGW_CACHE_NAMESPACE", "", "must not be empty",
                     "prefix of cache keys");
  if (auto problem = check_redis_url(g.redis_url); !problem.empty())
    return violation("REDIS_URL", mask_url(g.redis_url), problem,
                     "expected redis://[[user]:password@]host:port[/db]");
  if (g.pricing_path.empty())
    return violation("PGW_PRICING_PATH", "", "must not be empty",
                     "price table file");
  if (g.telemetry_db && g.telemetry_db->empty())
    return violation("PGW_TELEMETRY_DB", "", "must not be empty",
                     "SQLite file for telemetry, or off");
  return check_serve(g.serve);
}

// -- sources ---------------------------------------------------------------------

caf::error check_source(const std::string& scope, const source_config& src) {
  auto key = [&](const char* field) { return source_key(scope, src, field); };
  if (src.base_url.empty())
    return missing(key("BASE_URL"),
                   "required for every source: upstream base URL such as "
                   "https://api.example.com/v1");
  if (auto problem = check_base_url(src.base_url); !problem.empty())
    return violation(key("BASE_URL"), mask_url(src.base_url), problem,
                     "expected http(s)://host[:port][/path]");
  if (src.model.empty())
    return missing(key("MODEL"),
                   "required for every source: upstream model name");
  if (has_control_char(src.api_key))
    return violation(key("API_KEY"), "***",
                     "contains a line break or control character",
                     "sent as a bearer token header");
  if (src.rpm)
    if (auto err = at_least(key("RPM"), *src.rpm, 1,
                            "requests per minute; leave unset for unlimited"))
      return err;
  if (src.tpm)
    if (auto err = at_least(key("TPM"), *src.tpm, 1,
                            "tokens per minute; leave unset for unlimited"))
      return err;
  if (src.max_concurrency)
    if (auto err = at_least(key("MAX_CONCURRENCY"), *src.max_concurrency, 1,
                            "requests in flight; leave unset for unlimited"))
      return err;
  if (auto err = at_least(key("EST_TOKENS"), src.est_tokens, 0,
                          "tokens reserved per attempt before usage is "
                          "known"))
    return err;
  if (src.tpm && src.est_tokens == 0)
    return violation(key("EST_TOKENS"), "0",
                     fmt::format("must be > 0 when {} is set", key("TPM")),
                     "a TPM limit needs a token estimate per attempt");
  if (src.tpm && src.est_tokens > *src.tpm)
    return violation(key("EST_TOKENS"), std::to_string(src.est_tokens),
                     fmt::format("must be <= {}={}", key("TPM"), *src.tpm),
                     "an attempt reserves EST_TOKENS of the minute's TPM; a "
                     "larger estimate could never be admitted");
  if (auto err = positive(key("TIMEOUT_S"), src.timeout_s,
                          "total time for one attempt"))
    return err;
  if (src.max_response_bytes < 1024 || src.max_response_bytes > (1 << 30))
    return violation(key("MAX_RESPONSE_BYTES"),
                     std::to_string(src.max_response_bytes),
                     "must be an integer in [1024, 1073741824]",
                     "cap on a whole answer: content, reasoning and tool-call "
                     "arguments");
  if (auto err = positive(key("CONNECT_TIMEOUT_S"), src.connect_timeout_s,
                          "TCP/TLS connect timeout"))
    return err;
  if (src.ttft_timeout_s)
    if (auto err = positive(key("TTFT_TIMEOUT_S"), *src.ttft_timeout_s,
                            "streaming: max wait for the first token"))
      return err;
  if (auto err = positive(key("STREAM_IDLE_TIMEOUT_S"),
                          src.stream_idle_timeout_s,
                          "streaming: max silence after the first token"))
    return err;
  {
    // The value is not shown: an overlay may carry a credential (an
    // api_key field, say). Where it went wrong is.
    boost::system::error_code ec;
    boost::json::stream_parser parser;
    auto used = parser.write_some(src.overlay.data(), src.overlay.size(), ec);
    if (!ec)
      parser.finish(ec);
    const char* rule = "a JSON object merged into every request body";
    auto shown = fmt::format("*** ({} bytes)", src.overlay.size());
    if (ec)
      return violation(key("OVERLAY"), shown,
                       fmt::format("not valid JSON at byte offset {}: {}",
                                   used, ec.message()),
                       rule);
    if (!parser.release().is_object())
      return violation(key("OVERLAY"), shown, "not a JSON object", rule);
  }
  for (auto& [name, value] : src.headers) {
    if (!is_header_name(name))
      return violation(key("HEADERS"), "***",
                       fmt::format("\"{}\" is not a valid header name", name),
                       "header names are RFC 9110 tokens");
    if (has_control_char(value))
      return violation(key("HEADERS"), "***",
                       fmt::format("the value of header \"{}\" contains a "
                                   "line break or control character",
                                   name),
                       "header values are one line of text");
  }
  if (auto err = at_least(key("MAX_BATCH_INPUTS"), src.max_batch_inputs, 1,
                          "embedding inputs per upstream request"))
    return err;
  if (auto err = at_least(key("MAX_BATCH_TOKENS"), src.max_batch_tokens, 1,
                          "estimated embedding tokens per upstream request"))
    return err;
  if (auto err = at_least(key("MAX_IMAGE_BYTES"), src.max_image_bytes, 1,
                          "largest OCR image, bytes"))
    return err;
  return {};
}

// -- scopes ----------------------------------------------------------------------

caf::error check_scope_keys(const std::string& name, const scope_config& sc) {
  auto key = [&](const char* suffix) { return scope_key(name, suffix); };
  if (auto err = at_least(key("MAX_ATTEMPTS"), sc.max_attempts, 1,
                          "retry budget of a call"))
    return err;
  if (auto err = non_negative(key("BACKOFF_BASE_S"), sc.backoff_base_s,
                              "base of the exponential backoff"))
    return err;
  if (auto err = non_negative(key("BACKOFF_MAX_S"), sc.backoff_max_s,
                              "cap of the exponential backoff"))
    return err;
  if (sc.backoff_max_s < sc.backoff_base_s)
    return violation(key("BACKOFF_MAX_S"), format_number(sc.backoff_max_s),
                     fmt::format("must be >= {}={}", key("BACKOFF_BASE_S"),
                                 format_number(sc.backoff_base_s)),
                     "cap of the exponential backoff");
  if (auto err = positive(key("STALL_WINDOW_S"), sc.stall_window_s,
                          "max time without progress"))
    return err;
  if (sc.call_deadline_s)
    if (auto err = positive(key("CALL_DEADLINE_S"), *sc.call_deadline_s,
                            "wall-clock bound of a whole call"))
      return err;
  if (sc.hedge.after_s)
    if (auto err = positive(key("HEDGE__AFTER_S"), *sc.hedge.after_s,
                            "delay before a hedge leg starts"))
      return err;
  if (sc.hedge.max_extra < 1 || sc.hedge.max_extra > 3)
    return violation(key("HEDGE__MAX_EXTRA"),
                     std::to_string(sc.hedge.max_extra),
                     "must be an integer in [1, 3]",
                     "extra hedge legs per round");
  auto& br = sc.breaker;
  if (auto err = at_least(key("BREAKER__THRESHOLD"), br.threshold, 1,
                          "consecutive failures that open the breaker"))
    return err;
  if (auto err = positive(key("BREAKER__COOLDOWN_S"), br.cooldown_s,
                          "base open time of the breaker"))
    return err;
  if (auto err = at_least(key("BREAKER__MIN_CALLS"), br.min_calls, 1,
                          "attempts in the window before the failure rate "
                          "counts"))
    return err;
  if (!(std::isfinite(br.fail_rate) && br.fail_rate > 0 && br.fail_rate <= 1))
    return violation(key("BREAKER__FAIL_RATE"), format_number(br.fail_rate),
                     "must be in (0, 1]",
                     "failure rate in the window that opens the breaker");
  if (auto err = positive(key("BREAKER__WINDOW_S"), br.window_s,
                          "window of the failure-rate channel"))
    return err;
  if (br.max_cooldown_s) {
    if (auto err = positive(key("BREAKER__MAX_COOLDOWN_S"),
                            *br.max_cooldown_s,
                            "cap of the breaker's open time"))
      return err;
    if (*br.max_cooldown_s < br.cooldown_s)
      return violation(key("BREAKER__MAX_COOLDOWN_S"),
                       format_number(*br.max_cooldown_s),
                       fmt::format("must be >= {}={}",
                                   key("BREAKER__COOLDOWN_S"),
                                   format_number(br.cooldown_s)),
                       "cap of the breaker's open time");
  }
  if (auto err = at_least(key("STRUCTURED__MAX_REASKS"),
                          sc.structured_max_reasks, 0,
                          "structured-output re-asks"))
    return err;
  if (auto err = at_least(key("BATCH_CONCURRENCY"), sc.batch_concurrency, 1,
                          "embedding sub-batches of one call in flight"))
    return err;
  if (sc.cache.ttl_s)
    if (auto err = positive(key("CACHE__TTL_S"), *sc.cache.ttl_s,
                            "cache entry lifetime"))
      return err;
  if (auto err = at_least(key("CACHE__MAX_ENTRIES"), sc.cache.max_entries, 1,
                          "memory cache entries kept per scope"))
    return err;
  if (auto err = at_least(key("CACHE__MAX_BYTES"), sc.cache.max_bytes, 1024,
                          "memory cache bytes kept per scope"))
    return err;
  return {};
}

caf::error check_cross_fields(const std::string& name, const scope_config& sc,
                              settings& s) {
  auto key = [&](const char* suffix) { return scope_key(name, suffix); };
  for (auto& src : sc.sources)
    if (src.ttft_timeout_s && sc.stall_window_s < *src.ttft_timeout_s)
      return violation(key("STALL_WINDOW_S"), format_number(sc.stall_window_s),
                       fmt::format("must be >= {}={}",
                                   source_key(name, src, "TTFT_TIMEOUT_S"),
                                   format_number(*src.ttft_timeout_s)),
                       "a call must be able to wait out a slow first token");
  if (sc.hedge.after_s) {
    auto after = *sc.hedge.after_s;
    auto shown = format_number(after);
    auto shortest = std::min_element(
      sc.sources.begin(), sc.sources.end(),
      [](auto& x, auto& y) { return x.timeout_s < y.timeout_s; });
    if (after >= shortest->timeout_s)
      return violation(key("HEDGE__AFTER_S"), shown,
                       fmt::format("must be < {}={}, the shortest source "
                                   "timeout",
                                   source_key(name, *shortest, "TIMEOUT_S"),
                                   format_number(shortest->timeout_s)),
                       "a hedge must start before the primary attempt "
                       "times out");
    if (sc.call_deadline_s && after >= *sc.call_deadline_s)
      return violation(key("HEDGE__AFTER_S"), shown,
                       fmt::format("must be < {}={}", key("CALL_DEADLINE_S"),
                                   format_number(*sc.call_deadline_s)),
                       "a hedge must start before the call deadline");
    for (auto& src : sc.sources)
      if (src.ttft_timeout_s && after >= *src.ttft_timeout_s)
        warn(s, fmt::format("{}={} >= {}={}: streaming hedges can never "
                            "fire on source {} (its TTFT timeout ends the "
                            "attempt first)",
                            key("HEDGE__AFTER_S"), shown,
                            source_key(name, src, "TTFT_TIMEOUT_S"),
                            format_number(*src.ttft_timeout_s), src.name));
    if (sc.sources.size() == 1)
      warn(s, fmt::format("{} is set but scope {} has only one source: a "
                          "hedge needs another source and never fires",
                          key("HEDGE__AFTER_S"), name));
    // Each extra leg needs a source the round has not used yet.
    else if (auto most = static_cast<int64_t>(sc.sources.size()) - 1;
             sc.hedge.max_extra > most)
      warn(s, fmt::format("{}={} but scope {} has {} sources: at most {} "
                          "extra leg{} can ever start",
                          key("HEDGE__MAX_EXTRA"), sc.hedge.max_extra, name,
                          sc.sources.size(), most, most == 1 ? "" : "s"));
  }
  return {};
}

/// Timeouts that can never fire (warnings) and CA_FILE (a readable PEM
/// file with at least one certificate) of one source.
caf::error check_source_tls_and_timeouts(const std::string& name,
                                         const source_config& src,
                                         settings& s) {
  auto key = [&](const char* field) { return source_key(name, src, field); };
  if (src.ttft_timeout_s && *src.ttft_timeout_s >= src.timeout_s)
    warn(s, fmt::format("{}={} >= {}={}: the first-token timeout can never "
                        "fire on source {} (the attempt ends first)",
                        key("TTFT_TIMEOUT_S"),
                        format_number(*src.ttft_timeout_s), key("TIMEOUT_S"),
                        format_number(src.timeout_s), src.name));
  // Only when the idle timeout was set: the built-in 30 s must not warn
  // everyone who shortens TIMEOUT_S.
  if (src.origin.count("STREAM_IDLE_TIMEOUT_S") != 0
      && src.stream_idle_timeout_s >= src.timeout_s)
    warn(s, fmt::format("{}={} >= {}={}: the stream idle timeout can never "
                        "fire on source {} (the attempt ends first)",
                        key("STREAM_IDLE_TIMEOUT_S"),
                        format_number(src.stream_idle_timeout_s),
                        key("TIMEOUT_S"), format_number(src.timeout_s),
                        src.name));
  if (src.ca_file.empty())
    return {};
  const char* rule = "a readable PEM file of CA certificates trusted for "
                     "this source";
  // A regular file, at most 4 MiB (a CA bundle is well under): a FIFO
  // would block, /dev/urandom never ends, a directory holds no PEM.
  auto text = read_config_file(src.ca_file, key("CA_FILE") + "="
                                              + src.ca_file,
                               4 << 20);
  if (!text)
    return text.error();
  if (text->find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    return violation(key("CA_FILE"), src.ca_file,
                     "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                     rule);
  return {};
}

/// One kind per scope; an embedding scope warns when its sources name
/// different models (their vectors would not be comparable).
caf::error check_embedding_scope(const std::string& name,
                                 const scope_config& sc, settings& s) {
  auto& first = sc.sources.front();
  for (auto& src : sc.sources)
    if (src.kind != first.kind)
      return violation(source_key(name, src, "KIND"), to_string(src.kind),
                       fmt::format("differs from {}={}",
                                   source_key(name, first, "KIND"),
                                   to_string(first.kind)),
                       "the sources of a scope serve the same kind of call");
  if (first.kind != source_kind::embedding)
    return {};
  for (auto& src : sc.sources)
    if (src.model != first.model) {
      warn(s, fmt::format("scope {}: embedding sources name different "
                          "models ({} and {}); a call fails over only to "
                          "sources answering the same vector dimension",
                          name, first.model, src.model));
      break;
    }
  return {};
}

caf::error check_scope(const std::string& name, const scope_config& sc,
                       settings& s) {
  if (sc.sources.empty())
    return make_error(error_code::invalid_config,
                      fmt::format("scope {}: no sources (a scope needs at "
                                  "least one {}__{{PROVIDER}}__{{NAME}}__MODEL "
                                  "and __BASE_URL)",
                                  name, name));
  std::set<std::string> names;
  for (auto& src : sc.sources) {
    if (src.name.empty() || src.provider.empty())
      return make_error(error_code::invalid_config,
                        fmt::format("scope {}: a source has no name or no "
                                    "provider (keys are "
                                    "{}__{{PROVIDER}}__{{NAME}}__{{FIELD}})",
                                    name, name));
    if (!names.insert(src.name).second)
      return make_error(error_code::invalid_config,
                        fmt::format("{}: source name {} is used twice in "
                                    "scope {} (source names must be unique "
                                    "within a scope)",
                                    source_key(name, src, "MODEL"), src.name,
                                    name));
    if (auto err = check_source(name, src))
      return err;
    if (auto err = check_source_tls_and_timeouts(name, src, s))
      return err;
  }
  if (auto err = check_embedding_scope(name, sc, s))
    return err;
  if (auto err = check_scope_keys(name, sc))
    return err;
  return check_cross_fields(name, sc, s);
}

// -- accepted, no effect yet -----------------------------------------------------

/// What a row of the table looks at.
struct target {
  const global_config* global = nullptr;
  const scope_config* scope = nullptr;
  const source_config* source = nullptr;
};

enum class level { global, scope, source };

/// A key that validates but does nothing in this build yet. When the feature
/// lands, delete its rows.
struct no_effect_row {
  level where;
  const char* key; ///< global key, scope suffix or source FIELD
  const char* missing_feature;
  bool (*is_set)(const target&);
  /// Non-null: the value is echoed (never for a secret).
  std::string (*shown)(const target&) = nullptr;
};

const source_config default_source{};
const global_config default_global{};
const scope_config default_scope{};

const no_effect_row no_effect_table[] = {
  {level::scope, "CACHE__ENABLED", "PGW_CACHE_BACKEND is none",
   [](const target& t) {
     return t.scope->cache.enabled
            && t.global->cache_backend == cache_store::none;
   }},
  {level::scope, "CACHE__FLEET_SINGLE_FLIGHT",
   "PGW_CACHE_BACKEND is not redis: single-flight is per process",
   [](const target& t) {
     return t.scope->cache.fleet_single_flight
            && t.global->cache_backend != cache_store::redis;
   }},
  {level::scope, "CACHE__STORE_LENGTH", "PGW_CACHE_BACKEND is none",
   [](const target& t) {
     return t.scope->cache.store_length
            && t.global->cache_backend == cache_store::none;
   }},
  {level::scope, "CACHE__TTL_S", "PGW_CACHE_BACKEND is none",
   [](const target& t) {
     return t.scope->cache.ttl_s
            && t.global->cache_backend == cache_store::none;
   }},
  {level::scope, "CACHE__MAX_ENTRIES", "PGW_CACHE_BACKEND is not memory",
   [](const target& t) {
     return t.scope->cache.max_entries != default_scope.cache.max_entries
            && t.global->cache_backend != cache_store::memory;
   }},
  {level::scope, "CACHE__MAX_BYTES", "PGW_CACHE_BACKEND is not memory",
   [](const target& t) {
     return t.scope->cache.max_bytes != default_scope.cache.max_bytes
            && t.global->cache_backend != cache_store::memory;
   }},
  {level::global, "PGW_TRANSPORT_THREADS", "PGW_TRANSPORT is httplib",
   [](const target& t) {
     return t.global->transport_threads != default_global.transport_threads
            && t.global->transport == transport_kind::httplib;
   }},
  {level::global, "PGW_CACHE_TTL_S", "PGW_CACHE_BACKEND is none",
   [](const target& t) {
     return t.global->cache_ttl_s != default_global.cache_ttl_s
            && t.global->cache_backend == cache_store::none;
   }},
  {level::global, "PGW_CACHE_NAMESPACE",
   "no Redis cache, limiter or breaker uses it",
   [](const target& t) {
     return t.global->cache_namespace != default_global.cache_namespace
            && t.global->cache_backend != cache_store::redis
            && t.global->limiter_backend != state_backend::redis
            && t.global->breaker_backend != state_backend::redis;
   }},
  {level::global, "REDIS_URL",
   "none of PGW_LIMITER_BACKEND, PGW_BREAKER_BACKEND, PGW_CACHE_BACKEND is "
   "redis",
   [](const target& t) {
     return t.global->redis_url != default_global.redis_url
            && t.global->limiter_backend != state_backend::redis
            && t.global->breaker_backend != state_backend::redis
            && t.global->cache_backend != cache_store::redis;
   }},
};

void warn_no_effect(const no_effect_row& row, const std::string& key,
                    const target& t, settings& s) {
  if (!row.is_set(t))
    return;
  auto shown = row.shown != nullptr ? key + "=" + row.shown(t) : key;
  warn(s, fmt::format("{} is accepted but has no effect yet ({})", shown,
                      row.missing_feature));
}

/// One warning per key of the table that is set (differs from its default;
/// settings built in code carry no record of which keys were written).
void warn_no_effect(settings& s) {
  for (auto& row : no_effect_table) {
    switch (row.where) {
      case level::global:
        warn_no_effect(row, row.key, target{&s.global, nullptr, nullptr}, s);
        break;
      case level::scope:
        for (auto& [name, sc] : s.scopes)
          warn_no_effect(row, scope_key(name, row.key),
                         target{&s.global, &sc, nullptr}, s);
        break;
      case level::source:
        for (auto& entry : s.scopes)
          for (auto& src : entry.second.sources)
            warn_no_effect(row, source_key(entry.first, src, row.key),
                           target{&s.global, &entry.second, &src}, s);
        break;
    }
  }
}

caf::error check_all(settings& s) {
  if (auto err = check_global(s.global))
    return err;
  for (auto& [name, sc] : s.scopes)
    if (auto err = check_scope(name, sc, s))
      return err;
  warn_no_effect(s);
  return {};
}

} // namespace

caf::error validate(settings& s) {
  auto err = check_all(s);
  auto detail = detail_of(err);
  if (detail == nullptr)
    return err;
  // The checks show secret fields as `***`, but a secret can sit where a
  // value is echoed (an API key pasted into another key, say): no message
  // carries any secret of the configuration.
  auto safe = *detail;
  safe.message = redact_secrets(safe.message, secrets_of(s), "***");
  return make_error(*code_of(err), std::move(safe));
}

} // namespace pgw
