#include "transport/chat_codec.hpp"

#include "messages/errors.hpp"

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace pgw;
namespace json = boost::json;

namespace {

provider_profile openai_profile() {
  provider_profile p;
  p.name = "openai";
  p.effort_field = "reasoning_effort";
  p.effort_values = {{"none", "\"none\""},
                     {"low", "\"low\""},
                     {"medium", "\"medium\""},
                     {"high", "\"high\""}};
  p.max_tokens_field = "max_completion_tokens";
  p.stream_usage = true;
  return p;
}

provider_profile generic_profile() {
  provider_profile p;
  p.name = "generic";
  p.effort_field = "reasoning_effort";
  p.effort_values = {
    {"low", "\"low\""}, {"medium", "\"medium\""}, {"high", "\"high\""}};
  p.max_tokens_field = "max_tokens";
  return p;
}

source_config make_source(provider_profile profile = generic_profile()) {
  source_config s;
  s.scope = "LLM";
  s.provider = profile.name;
  s.name = "a";
  s.base_url = "http://127.0.0.1:9/v1";
  s.model = "model-a";
  s.profile = std::move(profile);
  return s;
}

chat_request hello() {
  chat_request r;
  r.messages.push_back({"user", "hello", {}});
  return r;
}

/// Builds the body and parses it back.
json::object body_of(const chat_request& req, const source_config& src,
                     bool stream) {
  auto text = build_chat_body(req, src, stream);
  REQUIRE(text);
  json::error_code ec;
  auto v = json::parse(*text, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(v.is_object());
  return v.as_object();
}

/// The `invalid_request` message of `err`, or "" when it is something else.
std::string invalid_message(const caf::error& err) {
  auto code = code_of(err);
  if (!code || *code != error_code::invalid_request)
    return "";
  auto detail = detail_of(err);
  return detail ? detail->message : "";
}

sse_event data(std::string text) {
  return sse_event{"", std::move(text)};
}

std::string content_chunk(const std::string& text) {
  return R"({"id":"c1","object":"chat.completion.chunk","model":"m-up","choices":[{"index":0,"delta":{"content":)"
         + json::serialize(json::value(text)) + R"(},"finish_reason":null}]})";
}

const std::string role_chunk
  = R"({"id":"c1","model":"m-up","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null})";
const std::string finish_chunk
  = R"({"id":"c1","model":"m-up","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null})";
const std::string usage_chunk
  = R"({"id":"c1","model":"m-up","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}})";

} // namespace

// -- build_chat_body ------------------------------------------------------------

TEST_CASE("chat body: the basic fields") {
  auto req = hello();
  req.temperature = 0.5;
  req.top_p = 0.25;
  req.max_tokens = 256;
  req.stop = {"END", "\n\n"};
  auto body = body_of(req, make_source(), false);
  CHECK(body.at("model") == "model-a");
  auto& msgs = body.at("messages").as_array();
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].at("role") == "user");
  CHECK(msgs[0].at("content") == "hello");
  CHECK(body.at("temperature").to_number<double>() == 0.5);
  CHECK(body.at("top_p").to_number<double>() == 0.25);
  CHECK(body.at("max_tokens") == 256);
  CHECK_FALSE(body.contains("max_completion_tokens"));
  CHECK(body.at("stop") == json::array{"END", "\n\n"});
  CHECK(body.at("stream") == false);
  CHECK_FALSE(body.contains("stream_options"));
  CHECK_FALSE(body.contains("reasoning_effort"));
}

TEST_CASE("chat body: unset optionals are not sent") {
  auto body = body_of(hello(), make_source(), false);
  for (const char* key : {"temperature", "top_p", "max_tokens", "stop",
                          "reasoning_effort", "stream_options"})
    CHECK_MESSAGE(!body.contains(key), key);
  CHECK(body.size() == 3); // model, messages, stream
}

