// show_settings / show_settings_json, and that secrets never leak anywhere.

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

using namespace pgw;

namespace {

namespace json = boost::json;

/// A key no message may ever contain.
const std::string api_key = "sk-DISTINCTIVE-q7Zx91LmP";

env_map two(env_map extra = {}) {
  env_map env{{"LLM__OPENAI__A__BASE_URL", "https://api.example.com/v1"},
              {"LLM__OPENAI__A__MODEL", "gpt-test"},
              {"LLM__OPENAI__A__API_KEY", api_key},
              {"LLM__GENERIC__B__BASE_URL", "http://127.0.0.1:9000/v1"},
              {"LLM__GENERIC__B__MODEL", "local"}};
  for (auto& [key, value] : extra)
    env[key] = value;
  return env;
}

std::string message_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : std::string{};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool has_line(const std::string& text, const std::string& line) {
  return contains("\n" + text, "\n" + line + "\n");
}

} // namespace

TEST_CASE("show_settings: every effective key, defaults included") {
  auto s = load_settings(two({{"LLM__OPENAI__A__RPM", "60"},
                              {"LLM__HEDGE__AFTER_S", "2.5"}}));
  REQUIRE(s);
  auto text = show_settings(*s);
  for (auto line : {
         "PGW_LIMITER_BACKEND=memory",
         "PGW_BREAKER_BACKEND=memory",
         "PGW_CACHE_BACKEND=none",
         "PGW_CACHE_TTL_S=3600",
         "PGW_CACHE_NAMESPACE=pgw",
         "REDIS_URL=redis://127.0.0.1:6379/0",
         "PGW_PRICING_PATH=config/prices.json",
         "PGW_TELEMETRY_DB=(unset)",
         "PGW_TELEMETRY_CONTENT=off",
         "PGW_TRANSPORT=beast",
         "PGW_TRANSPORT_THREADS=0",
         "PGW_LOG=warn",
         "PGW_SCHEDULER_THREADS=1",
         "PGW_PROVIDERS_PATH=(unset)",
         "PGW_SERVE_KEYS_FILE=(unset)",
         "PGW_SERVE_MAX_BODY_BYTES=8388608",
         "PGW_SERVE_MAX_INFLIGHT=256",
         "PGW_SERVE_DRAIN_S=30",
         "PGW_SERVE_READ_TIMEOUT_S=60",
         "PGW_SERVE_WRITE_TIMEOUT_S=60",
         "LLM__SELECTOR=health_aware",
         "LLM__STREAM=true",
         "LLM__MAX_ATTEMPTS=3",
         "LLM__BACKOFF_BASE_S=0.5",
         "LLM__BACKOFF_MAX_S=30",
         "LLM__STALL_WINDOW_S=300",
         "LLM__CALL_DEADLINE_S=(unset)",
         "LLM__HEDGE__AFTER_S=2.5",
         "LLM__HEDGE__MAX_EXTRA=1",
         "LLM__BREAKER__THRESHOLD=5",
         "LLM__BREAKER__COOLDOWN_S=30",
         "LLM__BREAKER__MIN_CALLS=10",
         "LLM__BREAKER__FAIL_RATE=0.6",
         "LLM__BREAKER__WINDOW_S=60",
         "LLM__BREAKER__MAX_COOLDOWN_S=300",
         "LLM__ON_QUOTA_FULL=wait",
         "LLM__ON_CIRCUIT_OPEN=fail",
         "LLM__STRUCTURED__MAX_REASKS=2",
         "LLM__CACHE__ENABLED=false",
         "LLM__CACHE__FLEET_SINGLE_FLIGHT=false",
         "LLM__CACHE__STORE_LENGTH=false",
         "LLM__CACHE__TTL_S=(unset)",
         "LLM__CACHE__MAX_ENTRIES=10000",
         "LLM__CACHE__MAX_BYTES=67108864",
         "LLM__OPENAI__A__BASE_URL=https://api.example.com/v1",
         "LLM__OPENAI__A__MODEL=gpt-test",
         "LLM__OPENAI__A__API_KEY=***",
         "LLM__OPENAI__A__RPM=60",
         "LLM__OPENAI__A__TPM=(unset)",
         "LLM__OPENAI__A__MAX_CONCURRENCY=(unset)",
         "LLM__OPENAI__A__EST_TOKENS=1000",
         "LLM__OPENAI__A__TIMEOUT_S=120",
         "LLM__OPENAI__A__CONNECT_TIMEOUT_S=10",
         "LLM__OPENAI__A__TTFT_TIMEOUT_S=(unset)",
         "LLM__OPENAI__A__STREAM_IDLE_TIMEOUT_S=30",
         "LLM__OPENAI__A__PRIORITY=0",
         "LLM__OPENAI__A__OVERLAY={}",
         "LLM__OPENAI__A__HEADERS={}",
         "LLM__OPENAI__A__KIND=chat",
         "LLM__GENERIC__B__API_KEY=(unset)",
         "LLM__GENERIC__B__BASE_URL=http://127.0.0.1:9000/v1",
       }) {
    CAPTURE(line);
    CHECK(has_line(text, line));
  }
  // Grouped: the scope's keys come before its sources, a before b.
  CHECK(text.find("LLM__SELECTOR=") < text.find("LLM__OPENAI__A__MODEL="));
  CHECK(text.find("LLM__OPENAI__A__MODEL=")
        < text.find("LLM__GENERIC__B__MODEL="));
  CHECK_FALSE(contains(text, api_key));
}

