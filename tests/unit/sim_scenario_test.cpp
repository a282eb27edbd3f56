#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"

#include <doctest/doctest.h>

#include <set>
#include <stdexcept>
#include <string>

using namespace pgw::sim;

namespace {

/// The message check_scenario throws for `text` ("" when it accepts it).
std::string rejection(const std::string& text) {
  try {
    check_scenario(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string model(const std::string& name, const std::string& body) {
  return R"({"models": {")" + name + R"(": )" + body + "}}";
}

} // namespace

TEST_CASE("sim scenario: every built-in model of SPEC 11.1 parses") {
  CHECK_NOTHROW(check_scenario(detail::builtin_scenario_json));
  auto s = detail::load_scenario("");
  std::set<std::string> names;
  for (auto& kv : s)
    names.insert(kv.first);
  CHECK(names
        == std::set<std::string>{"ok", "slow", "flaky", "down", "hang",
                                 "bimodal", "ra2", "throttled", "cut", "stall",
                                 "malformed", "nodone", "reject", "ctx", "dead",
                                 "unauth", "reset", "flap", "nousage", "echo-auth", "done-hang", "finish-hang",
                  "far-retry", "redirect"});
  CHECK(s["ok"].base.tokens == 20);
  CHECK(s["ok"].base.usage);
  CHECK(s["ok"].faults.empty());
  CHECK(s["slow"].base.ttft_ms == 2000);
  CHECK(s["slow"].base.token_ms == 5);
  CHECK(s["slow"].base.tokens == 50);
  REQUIRE(s["flaky"].faults.size() == 1);
  CHECK(s["flaky"].faults[0].p == 0.5);
  CHECK(s["flaky"].faults[0].status == 503);
  REQUIRE(s["hang"].faults.size() == 1);
  CHECK(s["hang"].faults[0].hang_ms == 600000.0);
  CHECK(s["bimodal"].base.latency.kind
        == detail::latency_spec::dist::lognormal);
  CHECK(s["bimodal"].base.latency.a == 800);
  CHECK(s["bimodal"].base.latency.b == 0.5);
  CHECK(s["bimodal"].faults[0].p == 0.13);
  REQUIRE(s["ra2"].script.size() == 2);
  CHECK(s["ra2"].script[0].fault.status == 429);
  CHECK(s["ra2"].script[0].fault.retry_after == std::string("2"));
  CHECK_FALSE(s["ra2"].script[1].fault.active());
  CHECK(s["cut"].base.stream.cut_after == 5);
  CHECK(s["stall"].base.stream.stall_after == 5);
  CHECK(s["stall"].base.stream.stall_ms == 30000);
  CHECK(s["malformed"].base.stream.malformed_at == 3);
  CHECK(s["nodone"].base.stream.omit_done);
  CHECK(s["reject"].faults[0].code == std::string("content_policy_violation"));
  CHECK(s["ctx"].faults[0].code == std::string("context_length_exceeded"));
  CHECK(s["dead"].faults[0].code == std::string("insufficient_quota"));
  CHECK(s["dead"].faults[0].status == 429);
  CHECK(s["unauth"].faults[0].status == 401);
  CHECK(s["reset"].script[0].fault.reset);
  REQUIRE(s["flap"].outage.has_value());
  CHECK(s["flap"].outage->first_ms == 60000);
  CHECK(s["flap"].outage->status == 503);
  CHECK_FALSE(s["nousage"].base.usage);
}

TEST_CASE("sim scenario: a scenario file adds models and replaces built-ins by name") {
  auto s = detail::load_scenario(R"({"models": {
    "ok": {"tokens": 3},
    "mine": {"latency": {"dist": "uniform", "min_ms": 1, "max_ms": 2},
             "faults": [{"p": 0.25, "status": 502, "retry_after_ms": 150}],
             "script": [{"tokens": 1, "stream": {"cut_after": 0}}, {"hang_ms": 5}]}}})");
  CHECK(s["ok"].base.tokens == 3);
  CHECK(s.count("flaky") == 1);
  auto& m = s["mine"];
  CHECK(m.base.latency.kind == detail::latency_spec::dist::uniform);
  CHECK(m.faults[0].retry_after_ms == std::string("150"));
  CHECK(m.script[0].tokens == 1);
  CHECK(m.script[0].stream->cut_after == 0);
  CHECK(m.script[1].fault.hang_ms == 5.0);
}

TEST_CASE("sim scenario: invalid scenarios are rejected with the JSON path") {
  struct bad_case {
    std::string text;
    std::string expected;
  };
  const bad_case cases[] = {
    // not JSON / wrong shape
    {"{", "scenario: not valid JSON"},
    {"[]", "scenario: must be a JSON object"},
    {R"({"modelz": {}})", "scenario.modelz: unknown field"},
    {R"({})", "models: required"},
    {R"({"models": []})", "models: must be an object"},
    {model("m", "[]"), "models.m: must be an object"},
    // unknown fields, everywhere
    {model("m", R"({"tokenz": 5})"), "models.m.tokenz: unknown field"},
    {model("m", R"({"faults": [{"p": 1, "status": 500, "color": "red"}]})"),
     "models.m.faults[0].color: unknown field"},
    {model("m", R"({"script": [{}, {"p": 1}]})"),
     "models.m.script[1].p: unknown field"},
    {model("m", R"({"stream": {"cut_before": 1}})"),
     "models.m.stream.cut_before: unknown field"},
    {model("m", R"({"outage": {"first_ms": 1, "until_ms": 2}})"),
     "models.m.outage.until_ms: unknown field"},
    {model("m", R"({"latency": {"dist": "lognormal", "median_ms": 5, "sigma": 1, "ms": 3}})"),
     "models.m.latency.ms: unknown field"},
    // wrong types
    {model("m", R"({"tokens": "20"})"),
     "models.m.tokens: must be a non-negative integer"},
    {model("m", R"({"tokens": 2.5})"),
     "models.m.tokens: must be a non-negative integer"},
    {model("m", R"({"usage": "yes"})"), "models.m.usage: must be true or false"},
    {model("m", R"({"ttft_ms": "fast"})"),
     "models.m.ttft_ms: must be a non-negative number"},
    {model("m", R"({"faults": {"p": 1}})"), "models.m.faults: must be an array"},
    {model("m", R"({"script": {}})"), "models.m.script: must be an array"},
    {model("m", R"({"faults": [{"p": "1", "status": 500}]})"),
     "models.m.faults[0].p: must be a number in [0, 1]"},
    {model("m", R"({"faults": [{"p": 1, "status": "503"}]})"),
     "models.m.faults[0].status: must be an HTTP status in [300, 599]"},
    {model("m", R"({"faults": [{"p": 1, "status": 503, "code": 7}]})"),
     "models.m.faults[0].code: must be a string"},
    {model("m", R"({"faults": [{"p": 1, "reset": 1}]})"),
     "models.m.faults[0].reset: must be true or false"},
    {model("m", R"({"stream": {"omit_done": "no"}})"),
     "models.m.stream.omit_done: must be true or false"},
    // out of range
    {model("flaky", R"({"faults": [{"p": 1.5, "status": 503}]})"),
     "models.flaky.faults[0].p: must be a number in [0, 1]"},
    {model("flaky", R"({"faults": [{"p": -0.1, "status": 503}]})"),
     "models.flaky.faults[0].p: must be a number in [0, 1]"},
    {model("m", R"({"faults": [{"status": 503}]})"), "models.m.faults[0].p: required"},
    {model("m", R"({"faults": [{"p": 1, "status": 200}]})"),
     "models.m.faults[0].status: must be an HTTP status in [300, 599]"},
    {model("m", R"({"tokens": -1})"), "models.m.tokens: must be an integer in [0, "},
    {model("m", R"({"stream": {"cut_after": -2}})"),
     "models.m.stream.cut_after: must be an integer in [0, "},
    // negative times
    {model("m", R"({"ttft_ms": -1})"), "models.m.ttft_ms: must be a non-negative number"},
    {model("m", R"({"token_ms": -0.5})"),
     "models.m.token_ms: must be a non-negative number"},
    {model("m", R"({"faults": [{"p": 1, "status": 500}, {"p": 1, "hang_ms": -5}]})"),
     "models.m.faults[1].hang_ms: must be a non-negative number"},
    {model("m", R"({"stream": {"stall_after": 1, "stall_ms": -1}})"),
     "models.m.stream.stall_ms: must be a non-negative number"},
    {model("m", R"({"outage": {"first_ms": -1}})"),
     "models.m.outage.first_ms: must be a non-negative number"},
    {model("m", R"({"latency": {"dist": "fixed", "ms": -3}})"),
     "models.m.latency.ms: must be a non-negative number"},
    // latency distributions
    {model("m", R"({"latency": {"dist": "gamma", "ms": 3}})"),
     "models.m.latency.dist: must be one of fixed, lognormal, uniform"},
    {model("m", R"({"latency": {"dist": 1}})"),
     "models.m.latency.dist: must be one of fixed, lognormal, uniform"},
    {model("m", R"({"latency": {"ms": 3}})"), "models.m.latency.dist: required"},
    {model("m", R"({"latency": {"dist": "lognormal", "median_ms": 5, "sigma": -1}})"),
     "models.m.latency.sigma: must be a non-negative number"},
    {model("m", R"({"latency": {"dist": "lognormal", "median_ms": 5}})"),
     "models.m.latency.sigma: required"},
    {model("m", R"({"latency": {"dist": "uniform", "min_ms": 5, "max_ms": 1}})"),
     "models.m.latency.max_ms: must not be less than min_ms"},
    // inconsistent combinations
    {model("m", R"({"faults": [{"p": 1}]})"),
     "models.m.faults[0]: needs one of status, hang_ms, reset"},
    {model("m", R"({"faults": [{"p": 1, "status": 500, "reset": true}]})"),
     "models.m.faults[0]: status, hang_ms and reset exclude each other"},
    {model("m", R"({"script": [{"code": "x"}]})"),
     "models.m.script[0].code: only allowed with status"},
    {model("m", R"({"stream": {"stall_after": 1}})"),
     "models.m.stream.stall_ms: required with stall_after"},
    {model("m", R"({"script": []})"), "models.m.script: must not be empty"},
    {model("m", R"({"faults": [{"p": 1, "status": 429, "retry_after": "1\r\nX: y"}]})"),
     "models.m.faults[0].retry_after: must not contain line breaks"},
  };
  for (auto& c : cases) {
    CAPTURE(c.text);
    auto what = rejection(c.text);
    CHECK_MESSAGE(what.rfind(c.expected, 0) == 0, "got: " << what);
  }
}

TEST_CASE("sim scenario: answer_text is deterministic per model and seed") {
  auto a = answer_text("ok", 1, 20);
  CHECK(a == answer_text("ok", 1, 20));
  CHECK(a != answer_text("ok", 2, 20));
  CHECK(a != answer_text("slow", 1, 20));
  // 20 tokens = 20 words separated by single spaces.
  size_t spaces = 0;
  for (char c : a)
    spaces += c == ' ';
  CHECK(spaces == 19);
  // A shorter answer is a prefix (max_tokens truncation stays detectable).
  auto five = answer_text("ok", 1, 5);
  CHECK(a.rfind(five, 0) == 0);
  CHECK(five.size() < a.size());
  CHECK(answer_text("ok", 1, 0).empty());
  // Streamed tokens concatenate to the same text.
  std::string joined;
  for (auto& t : detail::answer_tokens("ok", 1, 20))
    joined += t;
  CHECK(joined == a);
}

TEST_CASE("sim scenario: decisions depend only on seed and model and n") {
  auto s = detail::load_scenario("");
  auto& flaky = s["flaky"];
  int hits = 0;
  for (uint64_t n = 1; n <= 1000; ++n) {
    auto p1 = detail::decide("flaky", flaky, 7, n, 0, 1);
    auto p2 = detail::decide("flaky", flaky, 7, n, 0, 1);
    CHECK(p1.fault.status == p2.fault.status);
    hits += p1.fault.status == 503;
  }
  CHECK(hits > 400);
  CHECK(hits < 600);
  // Another seed gives another pattern.
  int differ = 0;
  for (uint64_t n = 1; n <= 64; ++n)
    differ += detail::decide("flaky", flaky, 7, n, 0, 1).fault.status
              != detail::decide("flaky", flaky, 8, n, 0, 1).fault.status;
  CHECK(differ > 0);
  // p = 1 always hits, p = 0 never.
  for (uint64_t n = 1; n <= 50; ++n)
    CHECK(detail::decide("down", s["down"], 1, n, 0, 1).fault.status == 503);
  auto never = detail::parse_scenario(
    R"({"models": {"m": {"faults": [{"p": 0, "status": 500}]}}})");
  for (uint64_t n = 1; n <= 50; ++n)
    CHECK_FALSE(detail::decide("m", never["m"], 1, n, 0, 1).fault.active());
}

TEST_CASE("sim scenario: script entries apply by n and the last one repeats and faults are skipped") {
  auto s = detail::parse_scenario(R"({"models": {"m": {
    "tokens": 9,
    "faults": [{"p": 1, "status": 500}],
    "script": [{"status": 429, "retry_after": "2"}, {"tokens": 2}, {}]}}})");
  auto& m = s["m"];
  auto p1 = detail::decide("m", m, 1, 1, 0, 1);
  CHECK(p1.fault.status == 429);
  CHECK(p1.fault.retry_after == std::string("2"));
  auto p2 = detail::decide("m", m, 1, 2, 0, 1);
  CHECK_FALSE(p2.fault.active()); // faults are not evaluated under a script
  CHECK(p2.b.tokens == 2);
  for (uint64_t n = 3; n <= 6; ++n) {
    auto p = detail::decide("m", m, 1, n, 0, 1);
    CHECK_FALSE(p.fault.active());
    CHECK(p.b.tokens == 9);
  }
}

