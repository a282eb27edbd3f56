// load_settings: keys → scopes, sources, typed fields (SPEC §3).

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace pgw;

namespace {

/// One valid openai source `a` in scope LLM, plus `extra`.
env_map base(env_map extra = {}) {
  env_map env{{"LLM__OPENAI__A__BASE_URL", "https://api.example.com/v1"},
              {"LLM__OPENAI__A__MODEL", "gpt-test"}};
  for (auto& [key, value] : extra)
    env[key] = value;
  return env;
}

std::string message_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : std::string{};
}

/// The error message of loading `env`; empty when it loaded.
std::string load_error(const env_map& env) {
  auto s = load_settings(env);
  if (s)
    return {};
  CHECK(code_of(s.error()) == error_code::invalid_config);
  return message_of(s.error());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool has_warning(const settings& s, const std::string& text) {
  return std::find(s.warnings.begin(), s.warnings.end(), text)
         != s.warnings.end();
}

} // namespace

TEST_CASE("a minimal source loads with every default") {
  auto s = load_settings(base());
  REQUIRE(s);
  CHECK(s->warnings.empty());
  REQUIRE(s->scopes.size() == 1);
  auto sc = s->find("LLM");
  REQUIRE(sc != nullptr);
  CHECK(sc->name == "LLM");
  REQUIRE(sc->sources.size() == 1);
  auto& src = sc->sources[0];
  CHECK(src.scope == "LLM");
  CHECK(src.provider == "openai");
  CHECK(src.name == "a");
  CHECK(src.profile.name == "openai");
  CHECK(src.profile.max_tokens_field == "max_completion_tokens");
  CHECK(src.base_url == "https://api.example.com/v1");
  CHECK(src.model == "gpt-test");
  CHECK(src.api_key.empty());
  CHECK_FALSE(src.rpm);
  CHECK(src.est_tokens == 1000);
  CHECK(src.timeout_s == 120);
  CHECK(src.connect_timeout_s == 10);
  CHECK_FALSE(src.ttft_timeout_s);
  CHECK(src.stream_idle_timeout_s == 30);
  CHECK(src.overlay == "{}");
  CHECK(src.headers.empty());
  CHECK(src.kind == source_kind::chat);
  CHECK(sc->selector == selector_policy::health_aware);
  CHECK(sc->stream);
  CHECK(sc->max_attempts == 3);
  CHECK(s->global.limiter_backend == state_backend::memory);
  CHECK_FALSE(s->global.telemetry_db);
}