TEST_CASE("chat body: content parts and several messages") {
  chat_request req;
  req.messages.push_back({"system", "be brief", {}});
  chat_message user;
  user.role = "user";
  user.content = "ignored when parts are given";
  user.parts.push_back({"text", "what is this?", ""});
  user.parts.push_back({"image_url", "", "data:image/png;base64,AAAA"});
  req.messages.push_back(user);
  req.messages.push_back({"assistant", "a cat", {}});
  auto body = body_of(req, make_source(), false);
  auto& msgs = body.at("messages").as_array();
  REQUIRE(msgs.size() == 3);
  CHECK(msgs[0].at("role") == "system");
  CHECK(msgs[0].at("content") == "be brief");
  auto expected = json::parse(
    R"([{"type":"text","text":"what is this?"},
        {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}])");
  CHECK(msgs[1].at("content") == expected);
  CHECK(msgs[2].at("role") == "assistant");
}

TEST_CASE("chat body: a message's and a part's other members and an image's detail are passed through") {
  chat_request req;
  chat_message sys{"system", "s", {}};
  sys.extra = R"({"cache_control":{"type":"ephemeral"},"role":"not ours"})";
  req.messages.push_back(sys);
  chat_message user{"user", "", {}};
  user.parts.push_back({"text", "look", ""});
  user.parts[0].extra = R"({"cache_control":{"type":"ephemeral"}})";
  user.parts.push_back({"image_url", "", "https://h/a.png"});
  user.parts[1].detail = "low";
  req.messages.push_back(user);
  chat_message prefix{"assistant", "Sure,", {}};
  prefix.extra = R"({"prefix":true})";
  req.messages.push_back(prefix);
  REQUIRE_FALSE(check_request(req));
  auto body = body_of(req, make_source(), false);
  auto& msgs = body.at("messages").as_array();
  REQUIRE(msgs.size() == 3);
  CHECK(msgs[0].at("cache_control").at("type") == "ephemeral");
  CHECK(msgs[0].at("role") == "system"); // pgw's own members win
  CHECK(msgs[1].at("content").at(0).at("cache_control").at("type")
        == "ephemeral");
  CHECK(msgs[1].at("content").at(1)
        == json::parse(R"({"type":"image_url",
                           "image_url":{"url":"https://h/a.png","detail":"low"}})"));
  CHECK(msgs[2].at("prefix") == true);
  // What is passed through must be a JSON object.
  req.messages[2].extra = "[1]";
  auto err = check_request(req);
  CHECK(code_of(err) == error_code::invalid_request);
  CHECK(invalid_message(err) == "messages[2].extra: must be a JSON object's text");
}

TEST_CASE("chat body: text with quotes and control characters stays valid JSON") {
  chat_request req;
  req.messages.push_back({"user", "say \"hi\"\n\t\\ \x01 \xE2\x82\xAC", {}});
  auto body = body_of(req, make_source(), false);
  CHECK(body.at("messages").as_array()[0].at("content")
        == "say \"hi\"\n\t\\ \x01 \xE2\x82\xAC");
}

TEST_CASE("chat body: the token limit goes under the profile's field") {
  auto req = hello();
  req.max_tokens = 100;
  auto body = body_of(req, make_source(openai_profile()), false);
  CHECK(body.at("max_completion_tokens") == 100);
  CHECK_FALSE(body.contains("max_tokens"));
}

TEST_CASE("chat body: stream_options.include_usage") {
  SUBCASE("streaming with a profile that asks for usage") {
    auto body = body_of(hello(), make_source(), true);
    CHECK(body.at("stream") == true);
    CHECK(body.at("stream_options") == json::object{{"include_usage", true}});
  }
  SUBCASE("streaming with a profile that does not") {
    auto src = make_source();
    src.profile.stream_usage = false;
    auto body = body_of(hello(), src, true);
    CHECK(body.at("stream") == true);
    CHECK_FALSE(body.contains("stream_options"));
  }
  SUBCASE("not streaming: never, not even from the overlay") {
    auto src = make_source();
    src.overlay = R"({"stream_options":{"include_usage":true}})";
    auto body = body_of(hello(), src, false);
    CHECK_FALSE(body.contains("stream_options"));
  }
}

