#include "transport/ocr_codec.hpp"

#include "messages/errors.hpp"

#include <doctest/doctest.h>

using namespace pgw;

namespace {

const std::string png_bytes = std::string("\x89PNG\r\n\x1a\n", 8) + "rest";
const std::string jpeg_bytes = std::string("\xFF\xD8\xFF\xE0", 4) + "rest";
const std::string pdf_bytes = "%PDF-1.7\n...";

} // namespace

TEST_CASE("ocr: image type from magic bytes, never the name") {
  image_type t;
  REQUIRE(sniff_image(png_bytes, t));
  CHECK(t == image_type::png);
  REQUIRE(sniff_image(jpeg_bytes, t));
  CHECK(t == image_type::jpeg);
  REQUIRE(sniff_image(pdf_bytes, t));
  CHECK(t == image_type::pdf);
  CHECK_FALSE(sniff_image("GIF89a....", t));
  CHECK_FALSE(sniff_image(std::string("\x89PN", 3), t));
  CHECK_FALSE(sniff_image("", t));
}

TEST_CASE("ocr: empty, oversize and wrong-type images are invalid_request") {
  image_type t;
  CHECK_FALSE(check_image(png_bytes, 100, t));
  auto big = check_image(png_bytes, 5, t);
  CHECK(code_of(big) == error_code::invalid_request);
  CHECK(detail_of(big)->message
        == "the image has 12 bytes, more than MAX_IMAGE_BYTES=5");
  auto gif = check_image("GIF89a", 100, t);
  CHECK(code_of(gif) == error_code::invalid_request);
  CHECK(detail_of(gif)->message.find("not a PNG, JPEG or PDF")
        != std::string::npos);
  CHECK(code_of(check_image("", 100, t)) == error_code::invalid_request);
}

TEST_CASE("ocr: base64 and data URLs") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(base64_encode(std::string("\xFF\xFE", 2)) == "//4=");
  CHECK(image_data_url("foo", image_type::jpeg) == "data:image/jpeg;base64,Zm9v");
}

TEST_CASE("ocr: base64 decoding round-trips and rejects what no encoder makes") {
  std::string out;
  for (std::string bytes : {std::string{}, std::string{"f"}, std::string{"fo"},
                            std::string{"foo"}, std::string("\xFF\xFE\0\x01", 4)}) {
    CAPTURE(bytes);
    REQUIRE(base64_decode(base64_encode(bytes), out));
    CHECK(out == bytes);
  }
  CHECK(base64_decode("Zm8", out)); // padding optional
  CHECK(out == "fo");
  CHECK_FALSE(base64_decode("Zm9v!", out));
  CHECK_FALSE(base64_decode("Zm9vY", out)); // 5 symbols: no encoder makes it
  CHECK_FALSE(base64_decode("Zm=9", out));
}

TEST_CASE("ocr: the multipart body carries the file with its type") {
  auto body = monkey_multipart(pdf_bytes, image_type::pdf, "B0UND");
  CHECK(body.rfind("--B0UND\r\n", 0) == 0);
  CHECK(body.find("name=\"file\"; filename=\"document.pdf\"")
        != std::string::npos);
  CHECK(body.find("Content-Type: application/pdf\r\n\r\n" + pdf_bytes
                  + "\r\n--B0UND--\r\n")
        != std::string::npos);
}

TEST_CASE("ocr: MonkeyOCR answers, success:false classified by message") {
  attempt_result ok;
  decode_monkey_text(R"({"success":true,"task_type":"text","content":"Hello"})",
                     ok);
  CHECK(ok.kind == outcome::ok);
  CHECK(ok.content == "Hello");
  attempt_result busy;
  decode_monkey_text(R"({"success":false,"message":"CUDA out of memory"})",
                     busy);
  CHECK(busy.kind == outcome::transient);
  CHECK(busy.reason == "ocr_failed");
  CHECK(busy.error_message == "CUDA out of memory");
  attempt_result bad;
  decode_monkey_text(
    R"({"success":false,"message":"Unsupported file type: .gif"})", bad);
  CHECK(bad.kind == outcome::request_rejected);
  CHECK(bad.reason == "ocr_rejected");
  // The message is upstream text: scrubbed before it is kept.
  attempt_result echo;
  decode_monkey_text(
    R"({"success":false,"message":"failed for Bearer sk-live-1234567890abcdef"})",
    echo);
  CHECK(echo.error_message.find("sk-live-1234567890abcdef") == std::string::npos);
  CHECK(echo.error_message.find("[redacted]") != std::string::npos);
  for (auto* body : {"not json", "[]", R"({"content":"x"})",
                     R"({"success":true})", R"({"success":true,"content":1})"}) {
    attempt_result r;
    decode_monkey_text(body, r);
    CAPTURE(body);
    CHECK(r.kind == outcome::result_invalid);
    CHECK(r.reason == "malformed_body");
  }
}

