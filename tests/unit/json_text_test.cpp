// Every JSON the project writes has numbers in plain decimal (issue 12,
// item 10), request bodies sent upstream included.

#include "config/json_text.hpp"
#include "actors/structured_schema.hpp"
#include "backends/cache_value.hpp"
#include "transport/chat_codec.hpp"
#include "transport/embed_codec.hpp"
#include "transport/ocr_codec.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>

using namespace pgw;
namespace json = boost::json;

TEST_CASE("plain_number writes the shortest plain decimal") {
  CHECK(plain_number(381.27) == "381.27");
  CHECK(plain_number(1.0) == "1");
  CHECK(plain_number(0.2) == "0.2");
  CHECK(plain_number(-0.5) == "-0.5");
  CHECK(plain_number(0) == "0");
  CHECK(plain_number(1.5e-7) == "0.00000015");
  CHECK(plain_number(-2.5e-5) == "-0.000025");
  CHECK(plain_number(1e20) == "100000000000000000000");
  CHECK(plain_number(1.25e17) == "125000000000000000");
  CHECK(plain_number(std::nan("")) == "null");
  CHECK(plain_number(std::numeric_limits<double>::infinity()) == "null");
  // Reads back as the same double.
  for (double x : {0.1, 1.0 / 3, 123456.789, 6.02214076e23, 1e-300}) {
    CAPTURE(x);
    CHECK(std::stod(plain_number(x)) == x);
  }
}

TEST_CASE("json_text never writes an exponent") {
  json::value v = json::object{{"a", 381.27},
                               {"b", 1.0},
                               {"c", json::array{0.2, 3, "x"}},
                               {"d", json::object{{"e", 1e-7}}},
                               {"s", "2E-1"}};
  CHECK(json_text(v)
        == R"({"a":381.27,"b":1,"c":[0.2,3,"x"],"d":{"e":0.0000001},"s":"2E-1"})");
  CHECK(round_us(12.3456789) == doctest::Approx(12.346));
}

TEST_CASE("an OVERLAY temperature 0.2 reaches the upstream as 0.2") {
  chat_request req;
  req.messages.push_back({"user", "hi", {}});
  source_config src;
  src.name = "a";
  src.model = "m";
  src.overlay = R"({"temperature":0.2,"top_p":1.0})";
  auto body = build_chat_body(req, src, false);
  REQUIRE(body);
  CHECK(body->find("\"temperature\":0.2") != std::string::npos);
  CHECK(body->find("\"top_p\":1") != std::string::npos);
  CHECK(body->find("E-1") == std::string::npos);
  CHECK(body->find("E0") == std::string::npos);
}

namespace {

// Literals Boost.JSON 1.81's own parse reads one unit in the last place
// (or more) off the double nearest to them.
const char* const misread[] = {"2.5e229", "0.75438530415285798",
                               "0.028812628903238914", "-0.94930120289264419"};

} // namespace

TEST_CASE("parse_json holds each number's nearest double") {
  for (auto text : misread) {
    INFO(text);
    json::error_code ec;
    auto v = parse_json(text, ec);
    REQUIRE(!ec);
    REQUIRE(v.is_double());
    CHECK(v.get_double() == std::strtod(text, nullptr));
    // What json_text writes reads back as the same double.
    auto again = parse_json(json_text(v), ec);
    REQUIRE(!ec);
    CHECK(again.get_double() == v.get_double());
  }
  json::error_code ec;
  auto v = parse_json(R"({"a":[1,-2,18446744073709551615,true,null,"s"],"b":{}})",
                      ec);
  REQUIRE(!ec);
  CHECK(json_text(v)
        == R"({"a":[1,-2,18446744073709551615,true,null,"s"],"b":{}})");
  CHECK(parse_json("1e400", ec).get_double() == HUGE_VAL); // as Boost reads it
}

TEST_CASE("parse_json fails as json::parse does, and says where") {
  json::error_code ec;
  size_t consumed = 0;
  CHECK(parse_json("{} x", ec, &consumed).is_null());
  CHECK(ec == json::error::extra_data);
  ec = {};
  parse_json("[1,", ec, &consumed);
  CHECK(ec);
  ec = {};
  parse_json(R"({"a":tru})", ec, &consumed);
  CHECK(ec);
  CHECK(consumed == 5);
  ec = {};
  parse_json(std::string(33, '[') + std::string(33, ']'), ec);
  CHECK(ec == json::error::too_deep); // the default depth bound, 32
  ec = {};
  parse_json(std::string(32, '[') + std::string(32, ']'), ec);
  CHECK(!ec);
}

