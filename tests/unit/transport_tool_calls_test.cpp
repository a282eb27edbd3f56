// Tool calls: carried in requests, normalised in answers and stream deltas.

#include "transport/chat_codec.hpp"
#include "transport/tool_calls.hpp"

#include "config/scrub.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace pgw;
namespace json = boost::json;

namespace {

using step = stream_accumulator::step;

/// A stream chunk whose delta carries `tool_calls` (JSON text).
sse_event tool_delta(const std::string& calls,
                     const std::string& finish = "null") {
  return sse_event{"", R"({"choices":[{"index":0,"delta":{"tool_calls":)" + calls
                         + R"(},"finish_reason":)" + finish + "}]}"};
}

sse_event finish_chunk(const std::string& reason) {
  return sse_event{"", R"({"choices":[{"index":0,"delta":{},"finish_reason":")"
                         + reason + "\"}]}"};
}

attempt_result run(const std::vector<sse_event>& events) {
  stream_accumulator acc;
  for (auto& ev : events)
    acc.on_event(ev);
  attempt_result out;
  acc.finish(out);
  return out;
}

source_config plain_source() {
  source_config s;
  s.scope = "LLM";
  s.name = "a";
  s.model = "m";
  return s;
}

} // namespace

TEST_CASE("tool calls: streamed deltas without index are assembled by id") {
  auto out = run({
    tool_delta(R"([{"id":"c1","type":"function","function":{"name":"get_weather","arguments":""}}])"),
    tool_delta(R"([{"function":{"arguments":"{\"city\":"}}])"),
    tool_delta(R"([{"function":{"arguments":"\"Paris\"}"}}])"),
    tool_delta(R"([{"id":"c2","type":"function","function":{"name":"get_time","arguments":""}}])"),
    tool_delta(R"([{"function":{"arguments":"{}"}}])"),
    finish_chunk("stop"),
    sse_event{"", "[DONE]"},
  });
  REQUIRE(out.kind == outcome::ok);
  REQUIRE(out.tool_calls.size() == 2);
  CHECK(out.tool_calls[0].id == "c1");
  CHECK(out.tool_calls[0].name == "get_weather");
  CHECK(out.tool_calls[0].arguments == R"({"city":"Paris"})");
  CHECK(out.tool_calls[1].id == "c2");
  CHECK(out.tool_calls[1].arguments == "{}");
  // The upstream said `stop`: tool calls were produced, so `tool_calls`.
  CHECK(out.finish_reason == "tool_calls");
}

TEST_CASE("tool calls: an upstream that reuses index 0 for every call gets "
          "one slot per id") {
  auto out = run({
    tool_delta(R"([{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\""}}])"),
    tool_delta(R"([{"index":0,"function":{"arguments":":1}"}}])"),
    tool_delta(R"([{"index":0,"id":"b","function":{"name":"g","arguments":"{\"y\":"}}])"),
    tool_delta(R"([{"index":0,"function":{"arguments":"2}"}}])"),
    finish_chunk("tool_calls"),
  });
  REQUIRE(out.kind == outcome::ok);
  REQUIRE(out.tool_calls.size() == 2);
  CHECK(out.tool_calls[0].arguments == R"({"x":1})");
  CHECK(out.tool_calls[1].name == "g");
  CHECK(out.tool_calls[1].arguments == R"({"y":2})");
}

TEST_CASE("tool calls: indexed deltas interleaved, object arguments, missing "
          "ids") {
  auto out = run({
    tool_delta(R"([{"index":0,"function":{"name":"f","arguments":"{\"a\":"}},)"
               R"({"index":1,"function":{"name":"g","arguments":{"b":2}}}])"),
    tool_delta(R"([{"index":0,"function":{"arguments":"1}"}}])"),
    finish_chunk("length"),
  });
  REQUIRE(out.kind == outcome::ok);
  REQUIRE(out.tool_calls.size() == 2);
  CHECK(out.tool_calls[0].id == "call_0");
  CHECK(out.tool_calls[0].arguments == R"({"a":1})");
  CHECK(out.tool_calls[1].id == "call_1");
  CHECK(out.tool_calls[1].arguments == R"({"b":2})"); // an object, as a string
  CHECK(out.finish_reason == "length"); // says more than tool_calls
}

