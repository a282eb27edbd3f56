// `pgw-actor ocr` against a real simulator (issue 16).

#include "apps/pgw-upstream-sim/embeddings.hpp"
#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

using namespace pgw::test;
namespace json = boost::json;

namespace {

constexpr const char* ocr_scenario = R"({"models": {
  "monkey": {},
  "sad":    {"ocr_fail": "CUDA out of memory"},
  "picky":  {"ocr_fail": "Unsupported file type"}
}})";

struct ocr_e2e_fixture {
  std::string dir = "/tmp/pgw-ocr-e2e-" + std::to_string(::getpid());
  std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + "a page";
  sim_process sim{{"--scenario", write("scenario.json", ocr_scenario)}};

  ocr_e2e_fixture() {
    write("page.png", png);
    write("page.gif", "GIF89a....");
  }

  ~ocr_e2e_fixture() {
    for (auto* f : {"scenario.json", "page.png", "page.gif"})
      std::remove((dir + "-" + f).c_str());
  }

  std::string write(const std::string& name, const std::string& bytes) {
    auto path = dir + "-" + name;
    std::ofstream{path, std::ios::binary} << bytes;
    return path;
  }

  std::vector<std::string> source(const std::string& name,
                                  const std::string& model) {
    auto prefix = "OCR__GENERIC__" + name + "__";
    return {prefix + "BASE_URL=http://127.0.0.1:" + std::to_string(sim.port())
              + "/" + model,
            prefix + "MODEL=" + model, prefix + "KIND=ocr_monkey"};
  }

  static std::vector<std::string> concat_backoff(std::vector<std::string> env) {
    env.push_back("OCR__BACKOFF_BASE_S=0.01");
    return env;
  }

  run_result ocr(std::vector<std::string> args,
                 std::vector<std::string> env) {
    args.insert(args.begin(), {PGW_ACTOR_BIN, "ocr"});
    return run_program(args, env);
  }
};

} // namespace

TEST_CASE_FIXTURE(ocr_e2e_fixture, "ocr: text and layout through the CLI") {
  auto env = source("M", "monkey");
  auto text = ocr({"text", dir + "-page.png"}, env);
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out == pgw::sim::detail::ocr_text_of(png) + "\n");
  auto layout = ocr({"layout", dir + "-page.png", "--json"}, env);
  REQUIRE(layout.exit_code == 0);
  auto doc = json::parse(layout.out).as_object();
  CHECK(doc.at("source").as_string() == "m");
  CHECK(doc.at("blocks").as_array().size() == 2);
  CHECK(doc.at("blocks").at(0).at("type").as_string() == "title");
  CHECK(doc.at("call_stats").at("prompt_tokens").as_int64() == 0);
}

TEST_CASE_FIXTURE(ocr_e2e_fixture,
                  "ocr: success:false fails over, every source failing and "
                  "bad images give the right exit codes") {
  auto env = source("A", "sad");
  auto more = source("B", "monkey");
  env.insert(env.end(), more.begin(), more.end());
  env.push_back("OCR__SELECTOR=round_robin");
  env.push_back("OCR__BACKOFF_BASE_S=0.01");
  auto r = ocr({"text", dir + "-page.png", "--json"}, env);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out).at("source").as_string() == "b");
  auto down = ocr({"text", dir + "-page.png", "--json"},
                  concat_backoff(source("A", "sad")));
  CHECK(down.exit_code == 4);
  CHECK(json::parse(down.out).at("error").at("per_source").at("a").at("reason").as_string()
        == "ocr_failed");
  auto picky = ocr({"text", dir + "-page.png"}, source("A", "picky"));
  CHECK(picky.exit_code == 3);
  auto gif = ocr({"text", dir + "-page.gif"}, source("A", "monkey"));
  CHECK(gif.exit_code == 2);
  CHECK(gif.err.find("not a PNG, JPEG or PDF") != std::string::npos);
  auto small = source("A", "monkey");
  small.push_back("OCR__GENERIC__A__MAX_IMAGE_BYTES=4");
  auto big = ocr({"text", dir + "-page.png"}, small);
  CHECK(big.exit_code == 2);
  CHECK(big.err.find("MAX_IMAGE_BYTES=4") != std::string::npos);
  // The image is read bounded: a device is refused, not read forever.
  auto zero = ocr({"text", "/dev/zero"}, source("A", "monkey"));
  CHECK(zero.exit_code == 2);
  CHECK(zero.err.find("not a regular file") != std::string::npos);
}