TEST_CASE("sim scenario: outage windows are in simulated time") {
  auto s = detail::load_scenario("");
  auto& flap = s["flap"];
  CHECK(detail::decide("flap", flap, 1, 1, 59999, 1).fault.status == 503);
  CHECK_FALSE(detail::decide("flap", flap, 1, 2, 60000, 1).fault.active());
  // time_scale 0.001: the 60 s window lasts 60 real ms.
  CHECK(detail::decide("flap", flap, 1, 1, 59, 0.001).outage);
  CHECK_FALSE(detail::decide("flap", flap, 1, 1, 61, 0.001).outage);
}

TEST_CASE("sim scenario: latency draws follow their distribution") {
  auto s = detail::parse_scenario(R"({"models": {
    "f": {"latency": {"dist": "fixed", "ms": 12}},
    "u": {"latency": {"dist": "uniform", "min_ms": 10, "max_ms": 20}},
    "l": {"latency": {"dist": "lognormal", "median_ms": 100, "sigma": 0.5}}}})");
  CHECK(detail::decide("f", s["f"], 1, 1, 0, 1).latency_ms == 12);
  int below = 0;
  for (uint64_t n = 1; n <= 2000; ++n) {
    auto u = detail::decide("u", s["u"], 1, n, 0, 1).latency_ms;
    CHECK(u >= 10);
    CHECK(u <= 20);
    auto l = detail::decide("l", s["l"], 1, n, 0, 1).latency_ms;
    CHECK(l > 0);
    below += l < 100;
  }
  // The median of the lognormal is median_ms.
  CHECK(below > 900);
  CHECK(below < 1100);
  CHECK(detail::decide("l", s["l"], 1, 5, 0, 1).latency_ms
        == detail::decide("l", s["l"], 1, 5, 0, 1).latency_ms);
}