TEST_CASE("tool calls: arguments that are not JSON make the answer invalid") {
  auto out = run({
    tool_delta(R"([{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":"}}])"),
    finish_chunk("tool_calls"),
  });
  CHECK(out.kind == outcome::result_invalid);
  CHECK(out.reason == "tool_arguments_invalid");
  CHECK(out.error_message.find("(f)") != std::string::npos);
  attempt_result nameless;
  decode_chat_completion(
    R"({"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]})",
    nameless);
  CHECK(nameless.kind == outcome::result_invalid);
  CHECK(nameless.reason == "tool_arguments_invalid");
  // The tool's name is upstream text: scrubbed in the error message.
  auto echoed = run({
    tool_delta(R"([{"index":0,"id":"a","function":{"name":"Bearer sk-live-1234567890abcdef","arguments":"{"}}])"),
    finish_chunk("tool_calls"),
  });
  CHECK(echoed.reason == "tool_arguments_invalid");
  CHECK(echoed.error_message.find("sk-live-1234567890abcdef") == std::string::npos);
  CHECK(echoed.error_message.find("[redacted]") != std::string::npos);
}

TEST_CASE("tool calls: a non-streamed answer's calls and a legacy "
          "function_call") {
  attempt_result out;
  decode_chat_completion(
    R"({"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[)"
    R"({"id":"t1","type":"function","function":{"name":"f","arguments":"{\"q\":1}"}},)"
    R"({"id":"t2","type":"function","function":{"name":"g","arguments":""}}]},)"
    R"("finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}})",
    out);
  REQUIRE(out.kind == outcome::ok);
  REQUIRE(out.tool_calls.size() == 2);
  CHECK(out.tool_calls[1].arguments == "{}");
  CHECK(out.finish_reason == "tool_calls");
  attempt_result legacy;
  decode_chat_completion(
    R"({"choices":[{"message":{"role":"assistant","function_call":{"name":"f","arguments":"{}"}},"finish_reason":"function_call"}]})",
    legacy);
  REQUIRE(legacy.kind == outcome::ok);
  REQUIRE(legacy.tool_calls.size() == 1);
  CHECK(legacy.tool_calls[0].name == "f");
  CHECK(legacy.finish_reason == "tool_calls");
}

TEST_CASE("tool calls: the request carries tools, tool messages and the "
          "other OpenAI fields") {
  chat_request req;
  chat_message user;
  user.role = "user";
  user.content = "weather?";
  chat_message assistant;
  assistant.role = "assistant";
  assistant.tool_calls.push_back({"c1", "function", "get_weather", R"({"city":"Paris"})"});
  chat_message tool;
  tool.role = "tool";
  tool.tool_call_id = "c1";
  tool.name = "get_weather";
  tool.content = "sunny";
  req.messages = {user, assistant, tool};
  req.tools = R"([{"type":"function","function":{"name":"get_weather"}}])";
  req.tool_choice = R"("auto")";
  req.response_format = R"({"type":"json_object"})";
  req.parallel_tool_calls = false;
  req.seed = 42;
  req.user = "u-1";
  req.n = 1;
  REQUIRE(!check_request(req));
  auto body = build_chat_body(req, plain_source(), false);
  REQUIRE(body);
  auto obj = json::parse(*body).as_object();
  CHECK(obj.at("tools").as_array().size() == 1);
  CHECK(obj.at("tool_choice").as_string() == "auto");
  CHECK(obj.at("response_format").at("type").as_string() == "json_object");
  CHECK(obj.at("parallel_tool_calls").as_bool() == false);
  CHECK(obj.at("seed").as_int64() == 42);
  CHECK(obj.at("user").as_string() == "u-1");
  CHECK(!obj.contains("n"));
  auto& msgs = obj.at("messages").as_array();
  auto& a = msgs[1].as_object();
  CHECK(a.at("content").is_null());
  CHECK(a.at("tool_calls").at(0).at("function").at("arguments").as_string()
        == R"({"city":"Paris"})");
  auto& t = msgs[2].as_object();
  CHECK(t.at("tool_call_id").as_string() == "c1");
  CHECK(t.at("name").as_string() == "get_weather");
}

TEST_CASE("tool calls: requests pgw cannot honour are invalid_request") {
  auto base = [] {
    chat_request r;
    chat_message m;
    m.role = "user";
    m.content = "hi";
    r.messages.push_back(m);
    return r;
  };
  auto message_of = [](const chat_request& r) {
    auto err = check_request(r);
    REQUIRE(err);
    CHECK(code_of(err) == error_code::invalid_request);
    return describe(err);
  };
  auto r = base();
  r.n = 2;
  CHECK(message_of(r).find("n: only 1 choice") != std::string::npos);
  r = base();
  r.tools = R"({"type":"function"})";
  CHECK(message_of(r).find("tools: must be a JSON array") != std::string::npos);
  r = base();
  r.tool_choice = "not json";
  CHECK(message_of(r).find("tool_choice") != std::string::npos);
  r = base();
  r.response_format = "[]";
  CHECK(message_of(r).find("response_format") != std::string::npos);
  r = base();
  chat_message assistant;
  assistant.role = "assistant";
  assistant.tool_calls.push_back({"", "function", "f", "{}"});
  r.messages.push_back(assistant);
  CHECK(message_of(r).find("messages[1].tool_calls[0]: needs an id")
        != std::string::npos);
}

