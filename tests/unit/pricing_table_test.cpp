// The price table (config/pricing.hpp): lookup order, cost arithmetic, the
// JSON format's errors, and where the table is loaded from.

#include "config/pricing.hpp"
#include "messages/errors.hpp"

#include "fixtures/telemetry/fixture_db.hpp"

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
  auto table = price_table::parse(text);
  if (table)
    return {};
  CHECK(code_of(table.error()) == error_code::invalid_config);
  return message_of(table.error());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

constexpr const char* sample = R"({
  "_comment": "test prices",
  "read_on": "2026-01-01",
  "models": {
    "gpt-4o": {"input": 2.5, "output": 10},
    "gpt-4o-mini": {"input": 0.15, "output": 0.6, "_note": "ignored"},
    "local": {"input": 0, "output": 0}
  },
  "sources": {
    "LLM/cheap": {"input": 1, "output": 2}
  }
})";

/// Runs `f` with the working directory set to `dir`, then restores it.
template <class F>
void in_directory(const std::filesystem::path& dir, F f) {
  auto before = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  try {
    f();
  } catch (...) {
    std::filesystem::current_path(before);
    throw;
  }
  std::filesystem::current_path(before);
}

} // namespace

TEST_CASE("prices: exact model names") {
  auto table = price_table::parse(sample);
  REQUIRE(table);
  CHECK(table->read_on() == "2026-01-01");
  CHECK(table->size() == 4);
  auto p = table->find("LLM", "a", "gpt-4o");
  REQUIRE(p);
  CHECK(p->input_per_million == 2.5);
  CHECK(p->output_per_million == 10);
  auto mini = table->find("LLM", "a", "gpt-4o-mini");
  REQUIRE(mini);
  CHECK(mini->input_per_million == doctest::Approx(0.15));
  auto free = table->find("LLM", "a", "local");
  REQUIRE(free);
  CHECK(free->input_per_million == 0);
}

TEST_CASE("prices: the longest prefix wins for dated model names") {
  auto table = price_table::parse(sample);
  REQUIRE(table);
  auto mini = table->find("LLM", "a", "gpt-4o-mini-2024-07-18");
  REQUIRE(mini);
  CHECK(mini->output_per_million == doctest::Approx(0.6));
  auto big = table->find("LLM", "a", "gpt-4o-2024-08-06");
  REQUIRE(big);
  CHECK(big->output_per_million == 10);
  CHECK_FALSE(table->find("LLM", "a", "gpt-4"));
  CHECK_FALSE(table->find("LLM", "a", "claude-3"));
  CHECK_FALSE(table->find("LLM", "a", ""));
}

TEST_CASE("prices: a per-source override beats the model price") {
  auto table = price_table::parse(sample);
  REQUIRE(table);
  auto p = table->find("LLM", "cheap", "gpt-4o");
  REQUIRE(p);
  CHECK(p->input_per_million == 1);
  CHECK(p->output_per_million == 2);
  // Even for a model the table does not know.
  auto unknown = table->find("LLM", "cheap", "some-model");
  REQUIRE(unknown);
  CHECK(unknown->input_per_million == 1);
  // Scope upper case and source lower case, as the settings spell them.
  auto spelled = table->find("llm", "CHEAP", "gpt-4o");
  REQUIRE(spelled);
  CHECK(spelled->input_per_million == 1);
  // Another scope's source of the same name is not overridden.
  auto other = table->find("EMBED", "cheap", "gpt-4o");
  REQUIRE(other);
  CHECK(other->input_per_million == 2.5);
}

TEST_CASE("prices: cost is tokens times the price per million") {
  auto table = price_table::parse(sample);
  REQUIRE(table);
  auto cost = table->cost("LLM", "a", "gpt-4o", 1000, 500);
  REQUIRE(cost);
  CHECK(*cost == doctest::Approx(1000 * 2.5 / 1e6 + 500 * 10 / 1e6));
  CHECK(*cost == doctest::Approx(0.0075));
  auto override_cost = table->cost("LLM", "cheap", "gpt-4o", 2'000'000, 0);
  REQUIRE(override_cost);
  CHECK(*override_cost == doctest::Approx(2.0));
  auto zero = table->cost("LLM", "a", "gpt-4o", 0, 0);
  REQUIRE(zero);
  CHECK(*zero == 0);
  CHECK_FALSE(table->cost("LLM", "a", "unknown", 10, 10));
}

TEST_CASE("prices: an empty table and comments only") {
  auto empty = price_table::parse("{}");
  REQUIRE(empty);
  CHECK(empty->size() == 0);
  CHECK_FALSE(empty->find("LLM", "a", "gpt-4o"));
  auto comments = price_table::parse(R"({"_a": 1, "models": {"_b": 2}})");
  REQUIRE(comments);
  CHECK(comments->size() == 0);
}