TEST_CASE("chat body: reasoning effort mappings") {
  SUBCASE("openai-like top-level field") {
    auto req = hello();
    req.reasoning_effort = "high";
    auto body = body_of(req, make_source(openai_profile()), false);
    CHECK(body.at("reasoning_effort") == "high");
  }
  SUBCASE("openai sends none") {
    auto req = hello();
    req.reasoning_effort = "none";
    auto body = body_of(req, make_source(openai_profile()), false);
    CHECK(body.at("reasoning_effort") == "none");
  }
  SUBCASE("a dotted path becomes nested objects") {
    auto p = generic_profile();
    p.name = "openrouter";
    p.effort_field = "reasoning.effort";
    auto req = hello();
    req.reasoning_effort = "medium";
    auto body = body_of(req, make_source(p), false);
    CHECK(body.at("reasoning") == json::object{{"effort", "medium"}});
    CHECK_FALSE(body.contains("reasoning.effort"));
  }
  SUBCASE("a dotted path merges with an overlay's object") {
    auto p = generic_profile();
    p.effort_field = "reasoning.effort";
    auto src = make_source(p);
    src.overlay = R"({"reasoning":{"exclude":true}})";
    auto req = hello();
    req.reasoning_effort = "low";
    auto body = body_of(req, src, false);
    CHECK(body.at("reasoning")
          == json::object{{"effort", "low"}, {"exclude", true}});
  }
  SUBCASE("a boolean mapping: none → false") {
    provider_profile p;
    p.name = "qwen";
    p.effort_field = "enable_thinking";
    p.effort_values = {
      {"none", "false"}, {"low", "true"}, {"medium", "true"}, {"high", "true"}};
    auto req = hello();
    req.reasoning_effort = "none";
    auto off = body_of(req, make_source(p), false);
    CHECK(off.at("enable_thinking") == false);
    req.reasoning_effort = "low";
    auto on = body_of(req, make_source(p), false);
    CHECK(on.at("enable_thinking") == true);
  }
  SUBCASE("a profile without an effort field sends nothing") {
    provider_profile p;
    p.name = "deepseek";
    auto req = hello();
    req.reasoning_effort = "high";
    auto body = body_of(req, make_source(p), false);
    CHECK_FALSE(body.contains("reasoning_effort"));
    CHECK(body.size() == 3);
  }
  SUBCASE("a value missing from the map sends nothing") {
    auto req = hello();
    req.reasoning_effort = "none";
    auto body = body_of(req, make_source(generic_profile()), false);
    CHECK_FALSE(body.contains("reasoning_effort"));
  }
  SUBCASE("no effort requested sends nothing") {
    auto body = body_of(hello(), make_source(openai_profile()), false);
    CHECK_FALSE(body.contains("reasoning_effort"));
  }
  SUBCASE("a table value that is not JSON text is sent as a string") {
    auto p = generic_profile();
    p.effort_values["high"] = "high";
    auto req = hello();
    req.reasoning_effort = "high";
    auto body = body_of(req, make_source(p), false);
    CHECK(body.at("reasoning_effort") == "high");
  }
}

TEST_CASE("chat body: overlay deep merge, then extra_body") {
  auto src = make_source();
  src.overlay = R"({"temperature":0.1,
                    "top_k":20,
                    "chat_template_kwargs":{"enable_thinking":false,"x":1},
                    "response_format":{"type":"json_object"}})";
  auto req = hello();
  req.temperature = 0.7;
  SUBCASE("the overlay replaces scalars and adds fields") {
    auto body = body_of(req, src, false);
    CHECK(body.at("temperature").to_number<double>() == 0.1);
    CHECK(body.at("top_k") == 20);
    CHECK(body.at("chat_template_kwargs")
          == json::object{{"enable_thinking", false}, {"x", 1}});
  }
  SUBCASE("extra_body is applied after the overlay, merging objects") {
    req.extra_body = R"({"top_k":5,
                         "chat_template_kwargs":{"enable_thinking":true},
                         "response_format":"text",
                         "seed":7})";
    auto body = body_of(req, src, false);
    CHECK(body.at("top_k") == 5);
    CHECK(body.at("chat_template_kwargs")
          == json::object{{"enable_thinking", true}, {"x", 1}});
    CHECK(body.at("response_format") == "text");
    CHECK(body.at("seed") == 7);
    CHECK(body.at("temperature").to_number<double>() == 0.1);
  }
  SUBCASE("an empty overlay changes nothing") {
    src.overlay = "";
    auto body = body_of(req, src, false);
    CHECK(body.at("temperature").to_number<double>() == 0.7);
  }
}

