#include "apps/pgw-upstream-sim/tool_calls.hpp"

#include "apps/pgw-upstream-sim/http.hpp"

#include <fmt/format.h>

namespace pgw::sim::detail {

namespace {

struct sim_call {
  const char* name;
  const char* arguments;
};

std::vector<sim_call> calls_of(const std::string& mode) {
  return {{"get_weather", R"({"city":"Paris","unit":"celsius"})"},
          {"get_time", mode == "bad_args" ? R"({"zone":"UTC")"
                                          : R"({"zone":"UTC"})"}};
}

std::string quoted(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

} // namespace

std::string tool_calls_message(const std::string& mode) {
  std::string calls;
  auto list = calls_of(mode);
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0)
      calls += ",";
    calls += fmt::format(
      R"({{"id":"call_sim_{}","type":"function","function":{{"name":{},"arguments":{}}}}})",
      i, quoted(list[i].name), quoted(list[i].arguments));
  }
  return R"({"role":"assistant","content":null,"tool_calls":[)" + calls + "]}";
}

std::vector<std::string> tool_call_deltas(const std::string& mode) {
  std::vector<std::string> out;
  auto list = calls_of(mode);
  for (size_t i = 0; i < list.size(); ++i) {
    std::string index;
    if (mode == "index0")
      index = R"("index":0,)";
    else if (mode != "no_index")
      index = fmt::format(R"("index":{},)", i);
    out.push_back(fmt::format(
      R"({{"tool_calls":[{{{}"id":"call_sim_{}","type":"function","function":{{"name":{},"arguments":""}}}}]}})",
      index, i, quoted(list[i].name)));
    std::string_view args = list[i].arguments;
    auto half = args.size() / 2;
    for (auto piece : {args.substr(0, half), args.substr(half)})
      out.push_back(fmt::format(
        R"({{"tool_calls":[{{{}"function":{{"arguments":{}}}}}]}})", index,
        quoted(piece)));
  }
  return out;
}

const char* tool_calls_finish_reason(const std::string& mode) {
  return mode == "no_index" || mode == "index0" ? "stop" : "tool_calls";
}

} // namespace pgw::sim::detail