TEST_CASE("every source field and scope key is read into its typed field") {
  auto s = load_settings(base({
    {"LLM__OPENAI__A__API_KEY", "k"},
    {"LLM__OPENAI__A__RPM", "60"},
    {"LLM__OPENAI__A__TPM", "100000"},
    {"LLM__OPENAI__A__MAX_CONCURRENCY", "4"},
    {"LLM__OPENAI__A__EST_TOKENS", "500"},
    {"LLM__OPENAI__A__TIMEOUT_S", "60.5"},
    {"LLM__OPENAI__A__CONNECT_TIMEOUT_S", "2"},
    {"LLM__OPENAI__A__TTFT_TIMEOUT_S", "15"},
    {"LLM__OPENAI__A__STREAM_IDLE_TIMEOUT_S", "20"},
    {"LLM__OPENAI__A__PRIORITY", "-2"},
    {"LLM__OPENAI__A__OVERLAY", R"({"temperature": 0})"},
    {"LLM__OPENAI__A__HEADERS", R"({"X-B": "2", "X-A": "1"})"},
    {"LLM__OPENAI__A__KIND", "chat"},
    {"LLM__SELECTOR", "priority"},
    {"LLM__STREAM", "off"},
    {"LLM__MAX_ATTEMPTS", "5"},
    {"LLM__BACKOFF_BASE_S", "1"},
    {"LLM__BACKOFF_MAX_S", "10"},
    {"LLM__STALL_WINDOW_S", "100"},
    {"LLM__CALL_DEADLINE_S", "90"},
    {"LLM__BREAKER__MAX_COOLDOWN_S", "600"},
    {"LLM__ON_QUOTA_FULL", "fail"},
    {"PGW_TELEMETRY_DB", "off"},
  }));
  REQUIRE(s);
  auto& src = s->find("LLM")->sources.at(0);
  CHECK(src.api_key == "k");
  CHECK(*src.rpm == 60);
  CHECK(*src.tpm == 100000);
  CHECK(*src.max_concurrency == 4);
  CHECK(src.est_tokens == 500);
  CHECK(src.timeout_s == 60.5);
  CHECK(src.connect_timeout_s == 2);
  CHECK(*src.ttft_timeout_s == 15);
  CHECK(src.stream_idle_timeout_s == 20);
  CHECK(src.priority == -2);
  CHECK(src.overlay == R"({"temperature": 0})");
  REQUIRE(src.headers.size() == 2);
  CHECK(src.headers[0].first == "X-B"); // object order is kept
  CHECK(src.headers[0].second == "2");
  auto sc = s->find("LLM");
  CHECK(sc->selector == selector_policy::priority);
  CHECK_FALSE(sc->stream);
  CHECK(sc->max_attempts == 5);
  CHECK(sc->backoff_base_s == 1);
  CHECK(sc->backoff_max_s == 10);
  CHECK(sc->stall_window_s == 100);
  CHECK(*sc->call_deadline_s == 90);
  CHECK(*sc->breaker.max_cooldown_s == 600);
  CHECK(sc->on_quota_full == refusal_policy::fail);
  CHECK(*s->global.telemetry_db == "off");
}

TEST_CASE("sources are ordered by name, provider and name are "
          "case-insensitive, names stored lower case") {
  auto s = load_settings({
    {"LLM__GENERIC__Zeta__BASE_URL", "http://z"},
    {"LLM__GENERIC__Zeta__MODEL", "m"},
    {"LLM__OpenAI__Alpha__BASE_URL", "http://a"},
    {"LLM__OpenAI__Alpha__MODEL", "m"},
    {"LLM__openai__mid__BASE_URL", "http://m"},
    {"LLM__openai__mid__MODEL", "m"},
  });
  REQUIRE(s);
  auto& sources = s->find("LLM")->sources;
  REQUIRE(sources.size() == 3);
  CHECK(sources[0].name == "alpha");
  CHECK(sources[0].provider == "openai");
  CHECK(sources[1].name == "mid");
  CHECK(sources[2].name == "zeta");
  CHECK(sources[2].provider == "generic");
  CHECK(sources[2].profile.name == "generic");
}

TEST_CASE("several scopes load independently") {
  auto s = load_settings(base({{"EMBED__GENERIC__E1__BASE_URL", "http://e"},
                               {"EMBED__GENERIC__E1__MODEL", "emb"},
                               {"EMBED__MAX_ATTEMPTS", "1"}}));
  REQUIRE(s);
  CHECK(s->scopes.size() == 2);
  CHECK(s->find("EMBED")->max_attempts == 1);
  CHECK(s->find("LLM")->max_attempts == 3);
  CHECK(s->find("EMBED")->sources.at(0).name == "e1");
}

TEST_CASE("variables that are not ours are ignored silently") {
  auto s = load_settings(base({{"PATH", "/usr/bin"},
                               {"HOME", "/root"},
                               {"OTHER__THING", "x"},
                               {"APP__DB__HOST__PORT", "5432"},
                               {"LLMX_FOO", "1"},
                               // Another program's: LLM__API_KEY and
                               // LLM__MODEL are no pgw keys either.
                               {"LLM_API_KEY", "sk-other"},
                               {"LLM_MODEL", "other"},
                               {"llmx__foo", "1"}}));
  REQUIRE(s);
  CHECK(s->warnings.empty());
  CHECK(s->scopes.size() == 1);
}