TEST_CASE("chat body: model, stream and messages are always ours") {
  auto src = make_source();
  src.overlay
    = R"({"model":"other","stream":true,"messages":[],"user":"overlay"})";
  auto req = hello();
  req.extra_body = R"({"model":"third","stream":true,"messages":"x"})";
  auto body = body_of(req, src, false);
  CHECK(body.at("model") == "model-a");
  CHECK(body.at("stream") == false);
  REQUIRE(body.at("messages").is_array());
  CHECK(body.at("messages").as_array().size() == 1);
  CHECK(body.at("user") == "overlay");
}

TEST_CASE("chat body: a bad extra_body or overlay is an error") {
  auto req = hello();
  SUBCASE("extra_body not an object") {
    for (const char* bad : {"[1,2]", "\"text\"", "42", "{not json"}) {
      CAPTURE(bad);
      req.extra_body = bad;
      auto got = build_chat_body(req, make_source(), false);
      REQUIRE_FALSE(got);
      auto msg = invalid_message(got.error());
      CHECK(msg.find("extra_body") == 0);
    }
  }
  SUBCASE("overlay not an object is a config error naming OVERLAY") {
    auto src = make_source();
    src.overlay = "[]";
    auto got = build_chat_body(req, src, false);
    REQUIRE_FALSE(got);
    REQUIRE(code_of(got.error()));
    CHECK(*code_of(got.error()) == error_code::invalid_config);
    REQUIRE(detail_of(got.error()));
    CHECK(detail_of(got.error())->message.find("OVERLAY") != std::string::npos);
  }
}

// -- check_request --------------------------------------------------------------

TEST_CASE("check_request: a good request passes") {
  auto req = hello();
  req.temperature = 2.0;
  req.top_p = 0.0;
  req.max_tokens = 1;
  req.deadline_s = 0.5;
  req.reasoning_effort = "medium";
  req.extra_body = R"({"seed":1})";
  for (const char* role : {"system", "user", "assistant", "tool", "developer"})
    req.messages.push_back({role, "x", {}});
  CHECK_FALSE(check_request(req));
}

TEST_CASE("check_request: each rule names its field") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::string, chat_request>> cases = [&] {
    std::vector<std::pair<std::string, chat_request>> v;
    auto add = [&](std::string field, auto mutate) {
      auto r = hello();
      mutate(r);
      v.emplace_back(std::move(field), std::move(r));
    };
    add("messages", [](chat_request& r) { r.messages.clear(); });
    add("messages[1].role", [](chat_request& r) {
      r.messages.push_back({"robot", "x", {}});
    });
    add("messages[0].role", [](chat_request& r) { r.messages[0].role = ""; });
    add("messages[0].parts[0].type", [](chat_request& r) {
      r.messages[0].parts.push_back({"audio", "", ""});
    });
    add("temperature", [](chat_request& r) { r.temperature = -0.1; });
    add("temperature", [](chat_request& r) { r.temperature = 2.01; });
    add("temperature", [nan](chat_request& r) { r.temperature = nan; });
    add("top_p", [](chat_request& r) { r.top_p = 1.5; });
    add("top_p", [](chat_request& r) { r.top_p = -1; });
    add("top_p", [nan](chat_request& r) { r.top_p = nan; });
    add("max_tokens", [](chat_request& r) { r.max_tokens = 0; });
    add("max_tokens", [](chat_request& r) { r.max_tokens = -5; });
    add("deadline_s", [](chat_request& r) { r.deadline_s = 0.0; });
    add("deadline_s", [](chat_request& r) { r.deadline_s = -1.0; });
    add("deadline_s", [inf](chat_request& r) { r.deadline_s = inf; });
    add("deadline_s", [nan](chat_request& r) { r.deadline_s = nan; });
    add("reasoning_effort",
        [](chat_request& r) { r.reasoning_effort = "max"; });
    add("reasoning_effort",
        [](chat_request& r) { r.reasoning_effort = "HIGH"; });
    add("extra_body", [](chat_request& r) { r.extra_body = "[1]"; });
    add("extra_body", [](chat_request& r) { r.extra_body = "{oops"; });
    return v;
  }();
  for (auto& [field, req] : cases) {
    CAPTURE(field);
    auto err = check_request(req);
    REQUIRE(err);
    auto msg = invalid_message(err);
    CAPTURE(msg);
    CHECK(msg.rfind(field + ":", 0) == 0);
  }
}