TEST_CASE("show_settings: an explicit MAX_COOLDOWN_S, or max(300, cooldown)") {
  auto s = load_settings(two({{"LLM__BREAKER__COOLDOWN_S", "400"}}));
  REQUIRE(s);
  CHECK(has_line(show_settings(*s), "LLM__BREAKER__MAX_COOLDOWN_S=400"));
  s = load_settings(two({{"LLM__BREAKER__MAX_COOLDOWN_S", "900"}}));
  REQUIRE(s);
  CHECK(has_line(show_settings(*s), "LLM__BREAKER__MAX_COOLDOWN_S=900"));
}

TEST_CASE("show_settings masks header values and URL credentials") {
  auto s = load_settings(two({
    {"LLM__OPENAI__A__HEADERS", R"({"X-Org": "org-HDRSECRET"})"},
    {"REDIS_URL", "redis://:pw-REDISSECRET@h:6379/2"},
  }));
  REQUIRE(s);
  auto text = show_settings(*s);
  CHECK(has_line(text, "LLM__OPENAI__A__HEADERS={\"X-Org\":\"***\"}"));
  CHECK(has_line(text, "REDIS_URL=redis://***@h:6379/2"));
  auto doc = show_settings_json(*s);
  // (BASE_URL credentials are refused by validation: config_load_test.)
  for (auto secret : {"HDRSECRET", "REDISSECRET"}) {
    CAPTURE(secret);
    CHECK_FALSE(contains(text, secret));
    CHECK_FALSE(contains(doc, secret));
    for (auto& w : s->warnings)
      CHECK_FALSE(contains(w, secret));
  }
}

TEST_CASE("show_settings_json: global, scopes, sources, same masking") {
  auto s = load_settings(two({{"LLM__OPENAI__A__OVERLAY", R"({"top_p": 1})"},
                              {"LLM__OPENAI__A__HEADERS", R"({"X-A": "v"})"},
                              {"LLM__CALL_DEADLINE_S", "90"}}));
  REQUIRE(s);
  auto text = show_settings_json(*s);
  CHECK_FALSE(contains(text, api_key));
  auto doc = json::parse(text).as_object();
  auto& global = doc.at("global").as_object();
  CHECK(global.at("limiter_backend").as_string() == "memory");
  CHECK(global.at("cache_ttl_s").to_number<double>() == 3600);
  CHECK(global.at("telemetry_db").is_null());
  // Every key the plain output shows is in the JSON too.
  CHECK(global.at("transport").as_string() == "beast");
  CHECK(global.at("transport_threads").as_int64() == 0);
  CHECK(global.at("log").as_string() == "warn");
  CHECK(global.at("scheduler_threads").as_int64() == 1);
  CHECK(global.at("providers_path").is_null());
  CHECK(global.at("serve").at("max_inflight").as_int64() == 256);
  CHECK(global.at("serve").at("keys_file").is_null());
  auto& llm = doc.at("scopes").as_object().at("LLM").as_object();
  CHECK(llm.at("selector").as_string() == "health_aware");
  CHECK(llm.at("stream").as_bool());
  CHECK(llm.at("call_deadline_s").to_number<double>() == 90);
  CHECK(llm.at("hedge").as_object().at("after_s").is_null());
  CHECK(llm.at("breaker").as_object().at("max_cooldown_s").to_number<double>() == 300);
  auto& sources = llm.at("sources").as_array();
  REQUIRE(sources.size() == 2);
  auto& a = sources[0].as_object();
  CHECK(a.at("name").as_string() == "a");
  CHECK(a.at("provider").as_string() == "openai");
  CHECK(a.at("api_key").as_string() == "***");
  CHECK(a.at("rpm").is_null());
  CHECK(a.at("timeout_s").to_number<double>() == 120);
  CHECK(a.at("est_tokens").as_int64() == 1000);
  CHECK(a.at("overlay").as_object().at("top_p").as_int64() == 1);
  CHECK(a.at("headers").as_object().at("X-A").as_string() == "***");
  auto& b = sources[1].as_object();
  CHECK(b.at("name").as_string() == "b");
  CHECK(b.at("api_key").is_null());
}