TEST_CASE("sim scenario: an outage may send Retry-After (a 429 storm)") {
  auto sc = detail::load_scenario(
    R"({"models": {"storm": {"outage": {"first_ms": 1000, "status": 429,
                                        "retry_after": "1"}}}})");
  auto& storm = sc.at("storm");
  auto during = detail::decide("storm", storm, 1, 1, 500, 1);
  CHECK(during.outage);
  CHECK(during.fault.status == 429);
  REQUIRE(during.fault.retry_after);
  CHECK(*during.fault.retry_after == "1");
  auto after = detail::decide("storm", storm, 1, 2, 1500, 1);
  CHECK_FALSE(after.outage);
  CHECK(after.fault.status == 0);
  CHECK(rejection(R"({"models": {"x": {"outage": {"first_ms": 1,
                                       "retry_after": "a\nb"}}}})")
          .find("models.x.outage.retry_after") != std::string::npos);
}

TEST_CASE("sim scenario: structured-output content, per attempt and by probability") {
  auto s = detail::parse_scenario(R"({"models": {
    "scripted": {"content": "base", "json_content": "{}",
                 "script": [{"content": "not json"}, {"json_content": "[1]"}]},
    "shaky": {"content": "good", "faults": [{"p": 0.3, "content": "bad"}]},
    "strict": {"reject_formats": ["json_schema"]}}})");
  auto p1 = detail::decide("scripted", s["scripted"], 1, 1, 0, 1);
  CHECK(p1.b.content == std::string("not json"));
  CHECK(p1.b.json_content == std::string("{}"));
  auto p2 = detail::decide("scripted", s["scripted"], 1, 2, 0, 1);
  CHECK(p2.b.content == std::string("base"));
  CHECK(p2.b.json_content == std::string("[1]"));
  int bad = 0;
  for (uint64_t n = 1; n <= 1000; ++n) {
    auto p = detail::decide("shaky", s["shaky"], 1, n, 0, 1);
    CHECK_FALSE(p.fault.active()); // a content fault answers 200
    REQUIRE(p.b.content);
    bad += *p.b.content == "bad";
  }
  CHECK(bad > 250);
  CHECK(bad < 350);
  CHECK(s["strict"].base.reject_formats == std::vector<std::string>{"json_schema"});
  CHECK(rejection(model("m", R"({"faults": [{"p": 1, "content": "x", "status": 500}]})"))
        == "models.m.faults[0]: content excludes status, hang_ms and reset");
  CHECK(rejection(model("m", R"({"content": 5})"))
        == "models.m.content: must be a string");
  CHECK(rejection(model("m", R"({"reject_formats": "json_schema"})"))
        == "models.m.reject_formats: must be an array of response_format types");
}