TEST_CASE("prices: malformed tables name the JSON path") {
  CHECK(contains(parse_error("{"), "not valid JSON"));
  CHECK(contains(parse_error("[]"), "must be a JSON object"));
  CHECK(contains(parse_error(R"({"models": []})"), "models: must be an "
                                                   "object"));
  CHECK(contains(parse_error(R"({"models": {"m": 3}})"),
                 "models[\"m\"]: must be an object"));
  CHECK(contains(parse_error(R"({"models": {"m": {"input": "1", "output": 1}}})"),
                 "models[\"m\"].input: must be a number"));
  CHECK(contains(parse_error(R"({"models": {"m": {"input": 1}}})"),
                 "models[\"m\"].output: missing"));
  CHECK(contains(parse_error(R"({"models": {"m": {"output": 1}}})"),
                 "models[\"m\"].input: missing"));
  CHECK(contains(parse_error(R"({"models": {"gpt-4.1": {"input": 1, "output": 1, "cached": 0.5}}})"),
                 "models[\"gpt-4.1\"]: unknown field \"cached\""));
  CHECK(contains(parse_error(R"({"model": {}})"),
                 "model: unknown field"));
  CHECK(contains(parse_error(R"({"read_on": 2025})"),
                 "read_on: must be a string"));
  CHECK(contains(parse_error(R"({"models": {"": {"input": 1, "output": 1}}})"),
                 "must not be empty"));
  CHECK(contains(parse_error(R"({"sources": {"nokey": {"input": 1, "output": 1}}})"),
                 "sources[\"nokey\"]: a per-source key is \"SCOPE/name\""));
  CHECK(contains(parse_error(R"({"sources": {"LLM/": {"input": 1, "output": 1}}})"),
                 "sources[\"LLM/\"]"));
  CHECK(contains(parse_error(R"({"sources": {"A/b/c": {"input": 1, "output": 1}}})"),
                 "sources[\"A/b/c\"]"));
  CHECK(contains(parse_error(R"({"sources": {"LLM/a": {"input": 1, "output": 1}, "llm/A": {"input": 1, "output": 1}}})"),
                 "defined twice"));
  // Every message says it is about the price table.
  CHECK(contains(parse_error(R"({"models": 1})"), "price table (inline)"));
}

TEST_CASE("prices: negative and non-finite prices are rejected") {
  CHECK(contains(parse_error(R"({"models": {"m": {"input": -0.5, "output": 1}}})"),
                 "models[\"m\"].input: must be finite and >= 0"));
  CHECK(contains(parse_error(R"({"sources": {"LLM/a": {"input": 1, "output": -1}}})"),
                 "sources[\"LLM/a\"].output: must be finite and >= 0"));
  // JSON has no infinity literal; a number too large for a double is the
  // way one arrives (Boost.JSON reads it as inf).
  CHECK(contains(parse_error(R"({"models": {"m": {"input": 1e999, "output": 1}}})"),
                 "models[\"m\"].input: must be finite and >= 0, not inf"));
}

TEST_CASE("prices: the repository's config/prices.json parses") {
  auto path = std::string{PGW_SOURCE_DIR} + "/config/prices.json";
  auto table = price_table::load(path);
  REQUIRE(table);
  CHECK(table->size() > 0);
  CHECK_FALSE(table->read_on().empty());
  CHECK(table->find("LLM", "a", "gpt-4o-mini-2024-07-18"));
}

TEST_CASE("prices: the default path falls back to the compiled-in copy") {
  test::scratch_dir dir;
  in_directory(dir.path(), [] {
    REQUIRE_FALSE(std::filesystem::exists("config/prices.json"));
    auto table = price_table::load("config/prices.json");
    REQUIRE(table);
    auto from_source = price_table::load(std::string{PGW_SOURCE_DIR}
                                         + "/config/prices.json");
    REQUIRE(from_source);
    CHECK(table->size() == from_source->size());
    CHECK(table->read_on() == from_source->read_on());
  });
}

TEST_CASE("prices: the default path is read when the file exists") {
  test::scratch_dir dir;
  std::filesystem::create_directories(dir.path() / "config");
  {
    std::ofstream out{dir.path() / "config" / "prices.json"};
    out << R"({"read_on": "local copy", "models": {"m": {"input": 1, "output": 1}}})";
  }
  in_directory(dir.path(), [] {
    auto table = price_table::load("config/prices.json");
    REQUIRE(table);
    CHECK(table->read_on() == "local copy");
    CHECK(table->size() == 1);
  });
}

TEST_CASE("prices: an explicit missing path is an error naming it") {
  test::scratch_dir dir;
  auto path = dir.file("nope.json");
  auto table = price_table::load(path);
  REQUIRE_FALSE(table);
  CHECK(code_of(table.error()) == error_code::invalid_config);
  CHECK(contains(message_of(table.error()), path));
  // A directory is not a price table either.
  auto as_dir = price_table::load(dir.path().string());
  REQUIRE_FALSE(as_dir);
  CHECK(contains(message_of(as_dir.error()), dir.path().string()));
  // Nor is the empty path.
  CHECK_FALSE(price_table::load(""));
}

TEST_CASE("prices: a malformed file names the file and the JSON path") {
  test::scratch_dir dir;
  auto path = dir.file("prices.json");
  {
    std::ofstream out{path};
    out << R"({"models": {"m": {"input": -1, "output": 1}}})";
  }
  auto table = price_table::load(path);
  REQUIRE_FALSE(table);
  auto msg = message_of(table.error());
  CHECK(contains(msg, path));
  CHECK(contains(msg, "models[\"m\"].input"));
}