// -- decode_chat_completion -----------------------------------------------------

TEST_CASE("decode: a complete answer") {
  attempt_result out;
  out.http_status = 200;
  decode_chat_completion(
    R"({"id":"x","object":"chat.completion","model":"m-up",
        "choices":[{"index":0,"message":{"role":"assistant","content":"Hi!",
                    "reasoning_content":"think"},"finish_reason":"stop"}],
        "usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}})",
    out);
  CHECK(out.kind == outcome::ok);
  CHECK(out.reason == "ok");
  CHECK(out.content == "Hi!");
  CHECK(out.reasoning_content == "think");
  CHECK(out.finish_reason == "stop");
  CHECK(out.model == "m-up");
  CHECK(out.usage_reported);
  CHECK(out.prompt_tokens == 10);
  CHECK(out.completion_tokens == 3);
  CHECK(out.http_status == 200);
}

TEST_CASE("decode: answer variants") {
  attempt_result out;
  SUBCASE("usage absent") {
    decode_chat_completion(
      R"({"choices":[{"message":{"content":"a"},"finish_reason":"stop"}]})",
      out);
    CHECK(out.kind == outcome::ok);
    CHECK_FALSE(out.usage_reported);
    CHECK(out.prompt_tokens == 0);
  }
  SUBCASE("usage null") {
    decode_chat_completion(
      R"({"choices":[{"message":{"content":"a"}}],"usage":null})", out);
    CHECK(out.kind == outcome::ok);
    CHECK_FALSE(out.usage_reported);
  }
  SUBCASE("one count alone is no usage: the other is unknown") {
    for (auto usage : {R"({"prompt_tokens":10})",
                       R"({"completion_tokens":3,"total_tokens":3})"}) {
      CAPTURE(usage);
      attempt_result one;
      decode_chat_completion(
        std::string{R"({"choices":[{"message":{"content":"a"}}],"usage":)"}
          + usage + "}",
        one);
      CHECK(one.kind == outcome::ok);
      CHECK_FALSE(one.usage_reported);
      CHECK_FALSE(one.usage_rejected);
    }
  }
  SUBCASE("reasoning under `reasoning`") {
    decode_chat_completion(
      R"({"choices":[{"message":{"content":"a","reasoning":"r"}}]})", out);
    CHECK(out.reasoning_content == "r");
  }
  SUBCASE("reasoning only is an answer") {
    decode_chat_completion(
      R"({"choices":[{"message":{"content":null,"reasoning_content":"r"},"finish_reason":"length"}]})",
      out);
    CHECK(out.kind == outcome::ok);
    CHECK(out.content.empty());
    CHECK(out.finish_reason == "length");
  }
  SUBCASE("content null with tool calls") {
    decode_chat_completion(
      R"({"choices":[{"message":{"role":"assistant","content":null,
          "tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},
          "finish_reason":"tool_calls"}]})",
      out);
    CHECK(out.kind == outcome::ok);
    CHECK(out.content.empty());
    CHECK(out.finish_reason == "tool_calls");
  }
  SUBCASE("content given as parts") {
    decode_chat_completion(
      R"({"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]})",
      out);
    CHECK(out.kind == outcome::ok);
    CHECK(out.content == "ab");
  }
}

