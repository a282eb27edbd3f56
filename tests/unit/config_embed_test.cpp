// validate: the embedding keys (issue 16).

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace pgw;

namespace {

/// Embedding scope EMBED with sources a and b, plus `extra`.
env_map embed_env(env_map extra = {}) {
  env_map env{{"EMBED__OPENAI__A__BASE_URL", "https://api.example.com/v1"},
              {"EMBED__OPENAI__A__MODEL", "emb"},
              {"EMBED__OPENAI__A__KIND", "embedding"},
              {"EMBED__GENERIC__B__BASE_URL", "http://127.0.0.1:9000/v1"},
              {"EMBED__GENERIC__B__MODEL", "emb"},
              {"EMBED__GENERIC__B__KIND", "embedding"}};
  for (auto& [key, value] : extra)
    env[key] = value;
  return env;
}

std::string load_error(const env_map& env) {
  auto s = load_settings(env);
  if (s)
    return {};
  CHECK(code_of(s.error()) == error_code::invalid_config);
  auto detail = detail_of(s.error());
  return detail != nullptr ? detail->message : std::string{};
}

bool mentions(const std::vector<std::string>& list, const std::string& part) {
  return std::any_of(list.begin(), list.end(), [&](auto& x) {
    return x.find(part) != std::string::npos;
  });
}

} // namespace

TEST_CASE("embedding sources load with their batch limits, no warning") {
  auto s = load_settings(embed_env({{"EMBED__OPENAI__A__MAX_BATCH_INPUTS", "100"},
                                    {"EMBED__GENERIC__B__MAX_BATCH_TOKENS", "5000"},
                                    {"EMBED__BATCH_CONCURRENCY", "2"}}));
  REQUIRE(s);
  auto& sc = s->scopes.at("EMBED");
  CHECK(sc.batch_concurrency == 2);
  CHECK(sc.find("a")->max_batch_inputs == 100);
  CHECK(sc.find("a")->max_batch_tokens == 300000);
  CHECK(sc.find("b")->max_batch_inputs == 2048);
  CHECK(sc.find("b")->max_batch_tokens == 5000);
  CHECK(s->warnings.empty());
}

TEST_CASE("MAX_BATCH_INPUTS, MAX_BATCH_TOKENS, BATCH_CONCURRENCY are >= 1") {
  CHECK(load_error(embed_env({{"EMBED__OPENAI__A__MAX_BATCH_INPUTS", "0"}}))
        == "EMBED__OPENAI__A__MAX_BATCH_INPUTS=0: must be an integer >= 1 "
           "(embedding inputs per upstream request)");
  CHECK(load_error(embed_env({{"EMBED__GENERIC__B__MAX_BATCH_TOKENS", "-1"}}))
        == "EMBED__GENERIC__B__MAX_BATCH_TOKENS=-1: must be an integer >= 1 "
           "(estimated embedding tokens per upstream request)");
  CHECK(load_error(embed_env({{"EMBED__BATCH_CONCURRENCY", "0"}}))
        == "EMBED__BATCH_CONCURRENCY=0: must be an integer >= 1 (embedding "
           "sub-batches of one call in flight)");
}

TEST_CASE("a scope serves one kind, embedding models should agree") {
  auto err = load_error(embed_env({{"EMBED__GENERIC__B__KIND", "chat"}}));
  CHECK(err.find("EMBED__GENERIC__B__KIND=chat") != std::string::npos);
  CHECK(err.find("the sources of a scope serve the same kind of call")
        != std::string::npos);
  auto s = load_settings(embed_env({{"EMBED__GENERIC__B__MODEL", "other"}}));
  REQUIRE(s);
  CHECK(mentions(s->warnings, "embedding sources name different models"));
}

TEST_CASE("ocr_monkey sources default to MAX_CONCURRENCY=1, MAX_IMAGE_BYTES") {
  env_map env{{"OCR__GENERIC__M__BASE_URL", "http://127.0.0.1:9000"},
              {"OCR__GENERIC__M__MODEL", "monkey"},
              {"OCR__GENERIC__M__KIND", "ocr_monkey"},
              {"OCR__GENERIC__N__BASE_URL", "http://127.0.0.1:9001"},
              {"OCR__GENERIC__N__MODEL", "monkey"},
              {"OCR__GENERIC__N__KIND", "ocr_monkey"},
              {"OCR__GENERIC__N__MAX_CONCURRENCY", "3"},
              {"OCR__GENERIC__N__MAX_IMAGE_BYTES", "1000"}};
  auto s = load_settings(env);
  REQUIRE(s);
  auto& sc = s->scopes.at("OCR");
  CHECK(sc.find("m")->max_concurrency == 1);
  CHECK(sc.find("n")->max_concurrency == 3);
  CHECK(sc.find("m")->max_image_bytes == 20 * 1024 * 1024);
  CHECK(sc.find("n")->max_image_bytes == 1000);
  CHECK(s->warnings.empty());
  env["OCR__GENERIC__N__MAX_IMAGE_BYTES"] = "0";
  CHECK(load_error(env)
        == "OCR__GENERIC__N__MAX_IMAGE_BYTES=0: must be an integer >= 1 "
           "(largest OCR image, bytes)");
}