TEST_CASE("live deltas: each event's addition is captured, tool-call fragments normalised") {
  stream_accumulator acc;
  // Nothing is kept before capturing is switched on.
  acc.on_event(sse_event{"", R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})"});
  CHECK(acc.take_delta().empty());
  acc.capture_deltas();
  CHECK(acc.on_event(sse_event{"", R"({"choices":[{"index":0,"delta":{"content":"Hi"}}]})"})
        == step::first_token);
  auto d = acc.take_delta();
  CHECK(d.content == "Hi");
  CHECK(acc.take_delta().empty()); // taken once
  // Two fragments of one call taken together (events relayed as one
  // delta) are one entry; the second fragment alone is a continuation.
  acc.on_event(tool_delta(R"([{"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\""}}])"));
  acc.on_event(tool_delta(R"([{"index":0,"function":{"arguments":":1"}}])"));
  d = acc.take_delta();
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].index == 0);
  CHECK(d.tool_calls[0].id == "a");
  CHECK(d.tool_calls[0].type == "function");
  CHECK(d.tool_calls[0].name == "f");
  CHECK(d.tool_calls[0].arguments == R"({"x":1)");
  acc.on_event(tool_delta(R"([{"index":0,"function":{"arguments":"}"}}])"));
  d = acc.take_delta();
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].index == 0);
  CHECK(d.tool_calls[0].id.empty()); // a continuation carries no id
  CHECK(d.tool_calls[0].arguments == "}");
  acc.on_event(tool_delta(R"([{"id":"b","function":{"name":"g","arguments":{"y":2}}}])"));
  // A fragment of another call between two of the first keeps them apart.
  acc.on_event(tool_delta(R"([{"id":"a","function":{"arguments":" "}}])"));
  d = acc.take_delta();
  REQUIRE(d.tool_calls.size() == 2);
  CHECK(d.tool_calls[0].index == 1); // a new id is a new slot
  CHECK(d.tool_calls[0].arguments == R"({"y":2})"); // always a string
  CHECK(d.tool_calls[1].index == 0);
  CHECK(d.tool_calls[1].arguments == " ");
  // Nothing after the finish_reason.
  acc.on_event(finish_chunk("stop"));
  acc.on_event(sse_event{"", R"({"choices":[{"index":0,"delta":{"content":"late"}}]})"});
  CHECK(acc.take_delta().empty());
}

TEST_CASE("live deltas: a call whose arguments stayed empty or null gets {} "
          "at the finish_reason, as the final answer does") {
  for (auto args : {R"()", R"(,"arguments":null)", R"(,"arguments":"")"}) {
    CAPTURE(args);
    stream_accumulator acc;
    acc.capture_deltas();
    std::vector<tool_call_delta> seen;
    auto take = [&] {
      for (auto& t : acc.take_delta().tool_calls)
        seen.push_back(t);
    };
    acc.on_event(tool_delta(std::string(R"([{"index":0,"id":"c1",)")
                            + R"("type":"function","function":{"name":"f1")"
                            + args + "}}]"));
    take();
    acc.on_event(tool_delta(R"([{"index":1,"id":"c2","function":)"
                            R"({"name":"f2","arguments":"{\"a\":1}"}}])"));
    take();
    acc.on_event(finish_chunk("tool_calls"));
    take();
    // What a client assembles from the deltas, per index.
    std::vector<std::string> assembled(2);
    for (auto& t : seen)
      assembled.at(static_cast<size_t>(t.index)) += t.arguments;
    CHECK(assembled[0] == "{}");
    CHECK(assembled[1] == R"({"a":1})"); // given arguments stay as they are
    attempt_result out;
    acc.finish(out);
    REQUIRE(out.tool_calls.size() == 2);
    CHECK(out.tool_calls[0].arguments == assembled[0]);
  }
  // Name and finish_reason in one event: the {} joins that call's delta.
  stream_accumulator acc;
  acc.capture_deltas();
  acc.on_event(tool_delta(R"([{"index":0,"id":"c1","function":{"name":"f"}}])",
                          "\"tool_calls\""));
  auto d = acc.take_delta();
  REQUIRE(d.tool_calls.size() == 1);
  CHECK(d.tool_calls[0].name == "f");
  CHECK(d.tool_calls[0].arguments == "{}");
}
