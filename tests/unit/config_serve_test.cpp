// The PGW_SERVE_* keys of `pgw-actor serve`: parsed, defaulted, validated.

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace pgw;

namespace {

env_map with(env_map extra) {
  env_map env{{"LLM__OPENAI__A__BASE_URL", "https://api.example.com/v1"},
              {"LLM__OPENAI__A__MODEL", "gpt-test"}};
  for (auto& [key, value] : extra)
    env[key] = value;
  return env;
}

std::string load_error(const env_map& env) {
  auto s = load_settings(env);
  if (s)
    return {};
  CHECK(code_of(s.error()) == error_code::invalid_config);
  auto d = detail_of(s.error());
  return d ? d->message : std::string{};
}

} // namespace

TEST_CASE("serve keys: defaults and values") {
  auto s = load_settings(with({}));
  REQUIRE(s);
  CHECK(s->global.serve.keys_file.empty());
  CHECK(s->global.serve.max_body_bytes == 8 * 1024 * 1024);
  CHECK(s->global.serve.drain_s == 30);
  s = load_settings(with({{"PGW_SERVE_KEYS_FILE", "/etc/pgw/keys"},
                          {"PGW_SERVE_MAX_BODY_BYTES", "1024"},
                          {"PGW_SERVE_MAX_INFLIGHT", "1"},
                          {"PGW_SERVE_DRAIN_S", "0"},
                          {"PGW_SERVE_READ_TIMEOUT_S", "0.5"},
                          {"PGW_SERVE_WRITE_TIMEOUT_S", "2"}}));
  REQUIRE(s);
  CHECK(s->global.serve.keys_file == "/etc/pgw/keys");
  CHECK(s->global.serve.max_body_bytes == 1024);
  CHECK(s->global.serve.max_inflight == 1);
  CHECK(s->global.serve.drain_s == 0);
  CHECK(s->global.serve.read_timeout_s == 0.5);
  CHECK(s->global.serve.write_timeout_s == 2);
  CHECK(s->warnings.empty());
}

TEST_CASE("serve keys: each bad value names its key") {
  CHECK(load_error(with({{"PGW_SERVE_MAX_BODY_BYTES", "1023"}}))
          .find("PGW_SERVE_MAX_BODY_BYTES=1023: must be an integer >= 1024")
        != std::string::npos);
  CHECK(load_error(with({{"PGW_SERVE_MAX_INFLIGHT", "0"}}))
          .find("PGW_SERVE_MAX_INFLIGHT=0") != std::string::npos);
  CHECK(load_error(with({{"PGW_SERVE_DRAIN_S", "-1"}}))
          .find("PGW_SERVE_DRAIN_S") != std::string::npos);
  CHECK(load_error(with({{"PGW_SERVE_READ_TIMEOUT_S", "0"}}))
          .find("PGW_SERVE_READ_TIMEOUT_S") != std::string::npos);
  CHECK(load_error(with({{"PGW_SERVE_WRITE_TIMEOUT_S", "nan"}}))
          .find("PGW_SERVE_WRITE_TIMEOUT_S") != std::string::npos);
  CHECK(load_error(with({{"PGW_SERVE_MAX_INFLIGHT", "many"}}))
          .find("PGW_SERVE_MAX_INFLIGHT") != std::string::npos);
}