TEST_CASE("decode: unusable bodies are result_invalid") {
  struct row {
    const char* body;
    const char* reason;
  };
  const row rows[] = {
    {R"({"choices":[{"message":{"content":""},"finish_reason":"stop"}]})",
     "empty_answer"},
    {R"({"choices":[{"message":{"content":null,"tool_calls":[]}}]})",
     "empty_answer"},
    {R"({"choices":[{"message":{"role":"assistant"}}]})", "empty_answer"},
    {"", "malformed_body"},
    {"not json", "malformed_body"},
    {"<html>502</html>", "malformed_body"},
    {R"({"choices":[{"message":{"content":"a"}}])", "malformed_body"},
    {"[]", "malformed_body"},
    {R"({"id":"x"})", "malformed_body"},
    {R"({"choices":[]})", "malformed_body"},
    {R"({"choices":{}})", "malformed_body"},
    {R"({"choices":[{"finish_reason":"stop"}]})", "malformed_body"},
    {R"({"choices":[{"message":"hi"}]})", "malformed_body"},
  };
  for (auto& r : rows) {
    CAPTURE(r.body);
    attempt_result out;
    decode_chat_completion(r.body, out);
    CHECK(out.kind == outcome::result_invalid);
    CHECK(out.reason == r.reason);
  }
}

TEST_CASE("decode: an error body in a 200 is classified") {
  attempt_result out;
  decode_chat_completion(
    R"({"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}})",
    out);
  CHECK(out.kind == outcome::rate_limited);
  CHECK(out.reason == "stream_error:rate_limit_exceeded");
  CHECK(out.error_message == "slow down");
  attempt_result out2;
  decode_chat_completion(R"({"error":{"message":"boom","code":500}})", out2);
  CHECK(out2.kind == outcome::transient);
}

// -- stream_accumulator ---------------------------------------------------------

TEST_CASE("stream: a full stream") {
  stream_accumulator acc;
  using step = stream_accumulator::step;
  CHECK(acc.on_event(data(role_chunk)) == step::more);
  CHECK_FALSE(acc.got_first_token());
  CHECK(acc.on_event(data(content_chunk("Hel"))) == step::first_token);
  CHECK(acc.got_first_token());
  CHECK(acc.on_event(data(content_chunk("lo, "))) == step::more);
  CHECK(acc.on_event(data(content_chunk("wörld"))) == step::more);
  CHECK(acc.on_event(data(content_chunk(""))) == step::more);
  CHECK(acc.on_event(data(content_chunk("!\n"))) == step::more);
  CHECK_FALSE(acc.finished());
  CHECK(acc.on_event(data(finish_chunk)) == step::more);
  CHECK(acc.finished());
  CHECK(acc.on_event(data(usage_chunk)) == step::more);
  CHECK(acc.on_event(data("[DONE]")) == step::done);
  attempt_result out;
  out.http_status = 200;
  acc.finish(out);
  CHECK(out.kind == outcome::ok);
  CHECK(out.reason == "ok");
  CHECK(out.content == "Hello, wörld!\n");
  CHECK(out.finish_reason == "stop");
  CHECK(out.model == "m-up");
  CHECK(out.usage_reported);
  CHECK(out.prompt_tokens == 12);
  CHECK(out.completion_tokens == 7);
  CHECK(out.malformed_events == 0);
  CHECK(out.http_status == 200);
}

TEST_CASE("stream: content is concatenated exactly in order") {
  stream_accumulator acc;
  std::string expected;
  for (int i = 0; i < 200; ++i) {
    auto piece = std::to_string(i) + (i % 7 == 0 ? " \"q\"\n" : ",");
    expected += piece;
    acc.on_event(data(content_chunk(piece)));
  }
  acc.on_event(data(finish_chunk));
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::ok);
  CHECK(out.content == expected);
}