TEST_CASE("the API key never appears in errors, whatever else is wrong") {
  const env_map broken[] = {
    two({{"LLM__OPENAI__A__TIMEOUT_S", "-1"}}),
    two({{"LLM__OPENAI__A__TIMEOUT_S", "nan"}}),
    two({{"LLM__OPENAI__A__API_KEY", api_key + "\n"}}),
    two({{"LLM__OPENAI__A__HEADERS", "{\"Authorization\": \"Bearer " + api_key
                                         + "\", \"Bad Name\": \"x\"}"}}),
    two({{"LLM__OPENAI__A__HEADERS", "{\"Authorization\": " + api_key + "}"}}),
    two({{"LLM__OPENAI__A__HEADERS",
          "{\"X\": \"" + api_key + "\\r\\nInjected: 1\"}"}}),
    two({{"LLM__OPENAI__A__BASE_URL", "https://" + api_key + "@h:x/v1"}}),
    two({{"LLM__OPENAI__A__BASE_URL", "https://u:" + api_key + "@/v1"}}),
    two({{"REDIS_URL", "redis://:" + api_key + "@h"}}),
    two({{"REDIS_URL", "redis://user:" + api_key + "@h:x"}}),
    two({{"REDIS_URL", "redis://:" + api_key + "/x@h:1"}}),
    two({{"LLM__OPENAI__A__MODEL", ""}}),
    two({{"LLM__NOPE__A__API_KEY", api_key}}),
    two({{"LLM__HEDGE__A__API_KEY", api_key}}),
    two({{"LLM__GENERIC__A__API_KEY", api_key}}),
  };
  for (auto& env : broken) {
    auto s = load_settings(env);
    REQUIRE_FALSE(s);
    auto msg = message_of(s.error());
    CAPTURE(msg);
    CHECK_FALSE(contains(msg, api_key));
    CHECK_FALSE(contains(msg, "q7Zx91LmP"));
    CHECK_FALSE(contains(describe(s.error()), api_key));
  }
}

TEST_CASE("the API key never appears in warnings or show output") {
  auto s = load_settings(two({{"LLM__OPENAI__A__RPM", "60"},
                              {"LLM__OPENAI__A__API_KEYS", api_key},
                              {"LLM__FOO", api_key},
                              {"PGW_SECRET", api_key},
                              {"LLM__HEDGE__AFTER_S", "1"},
                              {"LLM__HEDGE__MAX_EXTRA", "3"}}));
  REQUIRE(s);
  CHECK(s->warnings.size() >= 3);
  for (auto& w : s->warnings) {
    CAPTURE(w);
    CHECK_FALSE(contains(w, api_key));
  }
  CHECK_FALSE(contains(show_settings(*s), api_key));
  CHECK_FALSE(contains(show_settings_json(*s), api_key));
}

TEST_CASE("the API key never appears in env-file errors") {
  auto path = (std::filesystem::temp_directory_path()
               / ("pgw-config-show-" + std::to_string(::getpid()) + ".env"))
                .string();
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(("A=1\nKEY=\"" + api_key + "\n").c_str(), f);
    std::fclose(f);
  }
  auto env = read_env_file(path);
  std::remove(path.c_str());
  REQUIRE_FALSE(env);
  CHECK_FALSE(contains(message_of(env.error()), api_key));
  CHECK(contains(message_of(env.error()), ":2:"));
}
