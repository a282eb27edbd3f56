// validate: one test per rule of SPEC §3 — a value that breaks it (the error
// names the exact key and the problem) and a boundary value that passes.

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
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

/// Two sources: openai `a` and generic `b`, plus `extra`.
env_map two(env_map extra = {}) {
  auto env = base({{"LLM__GENERIC__B__BASE_URL", "http://127.0.0.1:9000/v1"},
                   {"LLM__GENERIC__B__MODEL", "local"}});
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

bool loads(const env_map& env) {
  auto s = load_settings(env);
  if (!s)
    MESSAGE("unexpected error: " << message_of(s.error()));
  return static_cast<bool>(s);
}

std::vector<std::string> warnings_of(const env_map& env) {
  auto s = load_settings(env);
  REQUIRE(s);
  return s->warnings;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

// -- per source ------------------------------------------------------------------

TEST_CASE("TIMEOUT_S must be > 0") {
  CHECK(load_error(base({{"LLM__OPENAI__A__TIMEOUT_S", "-1"}}))
        == "LLM__OPENAI__A__TIMEOUT_S=-1: must be a finite number > 0 "
           "(total time for one attempt)");
  CHECK(contains(load_error(base({{"LLM__OPENAI__A__TIMEOUT_S", "0"}})),
                 "LLM__OPENAI__A__TIMEOUT_S=0: must be a finite number > 0"));
  CHECK(loads(base({{"LLM__OPENAI__A__TIMEOUT_S", "0.001"}})));
}

TEST_CASE("CONNECT_TIMEOUT_S must be > 0") {
  CHECK(load_error(base({{"LLM__OPENAI__A__CONNECT_TIMEOUT_S", "0"}}))
        == "LLM__OPENAI__A__CONNECT_TIMEOUT_S=0: must be a finite number > 0 "
           "(TCP/TLS connect timeout)");
  CHECK(loads(base({{"LLM__OPENAI__A__CONNECT_TIMEOUT_S", "0.5"}})));
}

TEST_CASE("TTFT_TIMEOUT_S must be > 0") {
  CHECK(load_error(base({{"LLM__OPENAI__A__TTFT_TIMEOUT_S", "0"}}))
        == "LLM__OPENAI__A__TTFT_TIMEOUT_S=0: must be a finite number > 0 "
           "(streaming: max wait for the first token)");
  CHECK(loads(base({{"LLM__OPENAI__A__TTFT_TIMEOUT_S", "0.1"}})));
}

TEST_CASE("STREAM_IDLE_TIMEOUT_S must be > 0") {
  CHECK(load_error(base({{"LLM__OPENAI__A__STREAM_IDLE_TIMEOUT_S", "-0.5"}}))
        == "LLM__OPENAI__A__STREAM_IDLE_TIMEOUT_S=-0.5: must be a finite "
           "number > 0 (streaming: max silence after the first token)");
  CHECK(loads(base({{"LLM__OPENAI__A__STREAM_IDLE_TIMEOUT_S", "1"}})));
}

TEST_CASE("RPM, TPM and MAX_CONCURRENCY are integers >= 1") {
  CHECK(load_error(base({{"LLM__OPENAI__A__RPM", "0"}}))
        == "LLM__OPENAI__A__RPM=0: must be an integer >= 1 (requests per "
           "minute; leave unset for unlimited)");
  CHECK(load_error(base({{"LLM__OPENAI__A__TPM", "-5"}}))
        == "LLM__OPENAI__A__TPM=-5: must be an integer >= 1 (tokens per "
           "minute; leave unset for unlimited)");
  CHECK(load_error(base({{"LLM__OPENAI__A__MAX_CONCURRENCY", "0"}}))
        == "LLM__OPENAI__A__MAX_CONCURRENCY=0: must be an integer >= 1 "
           "(requests in flight; leave unset for unlimited)");
  CHECK(loads(base({{"LLM__OPENAI__A__RPM", "1"},
                    {"LLM__OPENAI__A__TPM", "1"},
                    {"LLM__OPENAI__A__EST_TOKENS", "1"},
                    {"LLM__OPENAI__A__MAX_CONCURRENCY", "1"}})));
}

TEST_CASE("EST_TOKENS is an integer >= 0") {
  CHECK(load_error(base({{"LLM__OPENAI__A__EST_TOKENS", "-1"}}))
        == "LLM__OPENAI__A__EST_TOKENS=-1: must be an integer >= 0 (tokens "
           "reserved per attempt before usage is known)");
  CHECK(loads(base({{"LLM__OPENAI__A__EST_TOKENS", "0"}})));
}

TEST_CASE("TPM set requires EST_TOKENS > 0") {
  CHECK(load_error(base({{"LLM__OPENAI__A__TPM", "1000"},
                         {"LLM__OPENAI__A__EST_TOKENS", "0"}}))
        == "LLM__OPENAI__A__EST_TOKENS=0: must be > 0 when "
           "LLM__OPENAI__A__TPM is set (a TPM limit needs a token estimate "
           "per attempt)");
  CHECK(loads(base({{"LLM__OPENAI__A__TPM", "1000"},
                    {"LLM__OPENAI__A__EST_TOKENS", "1"}})));
}

TEST_CASE("KIND is one of chat, embedding, ocr_vision, ocr_monkey") {
  CHECK(load_error(base({{"LLM__OPENAI__A__KIND", "completion"}}))
        == "LLM__OPENAI__A__KIND=completion: must be one of chat, embedding, "
           "ocr_vision, ocr_monkey (what the source serves)");
  CHECK(contains(load_error(base({{"LLM__OPENAI__A__KIND", "CHAT"}})),
                 "must be one of"));
  for (auto kind : {"chat", "embedding", "ocr_vision", "ocr_monkey"})
    CHECK(loads(base({{"LLM__OPENAI__A__KIND", kind}})));
}

TEST_CASE("API_KEY with a line break is rejected without echoing it") {
  auto msg = load_error(base({{"LLM__OPENAI__A__API_KEY", "sk-NL\nX"}}));
  CHECK(msg
        == "LLM__OPENAI__A__API_KEY=***: contains a line break or control "
           "character (sent as a bearer token header)");
  CHECK(loads(base({{"LLM__OPENAI__A__API_KEY", "sk-ok_123-._~+/="}})));
}

// -- per scope ---------------------------------------------------------------------

TEST_CASE("no config error shows a configured secret, wherever it sits") {
  // CA_FILE is echoed; a key pasted into it must still not appear.
  auto msg = load_error(base({{"LLM__OPENAI__A__API_KEY",
                               "sk-proj-pastedSECRET123456"},
                              {"LLM__OPENAI__A__CA_FILE",
                               "/nonexistent/sk-proj-pastedSECRET123456"}}));
  CHECK(msg == "LLM__OPENAI__A__CA_FILE=/nonexistent/***: cannot be read (No "
               "such file or directory)");
  msg = load_error(base({{"LLM__OPENAI__A__HEADERS",
                          R"({"X-Token":"hdr-value-7777"})"},
                         {"LLM__OPENAI__A__CA_FILE",
                          "/nonexistent/hdr-value-7777"}}));
  CHECK(contains(msg, "CA_FILE=/nonexistent/***: cannot be read"));
}

TEST_CASE("SELECTOR is one of health_aware, round_robin, priority") {
  CHECK(load_error(base({{"LLM__SELECTOR", "random"}}))
        == "LLM__SELECTOR=random: must be one of health_aware, round_robin, "
           "priority (how sources are ordered for admission)");
  for (auto sel : {"health_aware", "round_robin", "priority"})
    CHECK(loads(base({{"LLM__SELECTOR", sel}})));
}

TEST_CASE("MAX_ATTEMPTS >= 1") {
  CHECK(load_error(base({{"LLM__MAX_ATTEMPTS", "0"}}))
        == "LLM__MAX_ATTEMPTS=0: must be an integer >= 1 (retry budget of a "
           "call)");
  CHECK(loads(base({{"LLM__MAX_ATTEMPTS", "1"}})));
}

TEST_CASE("BACKOFF_BASE_S >= 0") {
  CHECK(load_error(base({{"LLM__BACKOFF_BASE_S", "-0.1"}}))
        == "LLM__BACKOFF_BASE_S=-0.1: must be a finite number >= 0 (base of "
           "the exponential backoff)");
  CHECK(loads(base({{"LLM__BACKOFF_BASE_S", "0"}})));
}

TEST_CASE("BACKOFF_MAX_S >= BACKOFF_BASE_S") {
  CHECK(load_error(base({{"LLM__BACKOFF_BASE_S", "2"},
                         {"LLM__BACKOFF_MAX_S", "1.5"}}))
        == "LLM__BACKOFF_MAX_S=1.5: must be >= LLM__BACKOFF_BASE_S=2 (cap of "
           "the exponential backoff)");
  CHECK(contains(load_error(base({{"LLM__BACKOFF_MAX_S", "0.4"}})),
                 "LLM__BACKOFF_MAX_S=0.4: must be >= LLM__BACKOFF_BASE_S=0.5"));
  CHECK(loads(base({{"LLM__BACKOFF_BASE_S", "2"},
                    {"LLM__BACKOFF_MAX_S", "2"}})));
  CHECK(loads(base({{"LLM__BACKOFF_BASE_S", "0"},
                    {"LLM__BACKOFF_MAX_S", "0"}})));
}

TEST_CASE("STALL_WINDOW_S > 0") {
  CHECK(load_error(base({{"LLM__STALL_WINDOW_S", "0"}}))
        == "LLM__STALL_WINDOW_S=0: must be a finite number > 0 (max time "
           "without progress)");
  CHECK(loads(base({{"LLM__STALL_WINDOW_S", "0.5"}})));
}

TEST_CASE("STALL_WINDOW_S >= every source's TTFT_TIMEOUT_S") {
  CHECK(load_error(two({{"LLM__STALL_WINDOW_S", "29"},
                        {"LLM__OPENAI__A__TTFT_TIMEOUT_S", "10"},
                        {"LLM__GENERIC__B__TTFT_TIMEOUT_S", "30"}}))
        == "LLM__STALL_WINDOW_S=29: must be >= "
           "LLM__GENERIC__B__TTFT_TIMEOUT_S=30 (a call must be able to wait "
           "out a slow first token)");
  CHECK(loads(two({{"LLM__STALL_WINDOW_S", "30"},
                   {"LLM__OPENAI__A__TTFT_TIMEOUT_S", "10"},
                   {"LLM__GENERIC__B__TTFT_TIMEOUT_S", "30"}})));
}

TEST_CASE("CALL_DEADLINE_S > 0") {
  CHECK(load_error(base({{"LLM__CALL_DEADLINE_S", "0"}}))
        == "LLM__CALL_DEADLINE_S=0: must be a finite number > 0 (wall-clock "
           "bound of a whole call)");
  CHECK(loads(base({{"LLM__CALL_DEADLINE_S", "0.25"}})));
}

TEST_CASE("HEDGE__AFTER_S > 0") {
  CHECK(load_error(two({{"LLM__HEDGE__AFTER_S", "0"}}))
        == "LLM__HEDGE__AFTER_S=0: must be a finite number > 0 (delay before "
           "a hedge leg starts)");
  CHECK(loads(two({{"LLM__HEDGE__AFTER_S", "0.01"}})));
}

TEST_CASE("HEDGE__AFTER_S < min(TIMEOUT_S) of the scope's sources") {
  auto env = two({{"LLM__OPENAI__A__TIMEOUT_S", "20"},
                  {"LLM__GENERIC__B__TIMEOUT_S", "10"}});
  env["LLM__HEDGE__AFTER_S"] = "10";
  CHECK(load_error(env)
        == "LLM__HEDGE__AFTER_S=10: must be < LLM__GENERIC__B__TIMEOUT_S=10, "
           "the shortest source timeout (a hedge must start before the "
           "primary attempt times out)");
  env["LLM__HEDGE__AFTER_S"] = "9.5";
  CHECK(loads(env));
}

TEST_CASE("HEDGE__AFTER_S < CALL_DEADLINE_S when both are set") {
  CHECK(load_error(two({{"LLM__HEDGE__AFTER_S", "5"},
                        {"LLM__CALL_DEADLINE_S", "5"}}))
        == "LLM__HEDGE__AFTER_S=5: must be < LLM__CALL_DEADLINE_S=5 (a hedge "
           "must start before the call deadline)");
  CHECK(loads(two({{"LLM__HEDGE__AFTER_S", "4.9"},
                   {"LLM__CALL_DEADLINE_S", "5"}})));
  // A deadline without hedging, or hedging without deadline, is fine.
  CHECK(loads(two({{"LLM__CALL_DEADLINE_S", "1"}})));
  CHECK(loads(two({{"LLM__HEDGE__AFTER_S", "100"}})));
}

TEST_CASE("HEDGE__MAX_EXTRA is an integer from 1 to 3") {
  CHECK(load_error(two({{"LLM__HEDGE__MAX_EXTRA", "0"}}))
        == "LLM__HEDGE__MAX_EXTRA=0: must be an integer in [1, 3] (extra "
           "hedge legs per round)");
  CHECK(contains(load_error(two({{"LLM__HEDGE__MAX_EXTRA", "4"}})),
                 "LLM__HEDGE__MAX_EXTRA=4: must be an integer in [1, 3]"));
  CHECK(loads(two({{"LLM__HEDGE__MAX_EXTRA", "1"}})));
  CHECK(loads(two({{"LLM__HEDGE__MAX_EXTRA", "3"}})));
}

TEST_CASE("HEDGE__MAX_EXTRA above the scope's sources - 1 is a warning") {
  auto w = warnings_of(two({{"LLM__HEDGE__AFTER_S", "1"},
                            {"LLM__HEDGE__MAX_EXTRA", "3"}}));
  CHECK(w
        == std::vector<std::string>{
          "LLM__HEDGE__MAX_EXTRA=3 but scope LLM has 2 sources: at most 1 "
          "extra leg can ever start"});
  CHECK(warnings_of(two({{"LLM__HEDGE__AFTER_S", "1"},
                         {"LLM__HEDGE__MAX_EXTRA", "1"}}))
          .empty());
  // Without hedging nothing starts anyway.
  CHECK(warnings_of(two({{"LLM__HEDGE__MAX_EXTRA", "3"}})).empty());
}

TEST_CASE("BREAKER__THRESHOLD >= 1") {
  CHECK(load_error(base({{"LLM__BREAKER__THRESHOLD", "0"}}))
        == "LLM__BREAKER__THRESHOLD=0: must be an integer >= 1 (consecutive "
           "failures that open the breaker)");
  CHECK(loads(base({{"LLM__BREAKER__THRESHOLD", "1"}})));
}

TEST_CASE("BREAKER__COOLDOWN_S > 0") {
  CHECK(load_error(base({{"LLM__BREAKER__COOLDOWN_S", "0"}}))
        == "LLM__BREAKER__COOLDOWN_S=0: must be a finite number > 0 (base "
           "open time of the breaker)");
  CHECK(loads(base({{"LLM__BREAKER__COOLDOWN_S", "0.1"}})));
}

TEST_CASE("BREAKER__MIN_CALLS >= 1") {
  CHECK(load_error(base({{"LLM__BREAKER__MIN_CALLS", "0"}}))
        == "LLM__BREAKER__MIN_CALLS=0: must be an integer >= 1 (attempts in "
           "the window before the failure rate counts)");
  CHECK(loads(base({{"LLM__BREAKER__MIN_CALLS", "1"}})));
}

TEST_CASE("BREAKER__FAIL_RATE is above 0 and at most 1") {
  CHECK(load_error(base({{"LLM__BREAKER__FAIL_RATE", "0"}}))
        == "LLM__BREAKER__FAIL_RATE=0: must be in (0, 1] (failure rate in "
           "the window that opens the breaker)");
  CHECK(contains(load_error(base({{"LLM__BREAKER__FAIL_RATE", "1.01"}})),
                 "LLM__BREAKER__FAIL_RATE=1.01: must be in (0, 1]"));
  CHECK(loads(base({{"LLM__BREAKER__FAIL_RATE", "1"}})));
  CHECK(loads(base({{"LLM__BREAKER__FAIL_RATE", "0.001"}})));
}

TEST_CASE("BREAKER__WINDOW_S > 0") {
  CHECK(load_error(base({{"LLM__BREAKER__WINDOW_S", "-60"}}))
        == "LLM__BREAKER__WINDOW_S=-60: must be a finite number > 0 (window "
           "of the failure-rate channel)");
  CHECK(loads(base({{"LLM__BREAKER__WINDOW_S", "1"}})));
}

TEST_CASE("BREAKER__MAX_COOLDOWN_S >= BREAKER__COOLDOWN_S") {
  CHECK(load_error(base({{"LLM__BREAKER__COOLDOWN_S", "30"},
                         {"LLM__BREAKER__MAX_COOLDOWN_S", "29"}}))
        == "LLM__BREAKER__MAX_COOLDOWN_S=29: must be >= "
           "LLM__BREAKER__COOLDOWN_S=30 (cap of the breaker's open time)");
  CHECK(loads(base({{"LLM__BREAKER__COOLDOWN_S", "30"},
                    {"LLM__BREAKER__MAX_COOLDOWN_S", "30"}})));
}

TEST_CASE("ON_QUOTA_FULL and ON_CIRCUIT_OPEN are wait or fail") {
  CHECK(load_error(base({{"LLM__ON_QUOTA_FULL", "retry"}}))
        == "LLM__ON_QUOTA_FULL=retry: must be one of wait, fail (when every "
           "source is out of quota)");
  CHECK(load_error(base({{"LLM__ON_CIRCUIT_OPEN", "Wait"}}))
        == "LLM__ON_CIRCUIT_OPEN=Wait: must be one of wait, fail (when every "
           "source's circuit is open)");
  CHECK(loads(base({{"LLM__ON_QUOTA_FULL", "fail"},
                    {"LLM__ON_CIRCUIT_OPEN", "wait"}})));
}

TEST_CASE("STRUCTURED__MAX_REASKS >= 0") {
  CHECK(load_error(base({{"LLM__STRUCTURED__MAX_REASKS", "-1"}}))
        == "LLM__STRUCTURED__MAX_REASKS=-1: must be an integer >= 0 "
           "(structured-output re-asks)");
  CHECK(loads(base({{"LLM__STRUCTURED__MAX_REASKS", "0"}})));
}

TEST_CASE("CACHE__TTL_S > 0, CACHE__MAX_ENTRIES >= 1, CACHE__MAX_BYTES >= 1024") {
  CHECK(load_error(base({{"LLM__CACHE__TTL_S", "0"}}))
        == "LLM__CACHE__TTL_S=0: must be a finite number > 0 "
           "(cache entry lifetime)");
  CHECK(load_error(base({{"LLM__CACHE__MAX_ENTRIES", "0"}}))
        == "LLM__CACHE__MAX_ENTRIES=0: must be an integer >= 1 "
           "(memory cache entries kept per scope)");
  CHECK(load_error(base({{"LLM__CACHE__MAX_BYTES", "100"}}))
        == "LLM__CACHE__MAX_BYTES=100: must be an integer >= 1024 "
           "(memory cache bytes kept per scope)");
  auto s = load_settings(base({{"LLM__CACHE__TTL_S", "60"},
                               {"LLM__CACHE__MAX_ENTRIES", "5"},
                               {"LLM__CACHE__MAX_BYTES", "4096"}}));
  REQUIRE(s);
  auto& c = s->scopes.at("LLM").cache;
  CHECK(c.ttl_s == 60.0);
  CHECK(c.max_entries == 5);
  CHECK(c.max_bytes == 4096);
}

// -- global keys -------------------------------------------------------------------

TEST_CASE("governance backends are memory or redis") {
  CHECK(load_error(base({{"PGW_LIMITER_BACKEND", "etcd"}}))
        == "PGW_LIMITER_BACKEND=etcd: must be one of memory, redis (limiter "
           "state backend)");
  CHECK(load_error(base({{"PGW_BREAKER_BACKEND", "disk"}}))
        == "PGW_BREAKER_BACKEND=disk: must be one of memory, redis (breaker "
           "state backend)");
  CHECK(loads(base({{"PGW_LIMITER_BACKEND", "memory"},
                    {"PGW_BREAKER_BACKEND", "memory"}})));
  CHECK(loads(base({{"PGW_LIMITER_BACKEND", "redis"},
                    {"PGW_BREAKER_BACKEND", "redis"}})));
}

TEST_CASE("PGW_LOG names a level, PGW_SCHEDULER_THREADS is 1..256") {
  CHECK(loads(base({{"PGW_LOG", "off"}, {"PGW_SCHEDULER_THREADS", "2"}})));
  CHECK(load_error(base({{"PGW_LOG", "Debug"}}))
        == "PGW_LOG=Debug: must be one of debug, info, warn, error, off");
  CHECK(load_error(base({{"PGW_SCHEDULER_THREADS", "0"}}))
        == "PGW_SCHEDULER_THREADS=0: must be an integer from 1 to 256");
  CHECK(load_error(base({{"PGW_SCHEDULER_THREADS", "2x"}}))
        == "PGW_SCHEDULER_THREADS=2x: must be an integer from 1 to 256");
}

TEST_CASE("PGW_TRANSPORT is beast or httplib, PGW_TRANSPORT_THREADS 0..1024") {
  CHECK(load_error(base({{"PGW_TRANSPORT", "curl"}}))
        == "PGW_TRANSPORT=curl: must be one of beast, httplib (upstream HTTP "
           "client: beast is event-driven, httplib uses a thread per call)");
  CHECK(load_error(base({{"PGW_TRANSPORT_THREADS", "-1"}}))
        == "PGW_TRANSPORT_THREADS=-1: must be an integer >= 0 (beast "
           "transport loop threads, 0 = one per core)");
  CHECK(load_error(base({{"PGW_TRANSPORT_THREADS", "5000"}}))
        == "PGW_TRANSPORT_THREADS=5000: must be at most 1024 (beast "
           "transport loop threads, 0 = one per core)");
  auto s = load_settings(base({{"PGW_TRANSPORT", "httplib"},
                               {"PGW_TRANSPORT_THREADS", "3"}}));
  REQUIRE(s);
  CHECK(s->global.transport == transport_kind::httplib);
  CHECK(s->global.transport_threads == 3);
  auto d = load_settings(base({}));
  REQUIRE(d);
  CHECK(d->global.transport == transport_kind::beast);
  CHECK(d->global.transport_threads == 0);
  // Threads only matter to beast.
  auto w = warnings_of(base({{"PGW_TRANSPORT", "httplib"},
                             {"PGW_TRANSPORT_THREADS", "3"}}));
  REQUIRE(w.size() == 1);
  CHECK(contains(w[0], "PGW_TRANSPORT_THREADS"));
  CHECK(contains(w[0], "PGW_TRANSPORT is httplib"));
  CHECK(warnings_of(base({{"PGW_TRANSPORT_THREADS", "3"}})).empty());
}

TEST_CASE("REDIS_URL warns as ineffective only while no backend is redis") {
  auto w = warnings_of(base({{"REDIS_URL", "redis://h:6380/1"}}));
  CHECK(w.size() == 1);
  CHECK(contains(w[0], "REDIS_URL is accepted but has no effect yet"));
  CHECK(warnings_of(base({{"REDIS_URL", "redis://h:6380/1"},
                          {"PGW_LIMITER_BACKEND", "redis"}}))
          .empty());
}

TEST_CASE("PGW_CACHE_BACKEND: none, memory or redis") {
  CHECK(load_error(base({{"PGW_CACHE_BACKEND", "lru"}}))
        == "PGW_CACHE_BACKEND=lru: must be one of none, memory, redis "
           "(response cache)");
  for (auto backend : {"none", "memory", "redis"}) {
    CAPTURE(backend);
    CHECK(loads(base({{"PGW_CACHE_BACKEND", backend}})));
  }
}

TEST_CASE("PGW_CACHE_TTL_S > 0") {
  CHECK(load_error(base({{"PGW_CACHE_TTL_S", "0"}}))
        == "PGW_CACHE_TTL_S=0: must be a finite number > 0 (cache entry "
           "lifetime)");
  CHECK(loads(base({{"PGW_CACHE_TTL_S", "0.5"}})));
}

TEST_CASE("REDIS_URL is redis://, optional [user]:password@, host:port, optional /db") {
  for (auto good : {"redis://127.0.0.1:6379/0", "redis://h:6379",
                    "redis://:pw@redis.internal:6380/15", "redis://[::1]:1/2",
                    "redis://default:pw@h:6379", "redis://:p%2Fw@h:6379/1"}) {
    CAPTURE(good);
    CHECK(loads(base({{"REDIS_URL", good}})));
  }
  CHECK(load_error(base({{"REDIS_URL", "http://h:6379"}}))
        == "REDIS_URL=http://h:6379: must start with redis:// (expected "
           "redis://[[user]:password@]host:port[/db])");
  CHECK(contains(load_error(base({{"REDIS_URL", "redis://h"}})),
                 "REDIS_URL=redis://h: has no port"));
  CHECK(contains(load_error(base({{"REDIS_URL", "redis://h:0"}})),
                 "has an invalid port"));
  CHECK(contains(load_error(base({{"REDIS_URL", "redis://:6379"}})),
                 "has no host"));
  CHECK(contains(load_error(base({{"REDIS_URL", "redis://h:6379/x"}})),
                 "REDIS_URL=redis://h:6379/x: has an invalid database number"));
  CHECK(contains(load_error(base({{"REDIS_URL", "redis://h:6379/-1"}})),
                 "has an invalid database number"));
  CHECK(contains(load_error(base({{"REDIS_URL", "redis://h:6379/"}})),
                 "has an invalid database number"));
  auto user = load_error(base({{"REDIS_URL", "redis://u-SECRET@h:6379"}}));
  CHECK(user
        == "REDIS_URL=redis://***@h:6379: credentials must be :password@ or "
           "user:password@ (expected redis://[[user]:password@]host:port[/db])");
  auto slash = load_error(base({{"REDIS_URL", "redis://:a/b-SECRET@h:6379"}}));
  CHECK(contains(slash, "must be percent-encoded (%2F, %3F, %23)"));
  CHECK_FALSE(contains(slash, "SECRET"));
}

TEST_CASE("a REDIS_URL error never shows the password") {
  auto msg = load_error(base({{"REDIS_URL", "redis://:pw-SECRET@h:bad/0"}}));
  CHECK(contains(msg, "REDIS_URL=redis://***@h:bad/0: has an invalid port"));
  CHECK_FALSE(contains(msg, "pw-SECRET"));
}

// -- settings built in code --------------------------------------------------------

TEST_CASE("validate: a scope needs at least one source") {
  settings s;
  s.scopes["LLM"].name = "LLM";
  auto err = validate(s);
  REQUIRE(err);
  CHECK(contains(message_of(err), "scope LLM: no sources"));
}

TEST_CASE("validate: rules hold for settings built in code") {
  settings s;
  auto& sc = s.scopes["LLM"];
  sc.name = "LLM";
  source_config src;
  src.scope = "LLM";
  src.provider = "openai";
  src.name = "a";
  src.base_url = "http://h";
  src.model = "m";
  sc.sources.push_back(src);
  CHECK_FALSE(validate(s));
  sc.sources[0].timeout_s = std::numeric_limits<double>::quiet_NaN();
  CHECK(message_of(validate(s))
        == "LLM__OPENAI__A__TIMEOUT_S=nan: must be a finite number > 0 "
           "(total time for one attempt)");
  sc.sources[0].timeout_s = 120;
  sc.sources[0].overlay = "[]";
  CHECK(contains(message_of(validate(s)),
                 "LLM__OPENAI__A__OVERLAY=*** (2 bytes): not a JSON object"));
  // Never the value (it may hold a credential), but where it went wrong.
  sc.sources[0].overlay = R"({"api_key": "SECRETxyz": 1})";
  auto bad = message_of(validate(s));
  CHECK_FALSE(contains(bad, "SECRETxyz"));
  CHECK(contains(bad, "LLM__OPENAI__A__OVERLAY=*** (27 bytes): not valid "
                      "JSON at byte offset 23"));
  sc.sources[0].overlay = "{}";
  sc.sources.push_back(src); // same name again
  CHECK(contains(message_of(validate(s)), "source name a is used twice"));
}

TEST_CASE("validate does not repeat warnings when run twice") {
  auto s = load_settings(two({{"LLM__FOO", "2"}})); // unknown key: a warning
  REQUIRE(s);
  auto count = s->warnings.size();
  CHECK(count > 0);
  CHECK_FALSE(validate(*s));
  CHECK(s->warnings.size() == count);
}

// -- warnings --------------------------------------------------------------------------

TEST_CASE("HEDGE__AFTER_S >= a source's TTFT_TIMEOUT_S is a warning") {
  auto w = warnings_of(two({{"LLM__HEDGE__AFTER_S", "5"},
                            {"LLM__OPENAI__A__TTFT_TIMEOUT_S", "5"},
                            {"LLM__GENERIC__B__TTFT_TIMEOUT_S", "5.5"}}));
  CHECK(has(w, "LLM__HEDGE__AFTER_S=5 >= LLM__OPENAI__A__TTFT_TIMEOUT_S=5: "
               "streaming hedges can never fire on source a (its TTFT "
               "timeout ends the attempt first)"));
  CHECK(std::none_of(w.begin(), w.end(), [](auto& x) {
    return contains(x, "LLM__GENERIC__B__TTFT_TIMEOUT_S");
  }));
}

TEST_CASE("hedging in a one-source scope is a warning") {
  auto w = warnings_of(base({{"LLM__HEDGE__AFTER_S", "5"}}));
  CHECK(has(w, "LLM__HEDGE__AFTER_S is set but scope LLM has only one "
               "source: a hedge needs another source and never fires"));
  auto w2 = warnings_of(two({{"LLM__HEDGE__AFTER_S", "5"}}));
  CHECK(std::none_of(w2.begin(), w2.end(), [](auto& x) {
    return contains(x, "only one source");
  }));
}

TEST_CASE("HEDGE__MAX_EXTRA up to 3 is used as given, without a warning") {
  auto w = warnings_of(two({{"LLM__HEDGE__MAX_EXTRA", "3"}}));
  CHECK(std::none_of(w.begin(), w.end(), [](auto& x) {
    return contains(x, "MAX_EXTRA");
  }));
}

TEST_CASE("keys without effect yet are accepted with one warning each") {
  auto w = warnings_of(two({
    {"LLM__OPENAI__A__RPM", "60"},
    {"LLM__OPENAI__A__TPM", "1000"},
    {"LLM__OPENAI__A__MAX_CONCURRENCY", "2"},
    {"LLM__OPENAI__A__EST_TOKENS", "10"},
    {"LLM__HEDGE__AFTER_S", "1"},
    {"LLM__HEDGE__MAX_EXTRA", "2"},
    {"LLM__BREAKER__THRESHOLD", "3"},
    {"LLM__BREAKER__COOLDOWN_S", "10"},
    {"LLM__BREAKER__MIN_CALLS", "4"},
    {"LLM__BREAKER__FAIL_RATE", "0.5"},
    {"LLM__BREAKER__WINDOW_S", "30"},
    {"LLM__BREAKER__MAX_COOLDOWN_S", "100"},
    {"LLM__ON_QUOTA_FULL", "fail"},
    {"LLM__ON_CIRCUIT_OPEN", "wait"},
    {"LLM__STRUCTURED__MAX_REASKS", "1"},
    {"LLM__CACHE__ENABLED", "true"},
    {"LLM__CACHE__FLEET_SINGLE_FLIGHT", "true"},
    {"LLM__CACHE__STORE_LENGTH", "true"},
    {"LLM__CACHE__TTL_S", "60"},
    {"LLM__CACHE__MAX_ENTRIES", "5"},
    {"LLM__CACHE__MAX_BYTES", "4096"},
    {"PGW_PRICING_PATH", "/etc/prices.json"},
    {"PGW_TELEMETRY_DB", "off"},
    {"PGW_CACHE_TTL_S", "60"},
    {"PGW_CACHE_NAMESPACE", "ns"},
    {"REDIS_URL", "redis://:pw-SECRET@h:6379/1"},
  }));
  auto expect = [&](const std::string& key, const std::string& feature) {
    CAPTURE(key);
    CHECK(has(w, key + " is accepted but has no effect yet (" + feature
                   + ")"));
  };
  // Structured output, embeddings and OCR are built: no warning for them.
  for (auto& x : w) {
    CHECK_FALSE(contains(x, "STRUCTURED__MAX_REASKS"));
    CHECK_FALSE(contains(x, "KIND"));
  }
  expect("PGW_CACHE_TTL_S", "PGW_CACHE_BACKEND is none");
  expect("LLM__CACHE__ENABLED", "PGW_CACHE_BACKEND is none");
  expect("LLM__CACHE__FLEET_SINGLE_FLIGHT",
         "PGW_CACHE_BACKEND is not redis: single-flight is per process");
  expect("LLM__CACHE__STORE_LENGTH", "PGW_CACHE_BACKEND is none");
  expect("LLM__CACHE__TTL_S", "PGW_CACHE_BACKEND is none");
  expect("LLM__CACHE__MAX_ENTRIES", "PGW_CACHE_BACKEND is not memory");
  expect("LLM__CACHE__MAX_BYTES", "PGW_CACHE_BACKEND is not memory");
  expect("PGW_CACHE_NAMESPACE", "no Redis cache, limiter or breaker uses it");
  expect("REDIS_URL", "none of PGW_LIMITER_BACKEND, PGW_BREAKER_BACKEND, "
                      "PGW_CACHE_BACKEND is redis");
  // Limiter and breaker keys are in effect now: no warning for them.
  for (auto& x : w) {
    CHECK_FALSE(contains(x, "RPM"));
    CHECK_FALSE(contains(x, "BREAKER__"));
    CHECK_FALSE(contains(x, "ON_QUOTA_FULL"));
    CHECK_FALSE(contains(x, "ON_CIRCUIT_OPEN"));
    CHECK_FALSE(contains(x, "HEDGE__AFTER_S is accepted"));
  }
  // Exactly one warning per key. MAX_EXTRA is in effect: its only warning
  // is that two sources leave room for one extra leg.
  CHECK(has(w, "LLM__HEDGE__MAX_EXTRA=2 but scope LLM has 2 sources: at most "
               "1 extra leg can ever start"));
  CHECK(w.size() == 10);
  for (auto& x : w)
    CHECK_FALSE(contains(x, "pw-SECRET"));
}

TEST_CASE("cache: FLEET_SINGLE_FLIGHT and STORE_LENGTH take effect with a "
          "Redis cache") {
  CHECK(warnings_of(two({{"PGW_CACHE_BACKEND", "redis"},
                         {"REDIS_URL", "redis://127.0.0.1:6379"},
                         {"LLM__CACHE__ENABLED", "true"},
                         {"LLM__CACHE__FLEET_SINGLE_FLIGHT", "true"},
                         {"LLM__CACHE__STORE_LENGTH", "true"}}))
          .empty());
  CHECK(has(warnings_of(two({{"PGW_CACHE_BACKEND", "memory"},
                             {"LLM__CACHE__ENABLED", "true"},
                             {"LLM__CACHE__FLEET_SINGLE_FLIGHT", "true"}})),
            "LLM__CACHE__FLEET_SINGLE_FLIGHT is accepted but has no effect "
            "yet (PGW_CACHE_BACKEND is not redis: single-flight is per "
            "process)"));
}

TEST_CASE("EST_TOKENS may not exceed TPM") {
  auto err = load_error(two({{"LLM__OPENAI__A__TPM", "500"},
                             {"LLM__OPENAI__A__EST_TOKENS", "501"}}));
  CHECK(contains(err, "LLM__OPENAI__A__EST_TOKENS=501: must be <= "
                      "LLM__OPENAI__A__TPM=500"));
  CHECK(warnings_of(two({{"LLM__OPENAI__A__TPM", "500"},
                         {"LLM__OPENAI__A__EST_TOKENS", "500"}}))
          .empty());
}

TEST_CASE("keys left at their defaults produce no warning") {
  CHECK(warnings_of(two()).empty());
  CHECK(warnings_of(two({{"LLM__OPENAI__A__KIND", "chat"},
                         {"LLM__SELECTOR", "round_robin"},
                         {"LLM__MAX_ATTEMPTS", "5"}}))
          .empty());
}