TEST_CASE("unknown scope keys and source fields are warnings, not errors") {
  auto s = load_settings(base({{"LLM__FOO", "1"},
                               {"LLM__HEDGE__BEFORE_S", "1"},
                               {"LLM__OPENAI__A__APIKEY", "typo"},
                               {"LLM__OPENAI__A__TIMEOUT_S__X", "1"},
                               {"LLM__OPENAI__MODEL", "no name"}}));
  REQUIRE(s);
  CHECK(has_warning(*s, "unknown key LLM__FOO ignored"));
  CHECK(has_warning(*s, "unknown key LLM__HEDGE__BEFORE_S ignored"));
  CHECK(has_warning(*s, "unknown key LLM__OPENAI__A__APIKEY ignored (did "
                        "you mean LLM__OPENAI__A__API_KEY?)"));
  CHECK(has_warning(*s, "unknown key LLM__OPENAI__A__TIMEOUT_S__X ignored"));
  CHECK(has_warning(*s, "unknown key LLM__OPENAI__MODEL ignored"));
  CHECK(s->warnings.size() == 5);
  // The value of an unknown key is never repeated (it may be a secret).
  for (auto& w : s->warnings)
    CHECK_FALSE(contains(w, "typo"));
}

TEST_CASE("a misspelt key of a scope, a source or pgw names the key "
          "probably meant") {
  auto s = load_settings(base({{"LLM__MAX_ATTEMPT", "3"},
                               {"LLM__HEDGE__AFTERS", "1"},
                               {"LLM__TIMOUT_S", "5"},
                               {"LLM__OPENAI__A__BASE_ULR", "x"},
                               {"LLM__OPENAI__A__MODLE", "m"},
                               {"LLM__OPENAI__A__COLOUR", "far from all"},
                               {"PGW_SERVE_MAX_INFLGHT", "9"},
                               {"PGW_TOTALLY_UNKNOWN", "x"}}));
  REQUIRE(s);
  const std::vector<std::string> expected = {
    "unknown key LLM__MAX_ATTEMPT ignored (did you mean LLM__MAX_ATTEMPTS?)",
    "unknown key LLM__HEDGE__AFTERS ignored (did you mean "
    "LLM__HEDGE__AFTER_S?)",
    "unknown key LLM__TIMOUT_S ignored (did you mean LLM__TIMEOUT_S?)",
    "unknown key LLM__OPENAI__A__BASE_ULR ignored (did you mean "
    "LLM__OPENAI__A__BASE_URL?)",
    "unknown key LLM__OPENAI__A__MODLE ignored (did you mean "
    "LLM__OPENAI__A__MODEL?)",
    "unknown key LLM__OPENAI__A__COLOUR ignored",
    "unknown key PGW_SERVE_MAX_INFLGHT ignored (did you mean "
    "PGW_SERVE_MAX_INFLIGHT?)",
    "unknown key PGW_TOTALLY_UNKNOWN ignored",
  };
  for (auto& text : expected)
    CHECK_MESSAGE(has_warning(*s, text), text);
  CHECK(s->warnings.size() == expected.size());
}

