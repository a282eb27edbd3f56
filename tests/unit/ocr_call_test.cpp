/// The OCR call actor on the test coordinator with the fake transport.

#include "actors/client.hpp"
#include "fakes/memory_sink.hpp"
#include "fixtures/side_call_fixture.hpp"

#include <boost/json.hpp>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + "pixels";

/// An OCR scope of `kind`; TPM set so a settlement other than 0 shows.
scope_config ocr_scope(source_kind kind,
                       const std::vector<std::string>& names) {
  auto sc = test_scope(names);
  sc.name = "OCR";
  for (auto& src : sc.sources) {
    src.scope = "OCR";
    src.kind = kind;
    src.tpm = 100000;
  }
  return sc;
}

/// A transport success whose raw body is `body` (MonkeyOCR answers).
fake_step raw(const std::string& body) {
  auto s = fake_step::ok(body, 0, 0);
  s.result.usage_reported = false;
  return s;
}

struct ocr_fixture : side_call_fixture {
  std::shared_ptr<side_outcome<ocr_response>>
  ocr(gateway_actor gw, std::string image, bool layout = false,
      std::string call_id = "") {
    ocr_request req;
    req.image = std::move(image);
    req.layout = layout;
    req.call_id = std::move(call_id);
    auto out = start_side<ocr_response>(gw, atom::ocr_v, std::move(req));
    run_until(out);
    return out;
  }

  /// Every permit settled 0 tokens.
  void check_settled_zero(gateway_actor gw) {
    settle();
    auto st = status(gw);
    check_balanced(st);
    for (auto& s : st.sources) {
      CAPTURE(s.name);
      CHECK(s.limiter.tpm_used == 0);
    }
  }
};

} // namespace

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr_vision: the image goes as a data: URL, the answer is "
                  "the text, the permit settles 0 (S6)") {
  fake->script("a", {fake_step::ok("Hello from the image", 900, 40)});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_vision, {"a"}));
  auto out = ocr(gw, png);
  REQUIRE(out->response);
  CHECK(out->response->text == "Hello from the image");
  CHECK(out->response->source == "a");
  CHECK(out->response->stats.attempts == 1);
  // The usage the vision model reported, as the attempt's row has it.
  CHECK(out->response->stats.usage_source == "reported");
  CHECK(out->response->stats.prompt_tokens == 900);
  CHECK(out->response->stats.completion_tokens == 40);
  auto calls = fake->calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].kind == upstream_kind::chat);
  auto body = boost::json::parse(calls[0].body);
  auto& parts = body.at("messages").at(0).at("content").as_array();
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].at("text").as_string().find("Transcribe")
        != boost::json::string::npos);
  auto url = std::string(parts[1].at("image_url").at("url").as_string());
  CHECK(url.rfind("data:image/png;base64,", 0) == 0);
  check_settled_zero(gw);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr_vision layout: JSON blocks, a non-JSON answer is "
                  "result_invalid and retried elsewhere") {
  fake->script("a", {fake_step::ok("I cannot do JSON, sorry")});
  fake->script("b", {fake_step::ok(
                      "```json\n{\"markdown\": \"# Title\", \"blocks\": "
                      "[{\"type\": \"title\", \"text\": \"Title\", \"bbox\": "
                      "[1, 2, 3, 4]}]}\n```")});
  auto sc = ocr_scope(source_kind::ocr_vision, {"a", "b"});
  sc.sources[1].ocr_prompt_layout = "custom layout prompt";
  auto gw = spawn_gateway(sc);
  auto out = ocr(gw, png, true);
  REQUIRE(out->response);
  CHECK(out->response->text == "# Title");
  CHECK(out->response->source == "b");
  // Coordinates in plain decimal, as every JSON pgw writes (json_text).
  CHECK(out->response->blocks_json
        == R"([{"type":"title","text":"Title","bbox":[1,2,3,4]}])");
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].body.find("custom layout prompt") != std::string::npos);
  auto st = status(gw);
  CHECK(source(st, "a").outcomes.at("result_invalid") == 1);
  check_settled_zero(gw);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr_monkey: multipart /ocr/text, HTTP 200 success:false "
                  "is a failure, retried on another source") {
  fake->script("a", {raw(R"({"success":false,"message":"model busy"})")});
  fake->script("b", {raw(R"({"success":true,"task_type":"text",)"
                         R"("content":"Recognised"})")});
  auto sink = std::make_shared<memory_sink>();
  gateway_options opts;
  opts.telemetry = spawn_telemetry(sys, sink);
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_monkey, {"a", "b"}), 42,
                          opts);
  auto out = ocr(gw, png);
  REQUIRE(out->response);
  CHECK(out->response->text == "Recognised");
  // A MonkeyOCR server reports no usage: the call says so, as its row does.
  CHECK(out->response->stats.usage_source == "unavailable");
  settle();
  REQUIRE(sink->attempts.size() == 2);
  CHECK(sink->attempts[1].usage_source == "unavailable");
  auto calls = fake->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].kind == upstream_kind::ocr_text);
  CHECK(calls[0].body.find("name=\"file\"; filename=\"image.png\"")
        != std::string::npos);
  CHECK(calls[0].body.find(png) != std::string::npos);
  auto st = status(gw);
  CHECK(source(st, "a").outcomes.at("transient") == 1);
  check_settled_zero(gw);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr_monkey: success:false blaming the input ends the call "
                  "request_rejected") {
  fake->script("a", {raw(R"({"success":false,"message":"Unsupported file"})")});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_monkey, {"a", "b"}));
  auto out = ocr(gw, png);
  REQUIRE(out->error);
  CHECK(code_of(out->error) == error_code::request_rejected);
  CHECK(detail_of(out->error)->upstream_message == "Unsupported file");
  CHECK(fake->calls().size() == 1);
  check_settled_zero(gw);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr: every source redirecting is result_invalid, not the "
                  "caller's request_rejected") {
  fake->script("a", {fake_step::unusable(302, "redirect")});
  fake->script("b", {fake_step::unusable(200, reason_response_too_large)});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_monkey, {"a", "b"}));
  auto err = ocr(gw, png)->error;
  CHECK(code_of(err) == error_code::result_invalid);
  CHECK(words_of(err)
        == "no source gave a usable answer: a: redirect (302); "
           "b: response_too_large (200)");
  CHECK(fake->calls().size() == 2);
  check_settled_zero(gw);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr: no socket left in this process is retry_exhausted, "
                  "not the caller's request_rejected") {
  auto local = fake_step::unusable(0, reason_local_exhausted);
  local.result.error_message = "this process cannot open a socket";
  fake->script("a", {local});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_monkey, {"a"}));
  auto err = ocr(gw, png)->error;
  CHECK(code_of(err) == error_code::retry_exhausted);
  CHECK(words_of(err).rfind("this process cannot open sockets", 0) == 0);
  CHECK(fake->calls().size() == 1);
  check_settled_zero(gw);
}

