// The simulator's tool-call models: the shapes it streams, and pgw's
// normalisation of each.

#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/tool_calls.hpp"
#include "transport/chat_codec.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

using namespace pgw;

namespace {

attempt_result assemble(const std::string& mode) {
  stream_accumulator acc;
  for (auto& delta : sim::detail::tool_call_deltas(mode))
    acc.on_event(sse_event{"", R"({"choices":[{"index":0,"delta":)" + delta
                                 + R"(,"finish_reason":null}]})"});
  acc.on_event(sse_event{"", std::string(R"({"choices":[{"index":0,"delta":{},"finish_reason":")")
                               + sim::detail::tool_calls_finish_reason(mode) + "\"}]}"});
  attempt_result out;
  acc.finish(out);
  return out;
}

} // namespace

TEST_CASE("sim tool calls: no_index omits index, index0 reuses 0") {
  for (auto& d : sim::detail::tool_call_deltas("no_index"))
    CHECK(d.find("\"index\"") == std::string::npos);
  for (auto& d : sim::detail::tool_call_deltas("index0"))
    CHECK(d.find(R"("index":0,)") != std::string::npos);
  CHECK(std::string(sim::detail::tool_calls_finish_reason("no_index")) == "stop");
}

TEST_CASE("sim tool calls: every mode normalises to the same two calls, "
          "bad_args is invalid") {
  for (const char* mode : {"indexed", "no_index", "index0"}) {
    CAPTURE(mode);
    auto out = assemble(mode);
    REQUIRE(out.kind == outcome::ok);
    REQUIRE(out.tool_calls.size() == 2);
    CHECK(out.tool_calls[0].name == "get_weather");
    CHECK(out.tool_calls[0].arguments == R"({"city":"Paris","unit":"celsius"})");
    CHECK(out.tool_calls[1].id == "call_sim_1");
    CHECK(out.tool_calls[1].arguments == R"({"zone":"UTC"})");
    CHECK(out.finish_reason == "tool_calls");
  }
  CHECK(assemble("bad_args").kind == outcome::result_invalid);
}

TEST_CASE("sim tool calls: an unknown mode is rejected with its path") {
  try {
    sim::detail::parse_scenario(R"({"models":{"t":{"tool_calls":"sometimes"}}})");
    FAIL("accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("models.t.tool_calls") != std::string::npos);
  }
}
