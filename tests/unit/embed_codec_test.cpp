#include "transport/embed_codec.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

using namespace pgw;

namespace {

source_config embed_source() {
  source_config src;
  src.name = "a";
  src.model = "emb-1";
  src.kind = source_kind::embedding;
  return src;
}

attempt_result decode(const std::string& body, size_t expected,
                      std::vector<std::vector<float>>& vectors) {
  attempt_result res;
  res.kind = outcome::ok;
  res.reason = "ok";
  decode_embeddings(body, expected, vectors, res);
  return res;
}

} // namespace

TEST_CASE("embed body: model, the batch's inputs in order, float, overlay") {
  auto src = embed_source();
  src.overlay = R"({"dimensions": 8, "model": "other", "input": []})";
  std::vector<std::string> in = {"zero", "one", "two", "three"};
  auto body = boost::json::parse(build_embed_body(src, in, 1, 3)).as_object();
  CHECK(body.at("model").as_string() == "emb-1");
  CHECK(body.at("encoding_format").as_string() == "float");
  CHECK(body.at("dimensions").as_int64() == 8);
  auto& input = body.at("input").as_array();
  REQUIRE(input.size() == 2);
  CHECK(input[0].as_string() == "one");
  CHECK(input[1].as_string() == "two");
}

TEST_CASE("embed decode: vectors ordered by index, usage and model") {
  std::vector<std::vector<float>> v;
  auto res = decode(R"({"object":"list","model":"emb-1b","data":[
      {"object":"embedding","index":1,"embedding":[3,4]},
      {"object":"embedding","index":0,"embedding":[1.5,2]}],
      "usage":{"prompt_tokens":7,"total_tokens":7}})",
                    2, v);
  CHECK(res.kind == outcome::ok);
  REQUIRE(v.size() == 2);
  CHECK(v[0] == std::vector<float>{1.5f, 2.0f});
  CHECK(v[1] == std::vector<float>{3.0f, 4.0f});
  CHECK(res.model == "emb-1b");
  CHECK(res.usage_reported);
  CHECK(res.prompt_tokens == 7);
}

TEST_CASE("embed decode: bad answers are result_invalid, with a reason") {
  std::vector<std::vector<float>> v;
  CHECK(decode("not json", 1, v).reason == "malformed_body");
  CHECK(decode(R"({"data":{}})", 1, v).reason == "malformed_body");
  CHECK(decode(R"({"data":[{"index":0,"embedding":[1]}]})", 2, v).reason
        == "wrong_count");
  CHECK(decode(R"({"data":[{"index":0,"embedding":[1]},
                            {"index":1,"embedding":[1,2]}]})",
               2, v)
          .reason
        == "ragged_vectors");
  CHECK(decode(R"({"data":[{"index":0,"embedding":[1]},
                            {"index":0,"embedding":[2]}]})",
               2, v)
          .reason
        == "malformed_body");
  CHECK(decode(R"({"data":[{"index":0,"embedding":["a"]}]})", 1, v).reason
        == "malformed_body");
  CHECK(decode(R"({"data":[{"index":5,"embedding":[1]}]})", 1, v).reason
        == "malformed_body");
  // Finite as a double, infinite as a float (found by fuzz_side_decoders).
  auto huge = decode(R"({"data":[{"index":0,"embedding":[2,3.6e85]}]})", 1, v);
  CHECK(huge.reason == "malformed_body");
  CHECK(huge.error_message.find("float") != std::string::npos);
  auto res = decode(R"({"data":[{"index":0,"embedding":[1]}]})", 1, v);
  CHECK(res.kind == outcome::ok);
  CHECK_FALSE(res.usage_reported);
  CHECK(v.size() == 1);
  auto err = decode(R"({"error":{"message":"boom","type":"server_error"}})", 1,
                    v);
  CHECK(err.kind != outcome::ok);
}