TEST_CASE("keys meant for a scope or for pgw but misspelled are warnings "
          "naming the key probably meant") {
  auto s = load_settings(base({{"Llm__OPENAI__A__TIMEOUT_S", "5"},
                               {"LLM_OPENAI__A__TIMEOUT_S", "7"},
                               {"LLM_X__Y", "1"},
                               {"LLM_MAX_ATTEMPTS", "9"},
                               {"llm__openai__b__model", "lower case"},
                               {"Llm__FOO", "1"},
                               {"pgw_log", "debug"},
                               {"Pgw_Nothing", "x"}}));
  REQUIRE(s);
  const std::vector<std::string> expected = {
    "unknown key Llm__OPENAI__A__TIMEOUT_S ignored (scope names are "
    "case-sensitive: did you mean LLM__OPENAI__A__TIMEOUT_S?)",
    "unknown key LLM_OPENAI__A__TIMEOUT_S ignored (keys of scope LLM start "
    "with LLM__: did you mean LLM__OPENAI__A__TIMEOUT_S?)",
    "unknown key LLM_X__Y ignored (keys of scope LLM start with LLM__)",
    "unknown key LLM_MAX_ATTEMPTS ignored (keys of scope LLM start with "
    "LLM__: did you mean LLM__MAX_ATTEMPTS?)",
    "unknown key llm__openai__b__model ignored (scope names are "
    "case-sensitive: did you mean LLM__OPENAI__B__MODEL?)",
    "unknown key Llm__FOO ignored (scope names are case-sensitive: the scope "
    "is LLM)",
    "unknown key pgw_log ignored (keys are case-sensitive: did you mean "
    "PGW_LOG?)",
    "unknown key Pgw_Nothing ignored (keys are case-sensitive: pgw's are "
    "upper case)",
  };
  for (auto& text : expected)
    CHECK_MESSAGE(has_warning(*s, text), text);
  CHECK(s->warnings.size() == 8);
  // Ignored, as the warnings say: nothing reached the scope or its source.
  auto sc = s->find("LLM");
  REQUIRE(sc != nullptr);
  CHECK(sc->max_attempts == 3);
  REQUIRE(sc->sources.size() == 1);
  CHECK(sc->sources[0].timeout_s == 120);
}

TEST_CASE("a key with one '_' after a scope's name is matched to the longest "
          "scope name") {
  auto s = load_settings(base({{"LLM_X__OPENAI__B__BASE_URL", "https://h/v1"},
                               {"LLM_X__OPENAI__B__MODEL", "m"},
                               {"LLM_X_OPENAI__B__TIMEOUT_S", "5"}}));
  REQUIRE(s);
  CHECK(has_warning(*s, "unknown key LLM_X_OPENAI__B__TIMEOUT_S ignored (keys "
                        "of scope LLM_X start with LLM_X__: did you mean "
                        "LLM_X__OPENAI__B__TIMEOUT_S?)"));
  CHECK(s->warnings.size() == 1);
}

TEST_CASE("unknown PGW_ keys are warnings, known global keys are read") {
  auto s = load_settings(base({{"PGW_LIMITER_BACKNED", "memory"},
                               {"PGW_PROVIDERS_PATH_X", "x"}}));
  REQUIRE(s);
  CHECK(has_warning(*s, "unknown key PGW_LIMITER_BACKNED ignored (did you "
                        "mean PGW_LIMITER_BACKEND?)"));
  CHECK(has_warning(*s, "unknown key PGW_PROVIDERS_PATH_X ignored (did you "
                        "mean PGW_PROVIDERS_PATH?)"));
}

TEST_CASE("a reserved provider segment is an error naming the key") {
  for (auto reserved : {"HEDGE", "BREAKER", "STRUCTURED", "CACHE", "SELECTOR",
                        "STREAM", "MAX_ATTEMPTS", "hedge"}) {
    CAPTURE(reserved);
    auto key = std::string{"LLM__"} + reserved + "__A__MODEL";
    auto msg = load_error(base({{key, "m"}}));
    CHECK(contains(msg, key + ": " + reserved + " is a reserved segment"));
  }
}

TEST_CASE("an unknown provider is an error listing the known ones") {
  auto msg = load_error(base({{"LLM__NOPE__B__MODEL", "m"}}));
  CHECK(contains(msg, "LLM__NOPE__B__MODEL: unknown provider NOPE"));
  CHECK(contains(msg, "known providers: "));
  CHECK(contains(msg, "openai"));
  CHECK(contains(msg, "generic"));
}