TEST_CASE_FIXTURE(ocr_fixture, "ocr_monkey layout: /parse content_list") {
  fake->script("a", {raw(R"({"success":true,"content_list":[)"
                         R"({"type":"title","text":"T","bbox":[0,0,9,9]},)"
                         R"({"type":"text","text":"Body"}]})")});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_monkey, {"a"}));
  auto out = ocr(gw, png, true);
  REQUIRE(out->response);
  CHECK(out->response->text == "T\n\nBody");
  CHECK(fake->calls()[0].kind == upstream_kind::ocr_parse);
  CHECK(boost::json::parse(out->response->blocks_json).as_array().size() == 2);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr_monkey layout: a bbox with a non-finite coordinate is "
                  "dropped, the block kept") {
  // 1e999 parses as infinity; kept, it would serialise as a token the
  // caller's JSON reader refuses (found by fuzz_side_decoders).
  fake->script("a", {raw(R"({"success":true,"content_list":[)"
                         R"({"type":"title","text":"T","bbox":[0,0,8e999,1]},)"
                         R"({"type":"text","text":"Body","bbox":[1,2,3,4]}]})")});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_monkey, {"a"}));
  auto out = ocr(gw, png, true);
  REQUIRE(out->response);
  boost::system::error_code ec;
  auto blocks = boost::json::parse(out->response->blocks_json, ec);
  REQUIRE(!ec);
  REQUIRE(blocks.as_array().size() == 2);
  CHECK(blocks.as_array()[0].as_object().at("text") == "T");
  CHECK(!blocks.as_array()[0].as_object().contains("bbox"));
  CHECK(blocks.as_array()[1].as_object().at("bbox").as_array().size() == 4);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr: wrong image type and oversize images fail before "
                  "admission") {
  auto sc = ocr_scope(source_kind::ocr_monkey, {"a"});
  sc.sources[0].max_image_bytes = 10;
  auto gw = spawn_gateway(sc);
  auto gif = ocr(gw, "GIF89a....");
  CHECK(code_of(gif->error) == error_code::invalid_request);
  auto big = ocr(gw, png + "more bytes");
  CHECK(code_of(big->error) == error_code::invalid_request);
  CHECK(detail_of(big->error)->message.find("MAX_IMAGE_BYTES=10")
        != std::string::npos);
  auto chat_gw = spawn_gateway(test_scope({"c"}));
  CHECK(code_of(ocr(chat_gw, png)->error) == error_code::invalid_request);
  CHECK(fake->calls().empty());
  CHECK(source(status(gw), "a").limiter.acquired == 0);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr: cancellation and the deadline settle 0 (S6)") {
  fake->script("a", {fake_step::never()});
  auto sc = ocr_scope(source_kind::ocr_vision, {"a"});
  sc.call_deadline_s = 5;
  auto gw = spawn_gateway(sc);
  ocr_request req;
  req.image = png;
  req.call_id = "ocr-1";
  auto cancelled = start_side<ocr_response>(gw, atom::ocr_v, req);
  sched.run();
  caf::anon_send(gw, atom::cancel_v, std::string{"ocr-1"});
  sched.run();
  REQUIRE(cancelled->answers == 1);
  CHECK(code_of(cancelled->error) == error_code::cancelled);
  auto late = ocr(gw, png);
  CHECK(code_of(late->error) == error_code::call_deadline_exceeded);
  CHECK(fake->calls().size() == 2);
  CHECK(fake->calls()[0].cancelled);
  CHECK(fake->calls()[1].cancelled);
  check_settled_zero(gw);
  CHECK(source(status(gw), "a").limiter.acquired == 2);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr: each attempt writes a row with its operation, "
                  "settled 0") {
  fake->script("a", {fake_step::http(503, outcome::transient)});
  fake->script("b", {fake_step::ok("the text"), fake_step::ok(
                      R"({"markdown": "# T", "blocks": []})")});
  auto sink = std::make_shared<memory_sink>();
  gateway_options opts;
  opts.telemetry = spawn_telemetry(sys, sink);
  auto sc = ocr_scope(source_kind::ocr_vision, {"a", "b"});
  sc.selector = selector_policy::priority;
  sc.sources[1].priority = 1;
  sc.backoff_base_s = 0.01;
  auto gw = spawn_gateway(sc, 42, opts);
  auto text = ocr(gw, png);
  REQUIRE(text->response);
  auto layout = ocr(gw, png, true);
  REQUIRE(layout->response);
  settle();
  // a (first by priority) fails twice, then b answers: per call.
  std::vector<std::string> rows;
  for (auto& r : sink->attempts) {
    rows.push_back(r.source + " " + r.outcome + " " + r.operation + " "
                   + std::to_string(r.attempt));
    CHECK(r.settled_tokens == 0);
    CHECK(r.call_id
          == (r.operation == "ocr_text" ? text : layout)->response->call_id);
  }
  CHECK(rows
        == std::vector<std::string>{
          "a transient ocr_text 1", "a transient ocr_text 2", "b ok ocr_text 3",
          "a transient ocr_layout 1", "a transient ocr_layout 2",
          "b ok ocr_layout 3"});
  CHECK(sink->attempts[0].http_status == 503);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "ocr: a call pinned to one source retries there and never "
                  "runs on another, an unknown pin is invalid_request") {
  fake->script("a", {fake_step::ok("from a", 0, 0)});
  fake->script("b", {fake_step::transient("http_503"),
                     fake_step::ok("from b", 0, 0)});
  auto sc = ocr_scope(source_kind::ocr_vision, {"a", "b"});
  sc.backoff_base_s = 0.01;
  auto gw = spawn_gateway(sc);
  ocr_request req;
  req.image = png;
  req.source = "b";
  auto out = start_side<ocr_response>(gw, atom::ocr_v, req);
  run_until(out);
  REQUIRE(out->response);
  CHECK(out->response->text == "from b");
  CHECK(out->response->source == "b");
  CHECK(fake->count("a") == 0);
  CHECK(fake->count("b") == 2);
  req.source = "zz";
  auto bad = start_side<ocr_response>(gw, atom::ocr_v, req);
  run_until(bad);
  REQUIRE(bad->error);
  CHECK(code_of(bad->error) == error_code::invalid_request);
  CHECK(describe(bad->error).find("source 'zz' is not in scope OCR")
        != std::string::npos);
  CHECK(fake->calls().size() == 2);
}

TEST_CASE_FIXTURE(ocr_fixture,
                  "client: a cancel right after ocr_async reaches the call") {
  fake->script("a", {fake_step::never()});
  auto gw = spawn_gateway(ocr_scope(source_kind::ocr_vision, {"a"}));
  client cl{sys, gw};
  ocr_request req;
  req.image = png;
  req.call_id = "ocr-1";
  auto pending = cl.ocr_async(req);
  cl.cancel("ocr-1"); // before anything has run: it used to overtake
  check_cancelled(pending);
  check_settled_zero(gw);
}
