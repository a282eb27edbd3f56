// Numbers a parsed value would not pass on as written (serve refuses them,
// naming the field): integer literals outside [-2^63, 2^64) and literals
// beyond a double's range. Doubles as written (1e20) pass.

#include "config/json_numbers.hpp"
#include "config/json_text.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

using namespace pgw;
namespace json = boost::json;

TEST_CASE("unheld_number names the first integer literal beyond 64 bits, with its path") {
  CHECK(unheld_number(R"({"metadata":{"ids":[1,18446744073709551616]}})")
        == "metadata.ids[1]: number out of range");
  CHECK(unheld_number(R"({"a":[[0],{"b":-9223372036854775809}]})")
        == "a[1].b: number out of range");
  CHECK(unheld_number(R"({"logit_bias":{"50256":-1e400}})")
        == "logit_bias.50256: number out of range");
  CHECK(unheld_number("123456789012345678901234567890")
        == ": number out of range");
  // The first one, in document order.
  CHECK(unheld_number(R"({"x":1e400,"y":18446744073709551616})")
        == "x: number out of range");
  // Keys and strings that look like numbers are not numbers.
  CHECK(unheld_number(R"({"18446744073709551616":"18446744073709551616"})")
        == std::nullopt);
}

TEST_CASE("unheld_number passes what Boost.JSON holds as written") {
  // The edges of int64 and uint64, and doubles written as doubles.
  CHECK(unheld_number(R"([-9223372036854775808,18446744073709551615])")
        == std::nullopt);
  CHECK(unheld_number(R"({"seed":1e20,"t":-2.5E30,"u":1.0e-300,"v":0.5})")
        == std::nullopt);
  CHECK(unheld_number("not json") == std::nullopt);
  // 1e20 is then written back with its value.
  auto v = json::parse(R"({"seed":1e20})");
  CHECK(json_text(v) == R"({"seed":100000000000000000000})");
}