TEST_CASE("a caller's numbers reach the upstream with the values written") {
  chat_request req;
  req.messages.push_back({"user", "hi", {}});
  std::string list;
  for (auto text : misread)
    list += (list.empty() ? "" : ",") + std::string(text);
  req.extra_body = R"({"metadata":{"x":[)" + list + "]}}";
  req.tools = R"([{"type":"function","function":{"name":"f","parameters":)"
              R"({"type":"number","maximum":)" + std::string(misread[1]) + "}}}]";
  source_config src;
  src.name = "a";
  src.model = "m";
  src.overlay = R"({"top_k":)" + std::string(misread[2]) + "}";
  auto body = build_chat_body(req, src, false);
  REQUIRE(body);
  INFO(*body);
  json::error_code ec;
  auto sent = parse_json(*body, ec);
  REQUIRE(!ec);
  auto& xs = sent.at("metadata").at("x").as_array();
  REQUIRE(xs.size() == std::size(misread));
  for (size_t i = 0; i < xs.size(); ++i)
    CHECK(xs[i].as_double() == std::strtod(misread[i], nullptr));
  CHECK(sent.at("tools").at(0).at("function").at("parameters").at("maximum")
          .as_double()
        == std::strtod(misread[1], nullptr));
  CHECK(sent.at("top_k").as_double() == std::strtod(misread[2], nullptr));

  // An embeddings request's OVERLAY, in plain decimal (was 2E-1).
  src.overlay = R"({"dimensions":256,"temperature":0.2,"x":)"
                + std::string(misread[3]) + "}";
  auto embed = build_embed_body(src, {"a"}, 0, 1);
  INFO(embed);
  CHECK(embed.find(R"("temperature":0.2,)") != std::string::npos);
  auto embed_sent = parse_json(embed, ec);
  REQUIRE(!ec);
  CHECK(embed_sent.at("x").as_double() == std::strtod(misread[3], nullptr));
  CHECK(embed_sent.at("dimensions").as_int64() == 256);
}

TEST_CASE("an upstream's numbers reach the caller with the values written, "
          "in plain decimal") {
  // Boost.JSON's serialize writes 0.5 as 5E-1; its parse misreads the
  // long literal. Both used to reach the caller.
  const std::string long_lit = misread[1]; // 0.75438530415285798
  const std::string obj = R"({"a":0.5,"b":)" + long_lit + "}";
  // The same double's shortest text (Boost's misread gives 0.7543853041528579).
  const std::string shortest = plain_number(std::strtod(long_lit.c_str(), nullptr));
  REQUIRE(shortest == "0.754385304152858");
  const std::string obj_out = R"({"a":0.5,"b":)" + shortest + "}";

  SUBCASE("tool-call arguments sent as an object") {
    attempt_result out;
    decode_chat_completion(
      R"({"choices":[{"message":{"role":"assistant","tool_calls":[)"
      R"({"id":"c","type":"function","function":{"name":"f","arguments":)"
        + obj + R"(}}]},"finish_reason":"tool_calls"}]})",
      out);
    REQUIRE(out.kind == outcome::ok);
    REQUIRE(out.tool_calls.size() == 1);
    CHECK(out.tool_calls[0].arguments == obj_out);
  }
  SUBCASE("a structured answer's parsed value") {
    auto schema = compile_schema(R"({"type":"object","properties":)"
                                 R"({"b":{"type":"number","maximum":)"
                                 + long_lit + "}}}");
    REQUIRE(schema);
    auto check = check_answer(**schema, obj);
    CHECK(check.valid); // b is at its maximum, read alike on both sides
    CHECK(check.json == obj_out);
  }
  SUBCASE("an OCR vision layout's blocks") {
    attempt_result out;
    out.kind = outcome::ok;
    out.content = R"({"markdown":"m","blocks":[{"type":"text","text":"t",)"
                  R"("bbox":[10,0.5,)" + long_lit + ",20.25]}]}";
    std::string blocks;
    decode_vision_layout(out, blocks);
    REQUIRE(out.kind == outcome::ok);
    CHECK(blocks == R"([{"type":"text","text":"t","bbox":[10,0.5,)" + shortest
                      + ",20.25]}]");
  }
  SUBCASE("a cached answer's cost") {
    cached_answer stored;
    stored.response.content = "x";
    stored.response.finish_reason = "stop";
    stored.response.stats.cost_usd = std::strtod(long_lit.c_str(), nullptr);
    stored.stored_at_s = 1764979200.5;
    auto text = encode_cached_answer(stored);
    CHECK(text.find("E-") == std::string::npos);
    auto back = decode_cached_answer(text);
    REQUIRE(back);
    CHECK(back->response.stats.cost_usd == stored.response.stats.cost_usd);
    CHECK(back->stored_at_s == stored.stored_at_s);
  }
}