TEST_CASE("a source name is unique within its scope across providers") {
  auto msg = load_error(base({{"LLM__GENERIC__A__BASE_URL", "http://h"},
                              {"LLM__GENERIC__A__MODEL", "m"}}));
  CHECK(contains(msg, "LLM__OPENAI__A__"));
  CHECK(contains(msg, ": source name a is already used by provider generic "
                      "in scope LLM"));
  // The same name in another scope is fine.
  auto ok = load_settings(base({{"EMBED__GENERIC__A__BASE_URL", "http://h"},
                                {"EMBED__GENERIC__A__MODEL", "m"}}));
  CHECK(ok);
}

TEST_CASE("the same field spelled twice is an error") {
  auto msg = load_error(base({{"LLM__openai__a__MODEL", "other"}}));
  CHECK(contains(msg, "LLM__openai__a__MODEL: sets the same field as "
                      "LLM__OPENAI__A__MODEL"));
}

TEST_CASE("an invalid source name is an error naming the key") {
  auto msg = load_error(base({{"LLM__OPENAI___B__MODEL", "m"}}));
  CHECK(contains(msg, "LLM__OPENAI___B__MODEL: invalid source name \"_B\""));
  CHECK(load_settings(base({{"LLM__OPENAI__B-2__MODEL", "m"},
                            {"LLM__OPENAI__B-2__BASE_URL", "http://h"}})));
}

TEST_CASE("MODEL and BASE_URL are required for every source") {
  auto no_model = base();
  no_model.erase("LLM__OPENAI__A__MODEL");
  CHECK(load_error(no_model)
        == "LLM__OPENAI__A__MODEL: missing (required for every source: "
           "upstream model name)");
  auto no_url = base();
  no_url.erase("LLM__OPENAI__A__BASE_URL");
  CHECK(contains(load_error(no_url), "LLM__OPENAI__A__BASE_URL: missing"));
  // A source that only sets another field still needs both.
  CHECK(contains(load_error(base({{"LLM__GENERIC__B__RPM", "1"}})),
                 "LLM__GENERIC__B__BASE_URL: missing"));
  CHECK(contains(load_error(base({{"LLM__OPENAI__A__MODEL", ""}})),
                 "LLM__OPENAI__A__MODEL: missing"));
}

TEST_CASE("a failed load still gives the misspelt key's hint") {
  std::vector<std::string> warnings{"from the env file"};
  auto s = load_settings(base({{"LLM__GENERIC__B__BASEURL", "http://h"},
                               {"LLM__GENERIC__B__MODEL", "m"}}),
                         &warnings);
  REQUIRE_FALSE(s);
  CHECK(contains(message_of(s.error()), "LLM__GENERIC__B__BASE_URL: missing"));
  CHECK(warnings
        == std::vector<std::string>{
          "from the env file",
          "unknown key LLM__GENERIC__B__BASEURL ignored (did you mean "
          "LLM__GENERIC__B__BASE_URL?)"});
}

TEST_CASE("integers are parsed strictly") {
  const std::string key = "LLM__OPENAI__A__RPM";
  for (auto bad : {"1.5", "12abc", "", "1e3", " 5", "5 ", "+5", "nan", "0x10",
                   "ten"}) {
    CAPTURE(bad);
    CHECK(load_error(base({{key, bad}}))
          == key + "=" + bad
               + ": not an integer (expected a whole number such as 10)");
  }
  CHECK(contains(load_error(base({{key, "99999999999999999999"}})),
                 "out of range"));
  auto s = load_settings(base({{key, "007"}}));
  REQUIRE(s);
  CHECK(*s->find("LLM")->sources[0].rpm == 7);
}