TEST_CASE("ocr: a vision layout whose JSON text holds a code fence is read "
          "as JSON, not cut at the fence") {
  attempt_result r;
  r.kind = outcome::ok;
  r.content = "{\n  \"markdown\": \"Run:\\n```sh\\nmake\\n```\",\n"
              "  \"blocks\": [{\"type\": \"text\", \"text\": \"Run:\"},\n"
              "             {\"type\": \"text\", \"text\": "
              "\"```sh\\nmake\\n```\"}]\n}";
  std::string blocks;
  decode_vision_layout(r, blocks);
  INFO(r.error_message);
  REQUIRE(r.kind == outcome::ok);
  CHECK(r.content == "Run:\n```sh\nmake\n```");
  CHECK(blocks
        == R"([{"type":"text","text":"Run:"},{"type":"text","text":"```sh\nmake\n```"}])");
}

TEST_CASE("ocr: a vision layout wrapped in a fence is read from inside it, "
          "a fence that wraps only part of the answer is not") {
  auto decode = [](std::string content, std::string& blocks) {
    attempt_result r;
    r.kind = outcome::ok;
    r.content = std::move(content);
    decode_vision_layout(r, blocks);
    return r;
  };
  std::string blocks;
  auto fenced = decode("```json\n{\"markdown\": \"# T\", \"blocks\": "
                       "[{\"type\": \"title\", \"text\": \"T\"}]}\n```\n",
                       blocks);
  REQUIRE(fenced.kind == outcome::ok);
  CHECK(fenced.content == "# T");
  CHECK(blocks == R"([{"type":"title","text":"T"}])");
  auto bare = decode(" \n```\n{\"markdown\": \"x\"}\n```", blocks);
  CHECK(bare.kind == outcome::ok);
  CHECK(bare.content == "x");
  for (auto* text : {"Here it is:\n```json\n{\"markdown\": \"x\"}\n```",
                     "```json\n{\"markdown\": \"x\"}", "```", "plain text"}) {
    CAPTURE(text);
    auto r = decode(text, blocks);
    CHECK(r.kind == outcome::result_invalid);
    CHECK(r.reason == "layout_not_json");
  }
}

TEST_CASE("ocr: a layout list with an item that is not an object is "
          "result_invalid naming the item, never cut to the items before "
          "it") {
  attempt_result monkey;
  std::string blocks;
  decode_monkey_layout(
    R"({"success":true,"content":"a","content_list":[{"text":"a"},5]})",
    monkey, blocks);
  CHECK(monkey.kind == outcome::result_invalid);
  CHECK(monkey.reason == "malformed_body");
  CHECK(monkey.error_message == "content_list item 1 is not an object");
  attempt_result vision;
  vision.kind = outcome::ok;
  vision.content = R"({"markdown":"a","blocks":["x",{"text":"a"}]})";
  decode_vision_layout(vision, blocks);
  CHECK(vision.kind == outcome::result_invalid);
  CHECK(vision.reason == "layout_not_json");
  CHECK(vision.error_message
        == "the layout answer's blocks item 0 is not an object");
  // Malformed fields of an object item are normalised, as before.
  attempt_result lenient;
  decode_monkey_layout(
    R"({"success":true,"content_list":[{"type":1,"text":"a","bbox":[1,2]},{}]})",
    lenient, blocks);
  REQUIRE(lenient.kind == outcome::ok);
  CHECK(blocks
        == R"([{"type":"text","text":"a"},{"type":"text","text":""}])");
  CHECK(lenient.content == "a");
}