TEST_CASE_FIXTURE(ocr_e2e_fixture,
                  "ocr_vision: the image as a data: URL to a vision chat "
                  "model") {
  std::vector<std::string> env{
    "OCR__GENERIC__V__BASE_URL=" + sim.base_url(), "OCR__GENERIC__V__MODEL=ok",
    "OCR__GENERIC__V__KIND=ocr_vision"};
  auto r = ocr({"text", dir + "-page.png", "--json"}, env);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto doc = json::parse(r.out);
  CHECK(doc.at("text").as_string() == pgw::sim::detail::ocr_text_of(png));
  CHECK(doc.at("source").as_string() == "v");
  // The vision answer is not JSON: a layout fails result_invalid (exit 4).
  auto layout = ocr({"layout", dir + "-page.png", "--json"},
                    concat_backoff(env));
  CHECK(layout.exit_code == 4);
  CHECK(json::parse(layout.out).at("error").at("per_source").at("v")
          .at("reason").as_string()
        == "layout_not_json");
}

TEST_CASE_FIXTURE(ocr_e2e_fixture,
                  "ocr: --source and --scope OCR/NAME pin the call: a pinned "
                  "failing source is not failed over") {
  auto env = source("A", "sad");
  auto more = source("B", "monkey");
  env.insert(env.end(), more.begin(), more.end());
  env.push_back("OCR__BACKOFF_BASE_S=0.01");
  env.push_back("OCR__MAX_ATTEMPTS=2");
  auto good = ocr({"text", dir + "-page.png", "--json", "--scope", "OCR/b"},
                  env);
  INFO(good.err);
  REQUIRE(good.exit_code == 0);
  CHECK(json::parse(good.out).at("source").as_string() == "b");
  auto pinned = ocr({"text", dir + "-page.png", "--json", "--source", "a"},
                    env);
  CHECK(pinned.exit_code == 4);
  auto err = json::parse(pinned.out).at("error").as_object();
  CHECK(err.at("per_source").as_object().contains("a"));
  CHECK_FALSE(err.at("per_source").as_object().contains("b"));
}

TEST_CASE_FIXTURE(ocr_e2e_fixture,
                  "ocr: an unknown scope or pinned source is named with the "
                  "known ones, as chat names a scope, not blamed on the "
                  "image") {
  auto env = source("A", "monkey");
  auto page = dir + "-page.png";
  for (auto pin : {std::vector<std::string>{"--scope", "OCR/nosuch"},
                   std::vector<std::string>{"--source", "nosuch"}}) {
    CAPTURE(pin[1]);
    auto args = std::vector<std::string>{"text", page};
    args.insert(args.end(), pin.begin(), pin.end());
    auto r = ocr(args, env);
    CHECK(r.exit_code == 2);
    CHECK(r.err
          == "pgw-actor: invalid_request: source 'nosuch' is not in scope "
             "OCR (its sources: a)\n");
  }
  auto json_pin = ocr({"text", page, "--source", "nosuch", "--json"}, env);
  CHECK(json_pin.exit_code == 2);
  CHECK(json::parse(json_pin.out).at("error").at("code").as_string()
        == "invalid_request");
  auto scope = ocr({"text", page, "--scope", "NOSUCH"}, env);
  CHECK(scope.exit_code == 2);
  CHECK(scope.err.find("scope NOSUCH has no sources") != std::string::npos);
  CHECK(scope.err.find("configured: OCR") != std::string::npos);
  CHECK(scope.err.find("MAX_IMAGE_BYTES") == std::string::npos);
  // chat says the same of a scope it does not know.
  auto chat = run_program({PGW_ACTOR_BIN, "chat", "hi", "--scope", "NOSUCH"},
                          env);
  CHECK(chat.exit_code == 2);
  CHECK(chat.err == scope.err);
}