TEST_CASE("numbers are parsed strictly and must be finite") {
  const std::string key = "LLM__OPENAI__A__TIMEOUT_S";
  for (auto bad : {"nan", "inf", "-inf", "infinity", "1e999", "-1e999",
                   "NaN"}) {
    CAPTURE(bad);
    CHECK(load_error(base({{key, bad}}))
          == key + "=" + bad
               + ": not a finite number (expected a decimal number such as "
                 "1.5)");
  }
  for (auto bad : {"12abc", "", "1,5", " 1", "1s", "+1", "."}) {
    CAPTURE(bad);
    CHECK(load_error(base({{key, bad}}))
          == key + "=" + bad
               + ": not a number (expected a decimal number such as 1.5)");
  }
  auto s = load_settings(base({{key, "1e1"}}));
  REQUIRE(s);
  CHECK(s->find("LLM")->sources[0].timeout_s == 10);
}

TEST_CASE("scope and global numbers are parsed strictly too") {
  CHECK(load_error(base({{"LLM__HEDGE__AFTER_S", "inf"}}))
        == "LLM__HEDGE__AFTER_S=inf: not a finite number (expected a "
           "decimal number such as 1.5)");
  CHECK(load_error(base({{"LLM__MAX_ATTEMPTS", "2.0"}}))
        == "LLM__MAX_ATTEMPTS=2.0: not an integer (expected a whole number "
           "such as 10)");
  CHECK(contains(load_error(base({{"PGW_CACHE_TTL_S", "1h"}})),
                 "PGW_CACHE_TTL_S=1h: not a number"));
}

TEST_CASE("booleans accept true/false/1/0/yes/no/on/off in any case") {
  for (auto [text, expected] :
       std::initializer_list<std::pair<const char*, bool>>{
         {"true", true}, {"TRUE", true}, {"1", true}, {"Yes", true},
         {"on", true}, {"false", false}, {"False", false}, {"0", false},
         {"no", false}, {"OFF", false}}) {
    CAPTURE(text);
    auto s = load_settings(base({{"LLM__STREAM", text}}));
    REQUIRE(s);
    CHECK(s->find("LLM")->stream == expected);
  }
  CHECK(load_error(base({{"LLM__STREAM", "maybe"}}))
        == "LLM__STREAM=maybe: not a boolean (expected true/false, 1/0, "
           "yes/no, on/off)");
  CHECK(contains(load_error(base({{"LLM__STREAM", ""}})), "not a boolean"));
}

TEST_CASE("HEADERS must be a JSON object of strings, values never echoed") {
  const std::string key = "LLM__OPENAI__A__HEADERS";
  auto not_json = load_error(base({{key, "{\"X-Secret\": \"hdr-SECRET"}}));
  CHECK(contains(not_json, key + "=***: not valid JSON"));
  CHECK_FALSE(contains(not_json, "hdr-SECRET"));
  CHECK(contains(load_error(base({{key, "[\"hdr-SECRET\"]"}})),
                 key + "=***: not a JSON object"));
  auto number = load_error(base({{key, R"({"X-Count": 3})"}}));
  CHECK(contains(number, key + "=***: the value of header \"X-Count\" is "
                               "not a string"));
  auto bad_name = load_error(base({{key, R"({"Bad Name": "hdr-SECRET"})"}}));
  CHECK(contains(bad_name, key + "=***: \"Bad Name\" is not a valid header "
                                 "name"));
  CHECK_FALSE(contains(bad_name, "hdr-SECRET"));
  auto injected =
    load_error(base({{key, R"({"X-A": "hdr-SECRET\r\nX-Evil: 1"})"}}));
  CHECK(contains(injected, key + "=***: the value of header \"X-A\" "
                                 "contains a line break"));
  CHECK_FALSE(contains(injected, "hdr-SECRET"));
  CHECK(load_settings(base({{key, R"({"X-Org": "o", "api-key": "k"})"}})));
  CHECK(load_settings(base({{key, "{}"}})));
}

