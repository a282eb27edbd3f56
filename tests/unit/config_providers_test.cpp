// Provider profiles (config/providers.json).

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

using namespace pgw;

namespace {

std::string message_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : std::string{};
}

/// The error message of parsing `text`; empty when it parsed.
std::string parse_error(const std::string& text) {
  auto table = parse_providers(text);
  return table ? std::string{} : message_of(table.error());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string write_temp(const std::string& name, const std::string& content) {
  auto path = std::filesystem::temp_directory_path()
              / ("pgw-config-providers-" + std::to_string(::getpid()) + "-"
                 + name);
  std::ofstream out{path, std::ios::binary};
  out << content;
  return path.string();
}

} // namespace

TEST_CASE("the built-in table has openai and generic") {
  auto table = load_providers(env_map{});
  REQUIRE(table);
  REQUIRE(table->count("openai") == 1);
  REQUIRE(table->count("generic") == 1);
  auto& openai = table->at("openai");
  CHECK(openai.name == "openai");
  CHECK(openai.effort_field == "reasoning_effort");
  CHECK(openai.effort_values.at("low") == "\"low\"");
  CHECK(openai.effort_values.at("none") == "\"none\"");
  CHECK(openai.max_tokens_field == "max_completion_tokens");
  CHECK(openai.stream_usage);
  auto& generic = table->at("generic");
  CHECK(generic.max_tokens_field == "max_tokens");
  CHECK(generic.effort_values.count("none") == 0);
  CHECK(generic.effort_values.at("high") == "\"high\"");
}

TEST_CASE("the built-in table: non-string effort values and null effort") {
  auto table = load_providers(env_map{});
  REQUIRE(table);
  REQUIRE(table->count("qwen") == 1);
  auto& qwen = table->at("qwen");
  CHECK(qwen.effort_field == "enable_thinking");
  CHECK(qwen.effort_values.at("none") == "false");
  CHECK(qwen.effort_values.at("high") == "true");
  REQUIRE(table->count("deepseek") == 1);
  CHECK(table->at("deepseek").effort_field.empty());
  CHECK(table->at("deepseek").effort_values.empty());
  CHECK(table->at("openrouter").effort_field == "reasoning.effort");
}

TEST_CASE("providers: '_' keys are comments, names are lower-cased, "
          "omitted fields take defaults") {
  auto table = parse_providers(R"({
    "_comment": "ignored",
    "MyProv": {"_note": "also ignored", "stream_usage": false,
               "effort": {"field": "x.y", "values": {"low": {"a": [1, 2]}}}},
    "bare": {}
  })");
  REQUIRE(table);
  CHECK(table->size() == 2);
  REQUIRE(table->count("myprov") == 1);
  auto& p = table->at("myprov");
  CHECK(p.name == "myprov");
  CHECK_FALSE(p.stream_usage);
  CHECK(p.effort_field == "x.y");
  CHECK(p.effort_values.at("low") == R"({"a":[1,2]})");
  CHECK(p.max_tokens_field == "max_tokens");
  auto& bare = table->at("bare");
  CHECK(bare.effort_field.empty());
  CHECK(bare.stream_usage);
}

TEST_CASE("providers: malformed tables are errors naming provider and "
          "field") {
  CHECK(contains(parse_error("{"), "not valid JSON"));
  CHECK(contains(parse_error("[]"), "must be a JSON object"));
  CHECK(contains(parse_error(R"({"_c": 1})"), "defines no provider"));
  CHECK(contains(parse_error(R"({"p": 3})"), "provider p: must be an object"));
  CHECK(contains(parse_error(R"({"p": {"max_token_field": "x"}})"),
                 "provider p: unknown field \"max_token_field\""));
  CHECK(contains(parse_error(R"({"p": {"max_tokens_field": 1}})"),
                 "provider p field max_tokens_field"));
  CHECK(contains(parse_error(R"({"p": {"max_tokens_field": ""}})"),
                 "provider p field max_tokens_field"));
  CHECK(contains(parse_error(R"({"p": {"stream_usage": "yes"}})"),
                 "provider p field stream_usage"));
  CHECK(contains(parse_error(R"({"p": {"effort": "low"}})"),
                 "provider p field effort: must be null or an object"));
  CHECK(contains(parse_error(R"({"p": {"effort": {"values": {}}}})"),
                 "provider p field effort.field"));
  CHECK(contains(parse_error(R"({"p": {"effort": {"field": "a..b",
                                                   "values": {}}}})"),
                 "provider p field effort.field"));
  CHECK(contains(parse_error(R"({"p": {"effort": {"field": "f"}}})"),
                 "provider p field effort.values"));
  CHECK(contains(parse_error(R"({"p": {"effort": {"field": "f",
                                   "values": {"extreme": "x"}}}})"),
                 "unknown effort \"extreme\""));
  CHECK(contains(parse_error(R"({"p": {"effort": {"field": "f",
                                   "values": {"low": null}}}})"),
                 "provider p field effort.values.low"));
  CHECK(contains(parse_error(R"({"p": {"effort": {"field": "f",
                                   "values": {}, "extra": 1}}})"),
                 "unknown field \"extra\""));
}