TEST_CASE("stream: what counts as the first token") {
  using step = stream_accumulator::step;
  SUBCASE("a reasoning delta") {
    stream_accumulator acc;
    CHECK(acc.on_event(data(role_chunk)) == step::more);
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]})"))
          == step::first_token);
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":0,"delta":{"reasoning":" more"}}]})"))
          == step::more);
    CHECK(acc.on_event(data(content_chunk("ok"))) == step::more);
    acc.on_event(data(finish_chunk));
    attempt_result out;
    acc.finish(out);
    CHECK(out.kind == outcome::ok);
    CHECK(out.reasoning_content == "hmm more");
    CHECK(out.content == "ok");
  }
  SUBCASE("a tool call delta, and a tool-call-only answer is complete") {
    stream_accumulator acc;
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]})"))
          == step::first_token);
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]})"))
          == step::more);
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})"))
          == step::more);
    attempt_result out;
    acc.finish(out);
    CHECK(out.kind == outcome::ok);
    CHECK(out.content.empty());
    CHECK(out.finish_reason == "tool_calls");
  }
  SUBCASE("empty deltas, empty tool_calls and usage chunks are not") {
    stream_accumulator acc;
    CHECK(acc.on_event(data(R"({"choices":[{"index":0,"delta":{}}]})"))
          == step::more);
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":0,"delta":{"content":null,"tool_calls":[]}}]})"))
          == step::more);
    CHECK(acc.on_event(data(usage_chunk)) == step::more);
    CHECK_FALSE(acc.got_first_token());
  }
  SUBCASE("another choice index is ignored") {
    stream_accumulator acc;
    CHECK(acc.on_event(data(
            R"({"choices":[{"index":1,"delta":{"content":"other"}}]})"))
          == step::more);
    CHECK_FALSE(acc.got_first_token());
  }
}

TEST_CASE("stream: malformed events are skipped and counted") {
  stream_accumulator acc;
  using step = stream_accumulator::step;
  CHECK(acc.on_event(data(content_chunk("a"))) == step::first_token);
  CHECK(acc.on_event(data("{\"choices\":[{\"delta\":{\"content\":\"trunc"))
        == step::more);
  CHECK(acc.on_event(data("[1,2]")) == step::more);
  CHECK(acc.on_event(data("")) == step::more);
  CHECK(acc.on_event(data(R"({"choices":"nope"})")) == step::more);
  CHECK(acc.malformed() == 4);
  CHECK(acc.on_event(data(content_chunk("b"))) == step::more);
  CHECK(acc.on_event(data(finish_chunk)) == step::more);
  CHECK(acc.on_event(data(" [DONE] ")) == step::done);
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::ok);
  CHECK(out.content == "ab");
  CHECK(out.malformed_events == 4);
}

TEST_CASE("stream: an error event ends the attempt and wins") {
  stream_accumulator acc;
  using step = stream_accumulator::step;
  CHECK(acc.on_event(data(content_chunk("partial"))) == step::first_token);
  CHECK(acc.on_event(sse_event{
          "error", R"({"error":{"message":"Rate limit","code":"rate_limit_exceeded"}})"})
        == step::error);
  // Anything after it changes nothing.
  CHECK(acc.on_event(data(finish_chunk)) == step::error);
  CHECK_FALSE(acc.finished());
  attempt_result out;
  out.http_status = 200;
  acc.finish(out);
  CHECK(out.kind == outcome::rate_limited);
  CHECK(out.reason == "stream_error:rate_limit_exceeded");
  CHECK(out.error_code == "rate_limit_exceeded");
  CHECK(out.error_message == "Rate limit");
  CHECK(out.http_status == 200);
  CHECK(out.content == "partial");
}

TEST_CASE("stream: an event named error is an error whatever its data") {
  using step = stream_accumulator::step;
  SUBCASE("an object without an error member") {
    stream_accumulator acc;
    CHECK(acc.on_event(sse_event{
            "error", R"({"type":"overloaded_error","message":"Overloaded"})"})
          == step::error);
    attempt_result out;
    acc.finish(out);
    CHECK(out.kind == outcome::transient);
    CHECK(out.reason == "stream_error:overloaded_error");
    CHECK(out.error_message == "Overloaded");
    CHECK(acc.malformed() == 0);
  }
  SUBCASE("plain text") {
    stream_accumulator acc;
    CHECK(acc.on_event(sse_event{"error", "upstream went away"}) == step::error);
    attempt_result out;
    acc.finish(out);
    CHECK(out.kind == outcome::transient);
    CHECK(out.error_message == "upstream went away");
  }
}