TEST_CASE("OVERLAY must be a JSON object") {
  const std::string key = "LLM__OPENAI__A__OVERLAY";
  CHECK(contains(load_error(base({{key, "{\"a\":"}})),
                 key + "=*** (5 bytes): not valid JSON at byte offset 5"));
  CHECK(load_error(base({{key, "[1]"}}))
        == key
             + "=*** (3 bytes): not a JSON object (a JSON object merged into every "
               "request body)");
  CHECK(contains(load_error(base({{key, "\"text\""}})), "not a JSON object"));
  CHECK(contains(load_error(base({{key, ""}})), "not valid JSON"));
  CHECK(load_settings(base({{key, R"({"extra": {"nested": [1, 2]}})"}})));
}

TEST_CASE("BASE_URL must be http(s) with a host, one trailing slash is "
          "stripped, paths kept") {
  const std::string key = "LLM__OPENAI__A__BASE_URL";
  auto url_of = [&](const std::string& url) {
    auto s = load_settings(base({{key, url}}));
    REQUIRE(s);
    return s->find("LLM")->sources[0].base_url;
  };
  CHECK(url_of("https://api.example.com/v1/") == "https://api.example.com/v1");
  CHECK(url_of("http://127.0.0.1:8080") == "http://127.0.0.1:8080");
  CHECK(url_of("http://h:8080/") == "http://h:8080");
  CHECK(url_of("HTTPS://H/a/b") == "https://h/a/b"); // scheme, host: lower
  CHECK(url_of("http://[::1]:9000/v1") == "http://[::1]:9000/v1");
  CHECK(load_error(base({{key, "ftp://h/v1"}}))
        == key + "=ftp://h/v1: must start with http:// or https:// "
                 "(expected http(s)://host[:port][/path])");
  CHECK(contains(load_error(base({{key, "api.example.com/v1"}})),
                 "must start with http://"));
  CHECK(contains(load_error(base({{key, "https://"}})),
                 key + "=https://: has no host"));
  CHECK(contains(load_error(base({{key, "https:///v1"}})), "has no host"));
  CHECK(contains(load_error(base({{key, "https://h:99999/v1"}})),
                 "has an invalid port"));
  CHECK(contains(load_error(base({{key, "https://h:/v1"}})),
                 "has an invalid port"));
  CHECK(contains(load_error(base({{key, "https://h/v1?x=1"}})),
                 "must not contain a query or fragment"));
  CHECK(contains(load_error(base({{key, "https://h o/v1"}})),
                 "must not contain spaces"));
  CHECK(contains(load_error(base({{key, "https://h!/v1"}})),
                 "has an invalid host"));
}

TEST_CASE("a BASE_URL error masks user information") {
  const std::string key = "LLM__OPENAI__A__BASE_URL";
  auto msg = load_error(base({{key, "https://user:pw-SECRET@h:bad/v1"}}));
  CHECK(contains(msg, key + "=https://***@h:bad/v1: must not contain "
                            "credentials"));
  CHECK_FALSE(contains(msg, "pw-SECRET"));
}

TEST_CASE("a BASE_URL error masks query values and the fragment") {
  const std::string key = "LLM__OPENAI__A__BASE_URL";
  auto msg = load_error(
    base({{key, "http://127.0.0.1:36135/v1?key=sk-SECRETKEY1234567890"},
          {"LLM__OPENAI__A__API_KEY", "sk-SECRETKEY1234567890"}}));
  CHECK(contains(msg, key + "=http://127.0.0.1:36135/v1?key=***: must not "
                            "contain a query or fragment"));
  CHECK_FALSE(contains(msg, "SECRETKEY"));
  // A key that is not configured anywhere else is masked too.
  msg = load_error(
    base({{key, "https://h/v1?a=1&token-xyz-987654321&b=&c=2#frag-SECRET"}}));
  CHECK(contains(msg, key + "=https://h/v1?a=***&***&b=***&c=***#***: "));
  CHECK_FALSE(contains(msg, "987654321"));
  CHECK_FALSE(contains(msg, "frag-SECRET"));
}