TEST_CASE("providers: names must fit a key segment and not be reserved") {
  CHECK(contains(parse_error(R"({"a b": {}})"), "provider \"a b\""));
  CHECK(contains(parse_error(R"({"a__b": {}})"), "provider \"a__b\""));
  CHECK(contains(parse_error(R"({"hedge": {}})"),
                 "provider hedge: the name is a reserved"));
  CHECK(contains(parse_error(R"({"Breaker": {}})"), "reserved"));
  CHECK(contains(parse_error(R"({"x": {}, "X": {}})"),
                 "provider x: defined twice"));
}

TEST_CASE("load_providers reads PGW_PROVIDERS_PATH when set") {
  auto path = write_temp("ok.json", R"({"acme": {"max_tokens_field": "mt"}})");
  auto table = load_providers({{"PGW_PROVIDERS_PATH", path}});
  std::filesystem::remove(path);
  REQUIRE(table);
  CHECK(table->size() == 1);
  CHECK(table->at("acme").max_tokens_field == "mt");
}

TEST_CASE("load_providers: a missing, empty or broken file is an error") {
  auto missing = load_providers({{"PGW_PROVIDERS_PATH", "/nonexistent.json"}});
  REQUIRE_FALSE(missing);
  CHECK(contains(message_of(missing.error()),
                 "PGW_PROVIDERS_PATH=/nonexistent.json (providers JSON file): "
                 "cannot be read"));
  auto empty = load_providers({{"PGW_PROVIDERS_PATH", ""}});
  REQUIRE_FALSE(empty);
  CHECK(contains(message_of(empty.error()), "PGW_PROVIDERS_PATH=: must name"));
  auto path = write_temp("bad.json", R"({"p": {"stream_usage": 1}})");
  auto broken = load_providers({{"PGW_PROVIDERS_PATH", path}});
  std::filesystem::remove(path);
  REQUIRE_FALSE(broken);
  CHECK(contains(message_of(broken.error()), path));
  CHECK(contains(message_of(broken.error()), "provider p field stream_usage"));
}

TEST_CASE("load_settings resolves sources against PGW_PROVIDERS_PATH") {
  auto path = write_temp("custom.json", R"({"acme": {"stream_usage": false}})");
  env_map env{{"PGW_PROVIDERS_PATH", path},
              {"LLM__ACME__A__BASE_URL", "http://h"},
              {"LLM__ACME__A__MODEL", "m"}};
  auto s = load_settings(env);
  REQUIRE(s);
  auto src = s->find("LLM")->find("a");
  REQUIRE(src != nullptr);
  CHECK(src->provider == "acme");
  CHECK(src->profile.name == "acme");
  CHECK_FALSE(src->profile.stream_usage);
  env["LLM__OPENAI__B__MODEL"] = "m";
  env["LLM__OPENAI__B__BASE_URL"] = "http://h";
  auto unknown = load_settings(env);
  std::filesystem::remove(path);
  REQUIRE_FALSE(unknown);
  CHECK(contains(message_of(unknown.error()),
                 "LLM__OPENAI__B__BASE_URL: unknown provider OPENAI "
                 "(known providers: acme)"));
}
