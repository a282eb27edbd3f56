// Every JSON the project writes has numbers in plain decimal (issue 12,
// item 10), request bodies sent upstream included.

#include "config/json_text.hpp"
#include "transport/chat_codec.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

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
