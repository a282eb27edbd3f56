// Scope-level defaults for per-source fields (issue 12, item 3), the
// warnings for timeouts that can never fire, and CA_FILE.

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace pgw;

namespace {

/// Sources `a` and `b` in scope LLM, plus `extra`.
env_map two_sources(env_map extra = {}) {
  env_map env{{"LLM__OPENAI__A__BASE_URL", "https://a.example.com/v1"},
              {"LLM__OPENAI__A__MODEL", "m"},
              {"LLM__GENERIC__B__BASE_URL", "https://b.example.com/v1"},
              {"LLM__GENERIC__B__MODEL", "m"}};
  for (auto& [key, value] : extra)
    env[key] = value;
  return env;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool warned(const settings& s, const std::string& part) {
  for (auto& w : s.warnings)
    if (contains(w, part))
      return true;
  return false;
}

} // namespace

TEST_CASE("a scope-level value is every source's default, a source's own key wins") {
  auto s = load_settings(two_sources({{"LLM__TIMEOUT_S", "30"},
                                      {"LLM__TTFT_TIMEOUT_S", "5"},
                                      {"LLM__STREAM_IDLE_TIMEOUT_S", "10"},
                                      {"LLM__CONNECT_TIMEOUT_S", "3"},
                                      {"LLM__RPM", "60"},
                                      {"LLM__OVERLAY", R"({"temperature":0.2})"},
                                      {"LLM__GENERIC__B__TIMEOUT_S", "60"}}));
  REQUIRE(s);
  auto& sc = s->scopes.at("LLM");
  auto& a = *sc.find("a");
  auto& b = *sc.find("b");
  CHECK(a.timeout_s == 30);
  CHECK(b.timeout_s == 60);
  CHECK(*a.ttft_timeout_s == 5);
  CHECK(*b.ttft_timeout_s == 5);
  CHECK(a.stream_idle_timeout_s == 10);
  CHECK(b.connect_timeout_s == 3);
  CHECK(*b.rpm == 60);
  CHECK(b.overlay == R"({"temperature":0.2})");
  CHECK(a.origin.at("TIMEOUT_S") == "scope");
  CHECK(b.origin.at("TIMEOUT_S") == "source");
  CHECK(a.origin.count("EST_TOKENS") == 0); // built-in default
  // No "unknown key" warning for them any more.
  CHECK_FALSE(warned(*s, "unknown key LLM__TIMEOUT_S"));
  CHECK_FALSE(warned(*s, "unknown key"));
}

TEST_CASE("identity fields cannot be scope-level defaults") {
  for (auto field : {"BASE_URL", "MODEL", "API_KEY", "PRIORITY", "KIND"}) {
    CAPTURE(field);
    auto s = load_settings(two_sources({{std::string("LLM__") + field, "x"}}));
    REQUIRE(s);
    CHECK(warned(*s, std::string("unknown key LLM__") + field + " ignored"));
  }
}

TEST_CASE("a bad scope-level value names the scope key") {
  auto s = load_settings(two_sources({{"LLM__TIMEOUT_S", "-1"}}));
  REQUIRE_FALSE(s);
  auto d = detail_of(s.error());
  REQUIRE(d != nullptr);
  CHECK(contains(d->message, "LLM__TIMEOUT_S=-1"));
}

TEST_CASE("config show says where each value came from") {
  auto s = load_settings(two_sources({{"LLM__TIMEOUT_S", "30"},
                                      {"LLM__GENERIC__B__TIMEOUT_S", "60"}}));
  REQUIRE(s);
  auto text = show_settings(*s);
  CHECK(contains(text, "\n# from the scope: LLM__TIMEOUT_S\n# built-in "
                       "defaults: RPM, TPM, MAX_CONCURRENCY, EST_TOKENS, "
                       "CONNECT_TIMEOUT_S, TTFT_TIMEOUT_S, "
                       "STREAM_IDLE_TIMEOUT_S, PRIORITY, OVERLAY, HEADERS, "
                       "KIND, CA_FILE, MAX_RESPONSE_BYTES, MAX_BATCH_INPUTS, "
                       "MAX_BATCH_TOKENS, MAX_IMAGE_BYTES, OCR_PROMPT_TEXT, "
                       "OCR_PROMPT_LAYOUT\nLLM__OPENAI__A__BASE_URL="));
  CHECK(contains(text, "\nLLM__OPENAI__A__TIMEOUT_S=30\n"));
  CHECK(contains(text, "\nLLM__GENERIC__B__TIMEOUT_S=60\n"));
  auto json = show_settings_json(*s);
  CHECK(contains(json, R"("timeout_s":"scope")"));
  CHECK(contains(json, R"("est_tokens":"default")"));
  CHECK(contains(json, R"("model":"source")"));
}

TEST_CASE("timeouts that can never fire are warned about") {
  auto s = load_settings(two_sources({{"LLM__TIMEOUT_S", "10"},
                                      {"LLM__OPENAI__A__TTFT_TIMEOUT_S", "10"},
                                      {"LLM__STREAM_IDLE_TIMEOUT_S", "20"}}));
  REQUIRE(s);
  CHECK(warned(*s, "LLM__OPENAI__A__TTFT_TIMEOUT_S=10 >= LLM__TIMEOUT_S=10"));
  CHECK(warned(*s, "LLM__STREAM_IDLE_TIMEOUT_S=20 >= LLM__TIMEOUT_S=10"));
  auto fine = load_settings(two_sources());
  REQUIRE(fine);
  CHECK_FALSE(warned(*fine, "can never fire"));
}

TEST_CASE("CA_FILE must be a readable PEM file") {
  auto dir = "/tmp/pgw-ca-" + std::to_string(::getpid());
  auto pem = dir + ".pem";
  auto junk = dir + ".txt";
  std::ofstream{pem} << "-----BEGIN CERTIFICATE-----\nMIIB\n"
                        "-----END CERTIFICATE-----\n";
  std::ofstream{junk} << "not a certificate\n";
  auto ok = load_settings(two_sources({{"LLM__OPENAI__A__CA_FILE", pem}}));
  REQUIRE(ok);
  CHECK(ok->scopes.at("LLM").find("a")->ca_file == pem);
  auto msg = [](const caf::expected<settings>& s) {
    REQUIRE_FALSE(s);
    return detail_of(s.error())->message;
  };
  CHECK(contains(msg(load_settings(two_sources(
                   {{"LLM__OPENAI__A__CA_FILE", dir + ".missing"}}))),
                 "LLM__OPENAI__A__CA_FILE=" + dir + ".missing: cannot be read"));
  CHECK(contains(msg(load_settings(two_sources({{"LLM__CA_FILE", junk}}))),
                 "LLM__CA_FILE=" + junk + ": holds no PEM certificate"));
  // Not a file: said so (a directory "held no PEM", a FIFO blocked).
  CHECK(contains(msg(load_settings(two_sources({{"LLM__CA_FILE", "/tmp"}}))),
                 "LLM__CA_FILE=/tmp: is a directory"));
  auto fifo = dir + ".fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(msg(load_settings(two_sources({{"LLM__CA_FILE", fifo}}))),
                 "is not a regular file"));
  std::remove(fifo.c_str());
  std::remove(pem.c_str());
  std::remove(junk.c_str());
}
