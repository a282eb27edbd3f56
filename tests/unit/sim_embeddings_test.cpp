// The simulator's embeddings pieces (issue 16).

#include "apps/pgw-upstream-sim/embeddings.hpp"
#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <stdexcept>

using namespace pgw::sim;
using namespace pgw::sim::detail;

TEST_CASE("sim embeddings: dim and max_inputs per model, validated") {
  auto s = load_scenario(R"({"models": {"e": {"dim": 3, "max_inputs": 10}}})");
  CHECK(s.at("e").dim == 3);
  CHECK(s.at("e").max_inputs == 10);
  CHECK(s.at("ok").dim == 8);
  CHECK_FALSE(s.at("ok").max_inputs);
  CHECK_THROWS_WITH_AS(check_scenario(R"({"models": {"e": {"dim": 0}}})"),
                       "models.e.dim: must be an integer in [1, 65536]",
                       std::invalid_argument);
  CHECK_THROWS_AS(check_scenario(R"({"models": {"e": {"max_inputs": -1}}})"),
                  std::invalid_argument);
}

TEST_CASE("sim embeddings: requests parse, bad ones name the problem") {
  embed_request r;
  CHECK(parse_embed(R"({"model":"m","input":["ab","cdefgh"]})", r).empty());
  CHECK(r.model == "m");
  CHECK(r.inputs == std::vector<std::string>{"ab", "cdefgh"});
  CHECK(r.prompt_tokens == 2);
  embed_request one;
  CHECK(parse_embed(R"({"model":"m","input":"x"})", one).empty());
  CHECK(one.inputs.size() == 1);
  embed_request bad;
  CHECK(parse_embed("nope", bad).find("could not parse") != std::string::npos);
  CHECK(parse_embed(R"({"input":["a"]})", bad).find("model") != std::string::npos);
  CHECK(parse_embed(R"({"model":"m","input":[]})", bad) == "'input' must not be empty");
  CHECK(parse_embed(R"({"model":"m","input":[1]})", bad).find("strings") != std::string::npos);
  CHECK(parse_embed(R"({"model":"m","input":[""]})", bad).find("empty string") != std::string::npos);
  CHECK(parse_embed(R"({"model":"m","input":["a"],"encoding_format":"base64"})", bad)
          .find("encoding_format") != std::string::npos);
}

TEST_CASE("sim embeddings: vectors depend only on the text") {
  auto a = embed_vector("hello", 16);
  CHECK(a.size() == 16);
  CHECK(a == embed_vector("hello", 16));
  CHECK(a != embed_vector("hellp", 16));
  for (auto x : a) {
    CHECK(x >= -1.0f);
    CHECK(x < 1.0f);
  }
  embed_request r;
  r.model = "m";
  r.inputs = {"x", "y"};
  auto body = boost::json::parse(embeddings_body(r, 4, false)).as_object();
  auto& data = body.at("data").as_array();
  REQUIRE(data.size() == 2);
  CHECK(data[1].at("index").as_int64() == 1);
  CHECK(data[1].at("embedding").as_array().size() == 4);
  CHECK_FALSE(body.contains("usage"));
}

TEST_CASE("sim ocr: multipart files, answers and ocr_fail") {
  std::string file;
  CHECK(multipart_file("--XY\r\nContent-Disposition: form-data; name=\"file\""
                       "\r\n\r\nBYTES\r\n--XY--\r\n",
                       file));
  CHECK(file == "BYTES");
  CHECK_FALSE(multipart_file("not multipart", file));
  CHECK_FALSE(multipart_file("--XY\r\nno blank line", file));
  CHECK(ocr_text_of("a") == ocr_text_of("a"));
  CHECK(ocr_text_of("a") != ocr_text_of("b"));
  auto text = boost::json::parse(ocr_body("img", false)).as_object();
  CHECK(text.at("success").as_bool());
  CHECK(text.at("content").as_string() == ocr_text_of("img"));
  auto layout = boost::json::parse(ocr_body("img", true)).as_object();
  CHECK(layout.at("content_list").as_array().size() == 2);
  auto fail = boost::json::parse(ocr_failure_body("busy")).as_object();
  CHECK_FALSE(fail.at("success").as_bool());
  auto s = load_scenario(R"({"models": {"o": {"ocr_fail": "x", "ocr_fail_p": 0.5}}})");
  CHECK(s.at("o").ocr_fail == std::string{"x"});
  CHECK(s.at("o").ocr_fail_p == 0.5);
  CHECK_THROWS_WITH_AS(
    check_scenario(R"({"models": {"o": {"ocr_fail_p": 2}}})"),
    "models.o.ocr_fail_p: must be a number in [0, 1]", std::invalid_argument);
}

TEST_CASE("sim ocr: data: URLs decode to the image bytes") {
  std::string bytes;
  REQUIRE(data_url_bytes("data:image/png;base64,Zm9vYmE=", bytes));
  CHECK(bytes == "fooba");
  REQUIRE(data_url_bytes("data:image/png;base64,//4=", bytes));
  CHECK(bytes == std::string("\xFF\xFE", 2));
  CHECK_FALSE(data_url_bytes("https://example.com/x.png", bytes));
  CHECK_FALSE(data_url_bytes("data:image/png;base64,a*b", bytes));
}