TEST_CASE("stream: an error after finish_reason still wins") {
  stream_accumulator acc;
  acc.on_event(data(content_chunk("x")));
  acc.on_event(data(finish_chunk));
  CHECK(acc.on_event(data(R"({"error":{"message":"x","type":"server_error"}})"))
        == stream_accumulator::step::error);
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::transient);
  CHECK(out.reason == "stream_error:server_error");
}

TEST_CASE("stream: EOF without finish_reason is a stream cut") {
  stream_accumulator acc;
  acc.on_event(data(role_chunk));
  acc.on_event(data(content_chunk("The answer is")));
  acc.on_event(data(content_chunk(" 42")));
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::transient);
  CHECK(out.reason == "stream_cut");
  CHECK(out.content == "The answer is 42"); // kept for telemetry, not a success

  SUBCASE("even with [DONE] but no finish_reason") {
    stream_accumulator a2;
    a2.on_event(data(content_chunk("x")));
    CHECK(a2.on_event(data("[DONE]")) == stream_accumulator::step::done);
    attempt_result o2;
    a2.finish(o2);
    CHECK(o2.kind == outcome::transient);
    CHECK(o2.reason == "stream_cut");
  }
  SUBCASE("nothing at all") {
    stream_accumulator a3;
    attempt_result o3;
    a3.finish(o3);
    CHECK(o3.kind == outcome::transient);
    CHECK(o3.reason == "stream_cut");
  }
}

TEST_CASE("stream: finish_reason without [DONE] completes") {
  stream_accumulator acc;
  acc.on_event(data(content_chunk("done")));
  acc.on_event(data(
    R"({"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]})"));
  CHECK(acc.finished());
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::ok);
  CHECK(out.content == "done!");
  CHECK(out.finish_reason == "length");
  CHECK_FALSE(out.usage_reported);
}

TEST_CASE("stream: a complete stream without content is an empty answer") {
  stream_accumulator acc;
  acc.on_event(data(role_chunk));
  acc.on_event(data(finish_chunk));
  acc.on_event(data(usage_chunk));
  CHECK(acc.on_event(data("[DONE]")) == stream_accumulator::step::done);
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::result_invalid);
  CHECK(out.reason == "empty_answer");
  CHECK(out.error_message.empty());
  CHECK(out.usage_reported);
}

TEST_CASE("stream: an answer empty because its events could not be read says so") {
  // The content came in an event that is not JSON (invalid UTF-8).
  stream_accumulator acc;
  acc.on_event(data("{\"choices\":[{\"index\":0,\"delta\":{\"content\":"
                    "\"ok \xff\xfe bad\"}}]}"));
  acc.on_event(data(finish_chunk));
  acc.on_event(data("[DONE]"));
  attempt_result out;
  acc.finish(out);
  CHECK(out.reason == "empty_answer");
  CHECK(out.error_message == "1 stream event(s) were not valid JSON");
}

TEST_CASE("stream: the SSE parser and the accumulator together") {
  std::string wire = ": OPENROUTER PROCESSING\n\n"
                     "data: " + role_chunk + "\n\n"
                     "data: " + content_chunk("Hi") + "\r\n\r\n"
                     "data: " + content_chunk(" there") + "\n\n"
                     "data: " + finish_chunk + "\n\n"
                     "data: " + usage_chunk + "\n\n"
                     "data: [DONE]\n\n";
  sse_parser parser;
  stream_accumulator acc;
  std::vector<sse_event> events;
  int first_tokens = 0;
  bool done = false;
  for (char c : wire) {
    parser.feed(&c, 1, events);
    for (auto& ev : events) {
      auto s = acc.on_event(ev);
      first_tokens += s == stream_accumulator::step::first_token;
      done = done || s == stream_accumulator::step::done;
    }
    events.clear();
  }
  CHECK(done);
  CHECK(first_tokens == 1);
  CHECK(parser.comments() == 1);
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::ok);
  CHECK(out.content == "Hi there");
  CHECK(out.completion_tokens == 7);
}
