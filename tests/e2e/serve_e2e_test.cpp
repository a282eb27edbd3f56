// `pgw-actor serve` driven by the official openai npm package (Node) and by
// plain HTTP: real processes on loopback ports chosen at run time.

#include "apps/harness/redis_server.hpp"
#include "apps/pgw-upstream-sim/embeddings.hpp"
#include "config/json_text.hpp"
#include "fixtures/eventually.hpp"
#include "fixtures/process.hpp"
#include "fixtures/raw_upstream.hpp"
#include "fixtures/sim_process.hpp"
#include "transport/ocr_codec.hpp"

#include <boost/json.hpp>
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <doctest/doctest.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

using namespace pgw::test;
namespace json = boost::json;

namespace {

const std::string client_dir = std::string{PGW_SOURCE_DIR} + "/tests/e2e/serve_client";
const std::string the_key = "sk-serve-test-key";
// printf %s sk-serve-test-key | sha256sum
const std::string the_key_digest =
  "d225ebc969784fcd04cbfe2ee2a8e0370885f1ac60c1593d992aaf89d431f35f";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_dir() {
  char tmpl[] = "/tmp/pgw-serve-XXXXXX";
  auto dir = ::mkdtemp(tmpl);
  REQUIRE(dir != nullptr);
  return dir;
}

const char* scenario_json = R"({"models": {
  "tools_noindex": {"tool_calls": "no_index"},
  "tools_index0":  {"tool_calls": "index0"},
  "tools_indexed": {"tool_calls": "indexed"},
  "tools_bad":     {"tool_calls": "bad_args"},
  "slow_abort":    {"ttft_ms": 100, "token_ms": 100, "tokens": 50},
  "emb":           {"dim": 8},
  "halfusage":     {"dim": 8, "script": [{}, {"usage": false}]},
  "emb_then_400":  {"dim": 8, "script": [{}, {"status": 400}]},
  "emb_then_503":  {"dim": 8, "script": [{}, {"status": 503}]},
  "e1536":         {"dim": 1536},
  "e8192":         {"dim": 8192},
  "monkey":        {},
  "slow_short":    {"ttft_ms": 300, "tokens": 3},
  "drip":          {"ttft_ms": 50, "token_ms": 150, "tokens": 8},
  "flood":         {"token_ms": 0, "tokens": 3000, "token_bytes": 2000},
  "person":        {"script": [{"content": "Ada is 36."},
                               {"content": "```json\n{\"name\": \"Ada\", \"age\": 36,}\n```"}]},
  "role":          {"script": [{"content": "{\"name\": \"Ada\", \"role\": \"admin\", \"email\": \"ada at example.com\"}"}]}
}})";

/// A simulator and a `pgw-actor serve` over it, with the scopes the Node
/// cases use. `extra` adds env entries ("K=V").
/// How serve_fixture starts serve beyond its environment.
struct serve_launch {
  /// serve's stderr is a FIFO the test opens and does not read
  /// (`serve_fixture::unread_stderr`), as a pipe nobody drains.
  bool stderr_unread = false;
  /// serve may hold at most this many descriptors (`ulimit -n`; 0 = as the
  /// test runner).
  int fd_limit = 0;
};

struct serve_fixture {
  std::string dir = temp_dir();
  std::unique_ptr<sim_process> sim;
  child_process serve;
  int port = 0;
  /// serve's first stdout line, "listening HOST:PORT".
  std::string listening;

  /// The read end of serve's stderr when it is a FIFO nobody reads.
  int unread_stderr = -1;

  explicit serve_fixture(std::vector<std::string> extra = {},
                         const std::string& listen = "127.0.0.1:0",
                         serve_launch how = {}) {
    std::ofstream(dir + "/scenario.json") << scenario_json;
    if (how.stderr_unread) {
      REQUIRE(::mkfifo((dir + "/stderr").c_str(), 0600) == 0);
      unread_stderr = ::open((dir + "/stderr").c_str(), O_RDONLY | O_NONBLOCK);
      REQUIRE(unread_stderr >= 0);
    }
    std::ofstream(dir + "/keys") << "# test key\n" << the_key_digest << "\n";
    sim = std::make_unique<sim_process>(
      std::vector<std::string>{"--scenario", dir + "/scenario.json"});
    auto url = sim->base_url();
    std::vector<std::string> env{
      "PATH=/usr/local/bin:/usr/bin:/bin", "PGW_TELEMETRY_DB=off",
      "PGW_SERVE_KEYS_FILE=" + dir + "/keys"};
    auto source = [&](const std::string& scope, const std::string& name,
                      const std::string& model, int priority = 0) {
      auto p = scope + "__OPENAI__" + name + "__";
      env.push_back(p + "BASE_URL=" + url);
      env.push_back(p + "MODEL=" + model);
      env.push_back(p + "PRIORITY=" + std::to_string(priority));
    };
    source("LLM", "A", "ok");
    source("TOOLS", "NOINDEX", "tools_noindex", 0);
    source("TOOLS", "INDEX0", "tools_index0", 1);
    env.push_back("TOOLS__SELECTOR=priority");
    source("TOOLBAD", "BAD", "tools_bad", 0);
    source("TOOLBAD", "GOOD", "tools_indexed", 1);
    env.push_back("TOOLBAD__SELECTOR=priority");
    source("SLOW", "S", "slow_abort");
    source("SHORT", "S", "slow_short");
    // Live streaming (issue 13).
    source("DRIP", "D", "drip");
    source("FLOOD", "F", "flood");
    source("CUT", "A", "cut", 0);
    source("CUT", "B", "ok", 1);
    env.push_back("CUT__SELECTOR=priority");
    env.push_back("CUT__BACKOFF_BASE_S=0.01");
    source("QUOTA", "Q", "ok");
    env.push_back("QUOTA__OPENAI__Q__RPM=1");
    env.push_back("QUOTA__ON_QUOTA_FULL=fail");
    source("DOWN", "D", "down");
    env.push_back("DOWN__MAX_ATTEMPTS=2");
    env.push_back("DOWN__BACKOFF_BASE_S=0.01");
    env.push_back("DOWN__BACKOFF_MAX_S=0.02");
    source("NOUSAGE", "N", "nousage");
    source("STRUCT", "P", "person");
    env.push_back("STRUCT__BACKOFF_BASE_S=0.01");
    source("ROLE", "R", "role"); // never matches a schema with a role enum
    env.push_back("ROLE__BACKOFF_BASE_S=0.01");
    env.push_back("ROLE__STRUCTURED__MAX_REASKS=1");
    source("HANG", "H", "hang");
    env.push_back("HANG__CALL_DEADLINE_S=0.5");
    // Issue 16: an embedding scope and a MonkeyOCR scope (images <= 1000 B).
    source("EMBED", "E", "emb");
    env.push_back("EMBED__OPENAI__E__KIND=embedding");
    env.push_back("OCR__GENERIC__M__BASE_URL=http://127.0.0.1:"
                  + std::to_string(sim->port()) + "/monkey");
    env.push_back("OCR__GENERIC__M__MODEL=monkey");
    env.push_back("OCR__GENERIC__M__KIND=ocr_monkey");
    env.push_back("OCR__GENERIC__M__MAX_IMAGE_BYTES=1000");
    auto sanitizers = pgw::harness::sanitizer_settings();
    env.insert(env.end(), sanitizers.begin(), sanitizers.end());
    // `extra` may name the simulator's URL as {SIM_URL} (a source of its own).
    for (auto setting : extra) {
      auto at = setting.find("{SIM_URL}");
      if (at != std::string::npos)
        setting.replace(at, 9, url);
      env.push_back(std::move(setting));
    }
    // A clean environment (and the sanitizer settings); stderr (the access
    // log) to a file.
    std::vector<std::string> argv{"/usr/bin/env", "-i"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(),
                {"/bin/sh", "-c",
                 (how.fd_limit > 0
                    ? "ulimit -n " + std::to_string(how.fd_limit) + " && "
                    : std::string{})
                   + "exec \"$0\" serve --listen \"$2\" 2>\"$1\"",
                 PGW_ACTOR_BIN, dir + "/stderr", listen});
    serve = child_process(argv);
    auto line = serve.read_line();
    listening = line;
    auto colon = line.rfind(':');
    if (line.rfind("listening ", 0) != 0 || colon == std::string::npos)
      FAIL("unexpected serve output: " << line << "\n" << stderr_text());
    port = std::stoi(line.substr(colon + 1));
  }

  ~serve_fixture() {
    serve.stop();
    if (unread_stderr >= 0)
      ::close(unread_stderr);
    sim.reset();
    std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0)
      MESSAGE("could not remove " << dir);
  }

  /// Waits (up to 2.5 s) until the simulator received a request for `model`.
  void wait_for_upstream(const std::string& model) const {
    httplib::Client s{"127.0.0.1", sim->port()};
    for (int i = 0; i < 500; ++i) {
      auto log = s.Get("/_sim/log");
      if (log && log->body.find("\"" + model + "\"") != std::string::npos)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    FAIL("the simulator never received a request for " << model);
  }

  /// The simulator's record of its request for `model` once that request
  /// has ended (its answer sent, or its client gone), waiting up to 5 s;
  /// empty when it has not ended by then.
  json::object upstream_ended(const std::string& model) const {
    httplib::Client s{"127.0.0.1", sim->port()};
    for (int i = 0; i < 500; ++i) {
      auto log = s.Get("/_sim/log");
      REQUIRE(log);
      auto parsed = json::parse(log->body);
      for (auto& r : parsed.at("requests").as_array())
        if (r.at("model").as_string() == model && !r.at("ended_ms").is_null())
          return r.as_object();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return {};
  }

  std::string stderr_text() const {
    if (unread_stderr >= 0)
      return "(stderr is a FIFO)";
    return slurp(dir + "/stderr");
  }

  /// serve's stderr once `done(text)` holds, or as it is after `limit`:
  /// the access lines are written by a thread of their own, just after
  /// each answer goes out.
  template <class Pred>
  std::string stderr_when(Pred done, std::chrono::milliseconds limit
                                     = std::chrono::seconds(5)) const {
    std::string text;
    pgw::test::eventually([&] { return done(text = stderr_text()); }, limit);
    return text;
  }

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port) + "/v1";
  }

  /// Runs one case of client.mjs; returns its JSON line.
  json::object node_case(const std::string& name) {
    auto r = run_program({"/usr/bin/env", "node", client_dir + "/client.mjs", name},
                         {"PGW_URL=" + url(), "PGW_KEY=" + the_key,
                          "SIM_URL=http://127.0.0.1:" + std::to_string(sim->port())});
    INFO("node " << name << ": " << r.out << r.err);
    INFO("serve stderr:\n" << stderr_text());
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out).as_object();
  }

  httplib::Client http() const {
    httplib::Client cli{"127.0.0.1", port};
    cli.set_read_timeout(std::chrono::seconds(20));
    return cli;
  }

  httplib::Headers auth() const {
    return {{"Authorization", "Bearer " + the_key}};
  }

  /// Starts one chat call on `model` on another thread; the future holds
  /// its status (0 = no answer) and body.
  std::future<std::pair<int, std::string>> chat_async(const std::string& model) {
    return std::async(std::launch::async, [this, model] {
      auto c = http();
      auto res = c.Post("/v1/chat/completions", auth(),
                        R"({"model":")" + model
                          + R"(","messages":[{"role":"user","content":"hi"}]})",
                        "application/json");
      return res ? std::make_pair(res->status, res->body)
                 : std::make_pair(0, std::string{});
    });
  }
};

bool have_node_client() {
  return ::access((client_dir + "/node_modules/openai/package.json").c_str(),
                  R_OK)
         == 0;
}

} // namespace

TEST_SUITE("serve") {

TEST_CASE("serve: the openai SDK's chat, streaming, tools, abort, errors and auth") {
  REQUIRE_MESSAGE(have_node_client(),
                  "run `make deps` (npm ci in tests/e2e/serve_client)");
  for (const char* name : {"chat", "stream", "tools", "tools_stream",
                           "tools_failover", "abort", "errors", "auth",
                           "live", "interrupted", "nousage", "parse"}) {
    CAPTURE(name);
    serve_fixture f;
    auto out = f.node_case(name);
    CHECK(out.at("ok").as_bool());
    if (std::string(name) == "abort")
      MESSAGE("abort: " << json::serialize(out));
    if (std::string(name) == "parse") // the validator's words reach the SDK
      CHECK(std::string(out.at("error").as_string()).find(
              R"(/email: String should be a valid email address)")
            != std::string::npos);
    // A live stream's access line says how it ended when not well (its
    // 200 went out with the first chunk).
    auto access_line = [&f](const std::string& scope) {
      auto needle = "access POST /v1/chat/completions 200";
      auto tail = " scope=" + scope + " ";
      // The line is written just after the stream's last bytes.
      for (int i = 0; i < 200; ++i) {
        auto log = f.stderr_text();
        for (auto at = log.find(needle); at != std::string::npos;
             at = log.find(needle, at + 1)) {
          auto line = log.substr(at, log.find('\n', at) - at);
          if (line.find(tail) != std::string::npos)
            return line;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return std::string{};
    };
    if (std::string(name) == "interrupted")
      CHECK(access_line("CUT").rfind(
              "access POST /v1/chat/completions 200 stream_interrupted "
              "scope=CUT source=a ", 0) == 0);
    if (std::string(name) == "abort")
      CHECK(access_line("SLOW").rfind(
              "access POST /v1/chat/completions 200 client_gone scope=SLOW ", 0)
            == 0);
    if (std::string(name) == "live") // both modes ended well
      CHECK(access_line("DRIP").rfind(
              "access POST /v1/chat/completions 200 scope=DRIP source=d ", 0)
            == 0);
  }
}

TEST_CASE("serve: a live stream cut after its usage chunk ends with the "
          "usage so far in the error event, counted for its source") {
  // Two tokens, the usage chunk, then the connection drops: no
  // finish_reason, so the call is stream_interrupted after the commit.
  raw_upstream up{[](raw_upstream& u, int fd, const std::string&) {
    auto event = [](const std::string& data) {
      auto line = "data: " + data + "\n\n";
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", line.size());
      return size + line + "\r\n";
    };
    auto token = [&](const std::string& text) {
      return event(R"({"choices":[{"index":0,"delta":{"content":")" + text
                   + R"("},"finish_reason":null}]})");
    };
    u.send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n"
                   + token("A0 ") + token("A1 ")
                   + event(R"({"choices":[],"usage":{"prompt_tokens":3,)"
                           R"("completion_tokens":4,"total_tokens":7}})"));
  }};
  serve_fixture f{{"USAGECUT__OPENAI__A__BASE_URL=" + up.base_url(),
                   "USAGECUT__OPENAI__A__MODEL=m"}};
  auto cli = f.http();
  // The error event of a live stream on `model`.
  auto error_event = [&](const std::string& model) {
    auto res = cli.Post("/v1/chat/completions", f.auth(),
                        R"({"model":")" + model + R"(","stream":true,)"
                        R"("stream_options":{"include_usage":true},)"
                        R"("messages":[{"role":"user","content":"hi"}]})",
                        "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
    INFO(res->body);
    auto at = res->body.find("data: {\"error\"");
    REQUIRE(at != std::string::npos);
    auto end = res->body.find("\n\n", at);
    // The error event ends the stream: no usage chunk, no [DONE] after it.
    CHECK(res->body.find("data: ", end) == std::string::npos);
    return json::parse(res->body.substr(at + 6, end - at - 6))
      .at("error")
      .as_object();
  };
  auto e = error_event("USAGECUT");
  CHECK(e.at("code").as_string() == "stream_interrupted");
  CHECK(std::string(e.at("message").as_string())
          .find("usage so far 3 prompt + 4 completion tokens")
        != std::string::npos);
  CHECK(e.at("usage")
        == json::parse(
          R"({"prompt_tokens":3,"completion_tokens":4,"total_tokens":7})"));
  // A stream cut before any usage chunk: the usage so far is unknown.
  CHECK(error_event("CUT").at("usage").is_null());
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  INFO(m->body);
  for (const char* line :
       {R"(pgw_calls_total{scope="USAGECUT",source="a",)"
        R"(outcome="stream_interrupted"} 1)",
        R"(pgw_tokens_total{scope="USAGECUT",source="a",kind="prompt"} 3)",
        R"(pgw_tokens_total{scope="USAGECUT",source="a",kind="completion"} 4)",
        R"(pgw_calls_total{scope="CUT",source="a",)"
        R"(outcome="stream_interrupted"} 1)"}) {
    CAPTURE(line);
    CHECK(m->body.find(std::string(line) + "\n") != std::string::npos);
  }
}

TEST_CASE("serve: healthz, readyz, models, auth and metrics that pass promtool") {
  serve_fixture f;
  auto cli = f.http();
  auto h = cli.Get("/healthz");
  REQUIRE(h);
  CHECK(h->status == 200);
  auto r = cli.Get("/readyz");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(json::parse(r->body).at("status").as_string() == "ready");
  auto denied = cli.Get("/v1/models");
  REQUIRE(denied);
  CHECK(denied->status == 401);
  CHECK(json::parse(denied->body).at("error").at("code").as_string()
        == "invalid_api_key");
  auto models = cli.Get("/v1/models", f.auth());
  REQUIRE(models);
  REQUIRE(models->status == 200);
  auto data = json::parse(models->body).at("data").as_array();
  std::vector<std::string> ids;
  for (auto& m : data)
    ids.emplace_back(m.at("id").as_string());
  CHECK(std::count(ids.begin(), ids.end(), "LLM") == 1);
  CHECK(std::count(ids.begin(), ids.end(), "LLM/a") == 1);
  auto unknown = cli.Post("/v1/chat/completions", f.auth(),
                          R"({"model":"LLM/zzz","messages":[{"role":"user","content":"hi"}]})",
                          "application/json");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  auto unknown_error = json::parse(unknown->body).at("error");
  CHECK(unknown_error.at("code").as_string() == "model_not_found");
  // The scope exists: the source is what is unknown, and the scope's
  // sources are listed.
  CHECK(unknown_error.at("message").as_string()
        == "the model 'LLM/zzz': source 'zzz' is not in scope LLM (its "
           "sources: a)");
  // Traffic: one ok, one error, then the exposition.
  auto body = R"({"model":"llm","messages":[{"role":"user","content":"hi"}]})";
  auto ok = cli.Post("/v1/chat/completions", f.auth(), body, "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  CHECK(ok->get_header_value("x-pgw-source") == "a");
  auto bad = cli.Post("/v1/chat/completions", f.auth(),
                      R"({"model":"down","messages":[{"role":"user","content":"hi"}]})",
                      "application/json");
  REQUIRE(bad);
  CHECK(bad->status == 503);
  CHECK(std::stoi(bad->get_header_value("Retry-After")) >= 1);
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  REQUIRE(m->status == 200);
  CHECK(m->body.find(R"(pgw_calls_total{scope="LLM",source="a",outcome="ok"} 1)")
        != std::string::npos);
  CHECK(m->body.find(R"(pgw_calls_total{scope="DOWN",source="none",outcome="retry_exhausted"} 1)")
        != std::string::npos);
  CHECK(m->body.find(R"(pgw_attempts_total{scope="DOWN",source="d",outcome="transient"} 2)")
        != std::string::npos);
  // Each 503 came after the request was sent, with no usage: each permit
  // settled EST_TOKENS (1000), counted as estimated work of the failed call.
  CHECK(m->body.find(R"(pgw_tokens_estimated_total{scope="DOWN",source="d"} 2000)" "\n")
        != std::string::npos);
  CHECK(m->body.find("pgw_call_duration_seconds_bucket") != std::string::npos);
  std::ofstream(f.dir + "/metrics.txt") << m->body;
  auto check = run_program({"/bin/sh", "-c", "promtool check metrics < \"$0\"",
                            f.dir + "/metrics.txt"});
  INFO(check.out << check.err << "\n" << m->body);
  CHECK(check.exit_code == 0);
  // The access log: one line per request, no key.
  auto log = f.stderr_when([](const std::string& text) {
    return text.find("access GET /v1/models 401") != std::string::npos;
  });
  CHECK(log.find("access POST /v1/chat/completions 200 scope=LLM source=a")
        != std::string::npos);
  CHECK(log.find("access GET /v1/models 401") != std::string::npos);
  CHECK(log.find(the_key) == std::string::npos);
}

TEST_CASE("serve: a hedge loser stopped before its answer counts its "
          "estimate in pgw_tokens_estimated_total, priced in the cost") {
  // The primary (`h`) never answers; the hedge on `a` does. The loser
  // reports no usage, so its permit's estimate (EST_TOKENS) is the work it
  // may have been billed for.
  auto prices = temp_dir();
  std::ofstream(prices + "/prices.json")
    << R"({"models": {}, "sources": {"HEDGED/h": {"input": 1, "output": 2000}}})";
  serve_fixture f{{"HEDGED__OPENAI__H__BASE_URL={SIM_URL}",
                   "HEDGED__OPENAI__H__MODEL=hang",
                   "HEDGED__OPENAI__H__PRIORITY=0",
                   "HEDGED__OPENAI__A__BASE_URL={SIM_URL}",
                   "HEDGED__OPENAI__A__MODEL=ok",
                   "HEDGED__OPENAI__A__PRIORITY=1",
                   "HEDGED__SELECTOR=priority", "HEDGED__HEDGE__AFTER_S=0.1",
                   "HEDGED__EST_TOKENS=77",
                   "PGW_PRICING_PATH=" + prices + "/prices.json"}};
  auto cli = f.http();
  auto res = cli.Post("/v1/chat/completions", f.auth(),
                      R"({"model":"HEDGED","messages":[{"role":"user","content":"hi"}]})",
                      "application/json");
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  CHECK(res->get_header_value("x-pgw-source") == "a");
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  INFO(m->body);
  CHECK(m->body.find(R"(pgw_hedges_total{scope="HEDGED"} 1)" "\n")
        != std::string::npos);
  CHECK(m->body.find(R"(pgw_tokens_estimated_total{scope="HEDGED",source="h"} 77)"
                     "\n")
        != std::string::npos);
  // The winner reported its usage: nothing of it is estimated.
  CHECK(m->body.find(R"(pgw_tokens_estimated_total{scope="HEDGED",source="a"})")
        == std::string::npos);
  const std::string cost = R"(pgw_cost_usd_total{scope="HEDGED",source="h"} )";
  auto cost_at = m->body.find(cost);
  REQUIRE(cost_at != std::string::npos);
  CHECK(std::stod(m->body.substr(cost_at + cost.size()))
        == doctest::Approx(77 * 2000 / 1e6));
  std::ofstream(f.dir + "/metrics.txt") << m->body;
  auto check = run_program({"/bin/sh", "-c", "promtool check metrics < \"$0\"",
                            f.dir + "/metrics.txt"});
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
  std::string cmd = "rm -rf '" + prices + "'";
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("serve: readyz is ready again once the only source's cooldown "
          "is over, before any probe") {
  serve_fixture f{{"DOWN__BREAKER__THRESHOLD=1",
                   "DOWN__BREAKER__COOLDOWN_S=0.3"}};
  auto cli = f.http();
  auto bad = cli.Post("/v1/chat/completions", f.auth(),
                      R"({"model":"down","messages":[{"role":"user","content":"hi"}]})",
                      "application/json");
  REQUIRE(bad);
  REQUIRE(bad->status == 503);
  auto readyz = [&] {
    auto r = cli.Get("/readyz");
    REQUIRE(r);
    return r->status;
  };
  // Open: no source of DOWN takes a call. (At most 0.3 s after the call,
  // unless the machine stalled, so it is not a CHECK.)
  if (readyz() != 503)
    MESSAGE("the cooldown ended before the first /readyz");
  // Past the cooldown the next call probes: ready, with no call in between.
  CHECK(eventually([&] { return readyz() == 200; }));
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find(R"(pgw_breaker_state{scope="DOWN",source="d",state="half_open"} 1)")
        != std::string::npos);
  CHECK(m->body.find(R"(pgw_breaker_state{scope="DOWN",source="d",state="open"} 0)")
        != std::string::npos);
}

TEST_CASE("serve: usage the upstream did not report is null with "
          "x-pgw-usage: unavailable, never zeros") {
  serve_fixture f;
  auto cli = f.http();
  auto ask = [&](const std::string& model, bool stream) {
    auto r = cli.Post("/v1/chat/completions", f.auth(),
                      R"({"model":")" + model
                        + R"(","messages":[{"role":"user","content":"hi"}])"
                        + (stream ? R"(,"stream":true,"stream_options":)"
                                    R"({"include_usage":true}})"
                                  : "}"),
                      "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return *r;
  };
  auto none = ask("NOUSAGE", false);
  CHECK(none.get_header_value("x-pgw-usage") == "unavailable");
  CHECK(json::parse(none.body).at("usage").is_null());
  auto counted = ask("LLM", false);
  CHECK_FALSE(counted.has_header("x-pgw-usage"));
  CHECK(json::parse(counted.body).at("usage").at("total_tokens").as_int64()
        > 0);
  // A stream's usage chunk (the last before [DONE]) says null too.
  auto usage_chunk = [](const std::string& sse) {
    auto end = sse.rfind("data: [DONE]");
    REQUIRE(end != std::string::npos);
    auto start = sse.rfind("data: ", end - 1);
    REQUIRE(start != std::string::npos);
    return json::parse(sse.substr(start + 6, end - start - 6)).as_object();
  };
  auto streamed = usage_chunk(ask("NOUSAGE", true).body);
  CHECK(streamed.at("choices").as_array().empty());
  CHECK(streamed.at("usage").is_null());
  CHECK(usage_chunk(ask("LLM", true).body).at("usage").is_object());
  // Each NOUSAGE answer settled its permit's estimate (EST_TOKENS, 1000 by
  // default): /metrics counts it as estimated, apart from reported tokens.
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  INFO(m->body);
  CHECK(m->body.find(R"(pgw_tokens_estimated_total{scope="NOUSAGE",source="n"} 2000)"
                     "\n")
        != std::string::npos);
  CHECK(m->body.find(R"(pgw_tokens_estimated_total{scope="LLM",)")
        == std::string::npos);
}

TEST_CASE("serve: body and in-flight limits") {
  serve_fixture f{{"PGW_SERVE_MAX_BODY_BYTES=1024", "PGW_SERVE_MAX_INFLIGHT=1"}};
  auto cli = f.http();
  std::string big = R"({"model":"LLM","messages":[{"role":"user","content":")"
                    + std::string(2000, 'x') + "\"}]}";
  auto r = cli.Post("/v1/chat/completions", f.auth(), big, "application/json");
  REQUIRE(r);
  CHECK(r->status == 413);
  // One slow call holds the only slot; the next is turned away.
  auto slow = f.chat_async("SHORT");
  // Wait until the simulator has the slow request.
  f.wait_for_upstream("slow_short");
  auto busy = cli.Post("/v1/chat/completions", f.auth(),
                       R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})",
                       "application/json");
  CHECK(slow.get().first == 200);
  REQUIRE(busy);
  CHECK(busy->status == 503);
  CHECK(busy->get_header_value("Retry-After") == "1");
  CHECK(json::parse(busy->body).at("error").at("code").as_string() == "overloaded");
}

TEST_CASE("serve: a bad body's message says where it went wrong and what "
          "range a number has") {
  serve_fixture f;
  auto cli = f.http();
  auto refused = [&](const std::string& body) {
    auto r = cli.Post("/v1/chat/completions", f.auth(), body,
                      "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    return std::string(json::parse(r->body).at("error").at("message").as_string());
  };
  const std::string head = R"({"model":"LLM","messages":[{"role":"user","content":"a)";
  CHECK(refused(head + "\xff\"}]}")
        == "the body is not valid UTF-8 at byte offset "
             + std::to_string(head.size()));
  // A sequence cut short is named by its first byte.
  CHECK(refused(head + "\xc3(\"}]}")
        == "the body is not valid UTF-8 at byte offset "
             + std::to_string(head.size()));
  CHECK(refused(R"({"model":"LLM",})")
        == "the body is not valid JSON (syntax error at byte offset 15)");
  CHECK(refused(R"({"model":"LLM")")
        == "the body is not valid JSON (incomplete JSON at byte offset 14)");
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  CHECK(refused(R"({"model":"LLM","max_tokens":1000000000000000000000000000000,)"
                + messages + "}")
        == "max_tokens: out of range (an integer from 1 to 9000000000000000)");
  CHECK(refused(R"({"model":"LLM","max_completion_tokens":0,)" + messages + "}")
        == "max_completion_tokens: out of range (an integer from 1 to "
           "9000000000000000)");
  CHECK(refused(R"({"model":"LLM","seed":-1e30,)" + messages + "}")
        == "seed: out of range (an integer from -9000000000000000 to "
           "9000000000000000)");
  CHECK(refused(R"({"model":"LLM","max_tokens":1.5,)" + messages + "}")
        == "max_tokens: must be an integer");
  CHECK(refused(R"({"model":"LLM","max_tokens":"10",)" + messages + "}")
        == "max_tokens: must be an integer");
  auto ok = cli.Post("/v1/chat/completions", f.auth(),
                     R"({"model":"LLM","max_tokens":9000000000000000,)"
                       + messages + "}",
                     "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("serve: a non-streaming client that hangs up cancels its call at once") {
  serve_fixture f;
  // A raw connection, to hang up mid-call.
  int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(sock >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(f.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::string body = R"({"model":"SLOW","messages":[{"role":"user","content":"hi"}]})";
  std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                        "Authorization: Bearer " + the_key + "\r\n"
                        "Content-Type: application/json\r\nContent-Length: "
                        + std::to_string(body.size()) + "\r\n\r\n" + body;
  REQUIRE(::send(sock, request.data(), request.size(), MSG_NOSIGNAL)
          == static_cast<ssize_t>(request.size()));
  f.wait_for_upstream("slow_abort");
  ::close(sock);
  // The answer would take 5 s; the upstream connection closes soon after.
  auto slow = f.upstream_ended("slow_abort");
  REQUIRE_FALSE(slow.empty());
  CHECK(slow.at("client_closed").as_bool());
  CHECK(slow.at("ended_ms").to_number<double>()
          - slow.at("arrived_ms").to_number<double>()
        < 2000);
}

namespace {

/// One raw client connection: requests written as given, responses read
/// with their framing (Content-Length or chunked).
struct raw_connection {
  int sock = -1;
  std::string buffered;

  /// `receive_buffer` > 0: the socket's SO_RCVBUF, set before it connects
  /// (a client that stops reading fills it, and then serve's side, sooner).
  explicit raw_connection(int port, int receive_buffer = 0) {
    sock = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(sock >= 0);
    if (receive_buffer > 0)
      ::setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &receive_buffer,
                   sizeof receive_buffer);
    timeval tv{10, 0};
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr)
            == 0);
  }

  ~raw_connection() {
    ::close(sock);
  }

  void send(const std::string& bytes) {
    REQUIRE(::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL)
            == static_cast<ssize_t>(bytes.size()));
  }

  /// Reads until `buffered` holds `n` bytes; false at the end of the stream.
  bool fill(size_t n) {
    char chunk[4096];
    while (buffered.size() < n) {
      auto got = ::recv(sock, chunk, sizeof chunk, 0);
      if (got <= 0)
        return false;
      buffered.append(chunk, static_cast<size_t>(got));
    }
    return true;
  }

  std::string take_line() {
    size_t eol;
    while ((eol = buffered.find("\r\n")) == std::string::npos)
      REQUIRE(fill(buffered.size() + 1));
    auto line = buffered.substr(0, eol);
    buffered.erase(0, eol + 2);
    return line;
  }

  struct response {
    int status = 0;
    std::string head; ///< status line and headers
    std::string body;
  };

  response read_response() {
    response out;
    auto status_line = take_line();
    out.status = std::stoi(status_line.substr(9, 3));
    out.head = status_line + "\n";
    size_t length = 0;
    bool chunked = false;
    for (auto line = take_line(); !line.empty(); line = take_line()) {
      out.head += line + "\n";
      auto lower = line;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (lower.rfind("content-length:", 0) == 0)
        length = std::stoul(line.substr(15));
      if (lower == "transfer-encoding: chunked")
        chunked = true;
    }
    if (!chunked) {
      REQUIRE(fill(length));
      out.body = buffered.substr(0, length);
      buffered.erase(0, length);
      return out;
    }
    for (;;) {
      auto size = std::stoul(take_line(), nullptr, 16);
      REQUIRE(fill(size + 2));
      out.body += buffered.substr(0, size);
      buffered.erase(0, size + 2);
      if (size == 0)
        return out;
    }
  }

  /// True when the server closed the connection (nothing more to read).
  bool closed() {
    return !fill(buffered.size() + 1);
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// How many times `part` occurs in `text` (e.g. access lines in a log).
size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos;
       at = text.find(part, at + 1))
    ++n;
  return n;
}

std::string chat_request_bytes(const std::string& body,
                               const std::string& extra_headers = "") {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
         "Bearer " + the_key + "\r\nContent-Type: application/json\r\n"
         + extra_headers + "Content-Length: " + std::to_string(body.size())
         + "\r\n\r\n" + body;
}

} // namespace

TEST_CASE("serve: one connection carries pipelined, split, streamed and "
          "closing requests") {
  serve_fixture f;
  const std::string plain
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  const std::string streamed
    = R"({"model":"LLM","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  raw_connection c{f.port};
  // Two requests in one write: two answers, in order, each its own call.
  c.send(chat_request_bytes(plain) + chat_request_bytes(plain));
  auto first = c.read_response();
  auto second = c.read_response();
  CHECK(first.status == 200);
  CHECK(second.status == 200);
  CHECK(has(first.body, "\"chat.completion\""));
  CHECK(has(second.body, "\"chat.completion\""));
  CHECK(json::parse(first.body).at("id") != json::parse(second.body).at("id"));
  // A request whose body comes in two writes.
  auto bytes = chat_request_bytes(plain);
  c.send(bytes.substr(0, bytes.size() - 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.send(bytes.substr(bytes.size() - 10));
  CHECK(c.read_response().status == 200);
  // A streamed request and a plain one in one write: the SSE answer
  // (chunked, ended), then the plain one.
  c.send(chat_request_bytes(streamed) + chat_request_bytes(plain));
  auto sse = c.read_response();
  CHECK(sse.status == 200);
  CHECK(has(sse.head, "x-pgw-stream-mode: live"));
  CHECK(has(sse.body, "\"chat.completion.chunk\""));
  CHECK(has(sse.body, "data: [DONE]"));
  CHECK(c.read_response().status == 200);
  // A stream that fails before its first delta: an ordinary error answer.
  auto down = (c.send(chat_request_bytes(
                 R"({"model":"DOWN","stream":true,"messages":[{"role":"user","content":"hi"}]})")),
               c.read_response());
  CHECK(down.status == 503);
  // The message names the source's cause (its status), not only the code.
  CHECK(has(down.body, "d: http_503 (503 "));
  CHECK(has(down.head, "application/json"));
  CHECK(has(down.head, "Retry-After"));
  // A bad body on the same connection: the usual 400; a stream after it.
  auto bad = (c.send(chat_request_bytes(R"({"model":"LLM"})")), c.read_response());
  CHECK(bad.status == 400);
  CHECK(has(bad.body, "invalid_request"));
  c.send(chat_request_bytes(streamed));
  auto after = c.read_response();
  CHECK(after.status == 200);
  CHECK(has(after.body, "data: [DONE]"));
  // `Connection: close`: answered, then closed.
  raw_connection last{f.port};
  last.send(chat_request_bytes(plain, "Connection: close\r\n"));
  auto closing = last.read_response();
  CHECK(closing.status == 200);
  CHECK(has(closing.head, "Connection: close"));
  CHECK(last.closed());
  // Every request was logged, the 400 too.
  auto count = [](const std::string& log) {
    return occurrences(log, "access POST /v1/chat/completions");
  };
  auto lines = count(
    f.stderr_when([&](const std::string& log) { return count(log) >= 9; }));
  CHECK(lines == 9);
}

TEST_CASE("serve: a request sent while a call runs is answered after it, "
          "and a hang-up behind it still cancels the call") {
  serve_fixture f;
  const std::string plain
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  {
    // The second request arrives while the first call waits on its
    // upstream (300 ms to the first token): both answered, in order.
    raw_connection c{f.port};
    c.send(chat_request_bytes(
      R"({"model":"SHORT","messages":[{"role":"user","content":"hi"}]})"));
    f.wait_for_upstream("slow_short");
    c.send(chat_request_bytes(plain));
    auto first = c.read_response();
    auto second = c.read_response();
    CHECK(first.status == 200);
    CHECK(second.status == 200);
    CHECK(json::parse(first.body).at("model").as_string() == "SHORT");
    CHECK(json::parse(second.body).at("model").as_string() == "LLM");
  }
  {
    // A request sent during a call, then the hang-up: the call is
    // cancelled at once (the answer would take 5 s). Before, the watch
    // ended at the first pipelined byte and the call ran on.
    raw_connection c{f.port};
    c.send(chat_request_bytes(
      R"({"model":"SLOW","messages":[{"role":"user","content":"hi"}]})"));
    f.wait_for_upstream("slow_abort");
    c.send(chat_request_bytes(plain));
  }
  auto slow = f.upstream_ended("slow_abort");
  REQUIRE_FALSE(slow.empty());
  CHECK(slow.at("client_closed").as_bool());
  CHECK(slow.at("ended_ms").to_number<double>()
          - slow.at("arrived_ms").to_number<double>()
        < 2000);
}

namespace {

/// The connection closes right after its answer, not when the keep-alive
/// wait (2 s) ends.
void closes_at_once(raw_connection& c) {
  auto t0 = std::chrono::steady_clock::now();
  CHECK(c.closed());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

} // namespace

TEST_CASE("serve: a Connection field listing close among other options "
          "closes after the answer") {
  // RFC 9110 §7.6.1: Connection is a list of options. Only the exact value
  // "close" closed before; "keep-alive, close" kept the connection open,
  // on the front's own answers and on those httplib gives.
  serve_fixture f;
  const std::string plain
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  SUBCASE("a chat answer from the front") {
    raw_connection c{f.port};
    c.send(chat_request_bytes(plain, "Connection: keep-alive, Close\r\n"));
    auto r = c.read_response();
    CHECK(r.status == 200);
    CHECK(has(r.head, "Connection: close"));
    closes_at_once(c);
  }
  SUBCASE("an answer from the httplib side (a GET route)") {
    raw_connection c{f.port};
    c.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
           "Connection: close\r\n\r\n");
    auto r = c.read_response();
    CHECK(r.status == 200);
    CHECK(has(r.head, "Connection: close"));
    closes_at_once(c);
  }
  SUBCASE("keep-alive alone keeps it open for the next request") {
    raw_connection c{f.port};
    c.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
    CHECK(c.read_response().status == 200);
    c.send(chat_request_bytes(plain, "Connection: keep-alive\r\n"));
    CHECK(c.read_response().status == 200);
  }
}

TEST_CASE("serve: a request with an absolute-form target is answered as its "
          "path") {
  // RFC 9112 §3.2.2: a server accepts `POST http://host/path` (what a
  // client configured to use serve as its proxy sends). Before: 404.
  serve_fixture f;
  const std::string plain
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  auto origin = "http://127.0.0.1:" + std::to_string(f.port);
  raw_connection c{f.port};
  auto chat = chat_request_bytes(plain);
  chat.replace(chat.find("/v1/"), 0, origin);
  c.send(chat);
  auto answered = c.read_response();
  CHECK(answered.status == 200);
  CHECK(has(answered.body, "\"chat.completion\""));
  // A route httplib answers, on the same connection.
  c.send("GET " + origin + "/v1/models HTTP/1.1\r\nHost: x\r\n"
         "Authorization: Bearer " + the_key + "\r\n\r\n");
  auto models = c.read_response();
  CHECK(models.status == 200);
  CHECK(has(models.body, "\"LLM\""));
}

TEST_CASE("serve: an access log nobody reads does not stall the calls") {
  // Serve's stderr is a pipe (a FIFO) the test does not read while it
  // sends 2,000 calls, whose access lines (about 90 bytes each) are more
  // than the pipe holds (64 KiB). Written where the calls run, they would
  // stop serve at the pipe's capacity: the front writes its lines on the
  // thread that runs every actor.
  serve_fixture f{{}, "127.0.0.1:0", {true, 0}};
  auto bytes = chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})");
  raw_connection c{f.port};
  constexpr int calls = 2000;
  int ok = 0;
  for (int i = 0; i < calls; ++i) {
    c.send(bytes);
    ok += c.read_response().status == 200 ? 1 : 0;
  }
  CHECK(ok == calls);
  // Now read the pipe: every line arrives (the writer's queue held them).
  std::string log;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t lines = 0;
  while (lines < calls && std::chrono::steady_clock::now() < until) {
    pollfd p{f.unread_stderr, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0)
      continue;
    char buf[65536];
    auto n = ::read(f.unread_stderr, buf, sizeof buf);
    if (n <= 0)
      break;
    log.append(buf, static_cast<size_t>(n));
    lines = 0;
    for (auto at = log.find("access POST /v1/chat/completions 200");
         at != std::string::npos;
         at = log.find("access POST /v1/chat/completions 200", at + 1))
      ++lines;
  }
  CHECK(lines == calls);
  CHECK(log.find("dropped") == std::string::npos);
}

TEST_CASE("serve: out of descriptors, the front accepts again once some are "
          "free") {
  // serve may hold 96 descriptors; 200 connections arrive. It accepts
  // until it has none left (and says so once); the rest wait in the listen
  // backlog. A request on the last one is answered once the first ones
  // close and free their descriptors: the front went on accepting after
  // its accepts failed (and says that too).
  //
  // Out of descriptors, UBSan's check of an object's dynamic type cannot
  // open the pipe it probes memory with (sanitizer_common's
  // IsAccessibleMemoryRange) and reports a valid shared_ptr as "invalid
  // vptr": in a sanitizer build that false report may print here, not stop
  // serve.
  std::vector<std::string> extra;
  if (auto ubsan = std::getenv("UBSAN_OPTIONS"))
    extra.push_back(std::string{"UBSAN_OPTIONS="} + ubsan
                    + ":halt_on_error=0");
  serve_fixture f{extra, "127.0.0.1:0", {false, 96}};
  auto bytes = chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})");
  {
    raw_connection first{f.port};
    first.send(bytes);
    CHECK(first.read_response().status == 200);
  }
  std::vector<std::unique_ptr<raw_connection>> conns;
  for (int i = 0; i < 200; ++i)
    conns.push_back(std::make_unique<raw_connection>(f.port));
  auto& last = *conns.back();
  // Waited for in serve's own words, not by counting its descriptors: a
  // thread blocked in accept() holds a number that /proc does not show,
  // and serve may have inherited descriptors numbered above its limit.
  const std::string failing = "[warn] serve: cannot accept a connection "
                              "(Too many open files); trying again every "
                              "10 ms";
  auto warned = f.stderr_when([&](const std::string& text) {
    return text.find(failing) != std::string::npos;
  });
  INFO("serve stderr:\n" << warned);
  REQUIRE(warned.find(failing) != std::string::npos);
  last.send(bytes);
  conns.erase(conns.begin(), conns.begin() + 150);
  CHECK(last.read_response().status == 200);
  conns.clear();
  // The first request's access line and the last one's.
  auto answered = [](const std::string& text) {
    return occurrences(text, "access POST /v1/chat/completions 200");
  };
  auto log = f.stderr_when([&](const std::string& text) {
    return text.find("[warn] serve: accepting connections again")
             != std::string::npos
           && answered(text) == 2;
  });
  CHECK(log.find("[warn] serve: accepting connections again")
        != std::string::npos);
  CHECK(answered(log) == 2);
}

TEST_CASE("serve: a live stream whose client stops reading is dropped once "
          "it falls behind, and serve goes on answering") {
  // The upstream streams 3,000 tokens of 2,000 bytes (6 MB of content, more
  // than serve's socket buffer of at most 4 MiB and the client's take) as
  // fast as it can; the client reads nothing. Once serve's socket takes no
  // more, a write waits past the write timeout (0.5 s): serve closes the
  // connection, cancels the call and logs client_gone — also when the
  // upstream's stream ended first and only its last bytes could not be
  // written. (Whether the upstream connection
  // closed before the stream's end is not checked here: the transport reads
  // a flood as fast as it comes — a slow caller gets fewer, larger deltas,
  // not a slower read — and the simulator may finish first. The hang-up
  // tests check that at a real stream's pace.)
  serve_fixture f{{"PGW_SERVE_WRITE_TIMEOUT_S=0.5"}};
  raw_connection c{f.port, 4096};
  c.send(chat_request_bytes(
    R"({"model":"FLOOD","stream":true,"messages":[{"role":"user","content":"hi"}]})"));
  auto log = f.stderr_when(
    [](const std::string& text) {
      return text.find("access POST /v1/chat/completions 200 client_gone "
                       "scope=FLOOD ")
             != std::string::npos;
    },
    std::chrono::seconds(30));
  INFO("serve stderr:\n" << log);
  CHECK(log.find("access POST /v1/chat/completions 200 client_gone "
                 "scope=FLOOD source=f ") != std::string::npos);
  // serve goes on answering.
  raw_connection next{f.port};
  next.send(chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})"));
  CHECK(next.read_response().status == 200);
}

TEST_CASE("serve: a request that could be framed two ways is refused, once, "
          "and its connection closed") {
  serve_fixture f;
  const std::string body
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  auto refused = [&](const std::string& bytes, int status,
                     const std::string& message) {
    raw_connection c{f.port};
    c.send(bytes);
    auto r = c.read_response();
    CAPTURE(bytes.substr(0, 80));
    CHECK(r.status == status);
    CHECK(has(r.head, "Connection: close"));
    CHECK(json::parse(r.body).at("error").at("message").as_string()
          == message);
    CHECK(c.closed()); // nothing after it is read as a request
  };
  // Two lengths: the rest of the body and the GET behind it would be read
  // as requests of their own by a parser that took the first.
  refused("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
          "3\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"
            + body + "GET /healthz HTTP/1.1\r\n\r\n",
          400, "conflicting Content-Length headers (3 and 59)");
  refused("GARBAGE\r\nHost: x\r\nFoo: bar\r\n\r\n", 400,
          "the request line is not `METHOD target HTTP/1.1`: \"GARBAGE\"");
  // Answered at once, not after the read timeout.
  refused("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
          400, "Content-Length \"-5\" is not a number of bytes");
  refused("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n"
          "Transfer-Encoding: chunked\r\n\r\n",
          400, "both Content-Length and Transfer-Encoding are given (where "
               "the body ends would be ambiguous)");
  refused("GET /healthz HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n",
          431, "the request head is larger than 8192 bytes");
  refused("GET /healthz HTTP/1.1\r\n\r\n", 400,
          "the Host header is missing (an HTTP/1.1 request must name its "
          "host)");
  refused(chat_request_bytes(body, "Host: y\r\n"), 400,
          "the Host header is given more than once (which host is meant "
          "would be ambiguous)");
  // A wrong key's request is answered by httplib, which refuses it before
  // reading its body: the front's framing, not what httplib left unread,
  // says where the next request starts (its body was read as a request).
  raw_connection keep{f.port};
  keep.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
            "Bearer wrong\r\nContent-Length: " + std::to_string(body.size())
            + "\r\n\r\n" + body + chat_request_bytes(body));
  CHECK(keep.read_response().status == 401);
  CHECK(keep.read_response().status == 200);
  // The bearer scheme in any case.
  raw_connection c{f.port};
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
         "bearer " + the_key + "\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n\r\n" + body);
  CHECK(c.read_response().status == 200);
}

TEST_CASE("serve: no body length, trailers, a lower-case method, two keys "
          "and numbers beyond range are each answered at once with a named "
          "error") {
  serve_fixture f{{"PGW_SERVE_READ_TIMEOUT_S=20"}};
  const std::string body
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  auto message = [](const raw_connection::response& r) {
    return std::string(json::parse(r.body).at("error").at("message")
                         .as_string());
  };
  auto t0 = std::chrono::steady_clock::now();
  // No Content-Length: an empty body, answered at once (it was read until
  // the read timeout); the connection goes on.
  raw_connection c{f.port};
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
         "Bearer " + the_key + "\r\n\r\n" + chat_request_bytes(body));
  auto empty = c.read_response();
  CHECK(empty.status == 400);
  CHECK(message(empty) == "the body is empty (a JSON object is expected)");
  CHECK(c.read_response().status == 200);
  c.send("PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
         "Bearer " + the_key + "\r\n\r\n");
  CHECK(c.read_response().status == 404);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // A chunked body with a trailer field: served.
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
         "Bearer " + the_key + "\r\nTransfer-Encoding: chunked\r\n\r\n"
         + size + "\r\n" + body + "\r\n0\r\nX-Trailer: 1\r\n\r\n");
  CHECK(c.read_response().status == 200);
  // A lower-case method: named, not an empty 400.
  raw_connection lower{f.port};
  lower.send("post /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             "Content-Length: 2\r\n\r\n{}");
  auto m = lower.read_response();
  CHECK(m.status == 501);
  CHECK(has(message(m), "the method \"post\" is not supported"));
  // Two keys, the good one first: refused before auth.
  raw_connection two{f.port};
  two.send(chat_request_bytes(body, "Authorization: Bearer wrong\r\n"));
  auto dup = two.read_response();
  CHECK(dup.status == 400);
  CHECK(has(message(dup), "the Authorization header is given more than "
                          "once"));
  // Numbers that would not reach the upstream as written.
  auto sent = [&](const std::string& extra) {
    raw_connection n{f.port};
    n.send(chat_request_bytes(
      R"({"model":"LLM","messages":[{"role":"user","content":"hi"}],)"
      + extra + "}"));
    auto r = n.read_response();
    CHECK(r.status == 400);
    return message(r);
  };
  CHECK(sent(R"("frequency_penalty":1e400)")
        == "frequency_penalty: number out of range");
  CHECK(sent(R"("logit_bias":{"50256":-1e400})")
        == "logit_bias.50256: number out of range");
  CHECK(sent(R"("metadata":{"ids":[1,18446744073709551616]})")
        == "metadata.ids[1]: number out of range");
  // Below -2^63 an integer literal is read as a double too (rounded).
  CHECK(sent(R"("metadata":{"n":-9223372036854775809})")
        == "metadata.n: number out of range");
  CHECK(sent(R"("temperature":1e400)")
        == "temperature: number out of range (a number in [0, 2])");
  // A source's cause is named once, and the code once.
  raw_connection d{f.port};
  d.send(chat_request_bytes(
    R"({"model":"DOWN","messages":[{"role":"user","content":"hi"}]})"));
  auto down = message(d.read_response());
  CHECK(occurrences(down, "d: http_503") == 1);
  CHECK(occurrences(down, "retry_exhausted: ") == 1);
}

TEST_CASE("serve: --listen names what is wrong: a bad address or port is a "
          "usage error, an address in use says so") {
  std::vector<std::string> env{"PGW_TELEMETRY_DB=off",
                               "LLM__OPENAI__A__BASE_URL=http://127.0.0.1:9/v1",
                               "LLM__OPENAI__A__MODEL=ok"};
  auto run = [&](const std::string& listen) {
    return run_program({PGW_ACTOR_BIN, "serve", "--listen", listen}, env);
  };
  auto hex = run("127.0.0.1:0x50");
  CHECK(hex.exit_code == 2);
  CHECK(has(hex.err, "PORT a decimal number"));
  auto host = run("300.1.1.1:80");
  CHECK(host.exit_code == 2);
  CHECK(has(host.err, "300.1.1.1 is not an IPv4 or IPv6 address"));
  CHECK_FALSE(has(host.err, "no PGW_SERVE_KEYS_FILE"));
  // A port another process listens on.
  raw_upstream taken{[](raw_upstream&, int, const std::string&) {}};
  auto busy = run("127.0.0.1:" + std::to_string(taken.port()));
  CHECK(busy.exit_code == 1);
  CHECK(has(busy.err, "Address already in use"));
}

TEST_CASE("serve: an IPv6 address is printed in brackets, as --listen takes "
          "it") {
  serve_fixture f{{}, "[::1]:0"};
  CHECK(f.listening.rfind("listening [::1]:" + std::to_string(f.port), 0)
        == 0);
}

TEST_CASE("serve: clients that trickle their requests hold no thread: the "
          "health routes answer, and they are dropped at the read timeout") {
  // httplib has MAX_INFLIGHT + 8 = 9 threads. 12 clients send a whole
  // chunked request (answered on an httplib thread), then the start of the
  // next and nothing more; 12 more send the start of a chunked body. If a
  // thread waited on any of them, /healthz (an httplib route) would wait
  // behind them.
  serve_fixture f{{"PGW_SERVE_MAX_INFLIGHT=1", "PGW_SERVE_READ_TIMEOUT_S=3"}};
  const std::string body
    = R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})";
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  const std::string chunked_head
    = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
      + the_key + "\r\nTransfer-Encoding: chunked\r\n\r\n";
  std::vector<std::unique_ptr<raw_connection>> slow;
  for (int i = 0; i < 12; ++i) {
    auto c = std::make_unique<raw_connection>(f.port);
    c->send(chunked_head + size + "\r\n" + body + "\r\n0\r\n\r\n");
    CHECK(c->read_response().status == 200);
    c->send(chunked_head + "100\r\n");
    slow.push_back(std::move(c));
  }
  for (int i = 0; i < 12; ++i) {
    auto c = std::make_unique<raw_connection>(f.port);
    c->send(chunked_head + "100000\r\n");
    slow.push_back(std::move(c));
  }
  auto t0 = std::chrono::steady_clock::now();
  auto health = f.http();
  health.set_read_timeout(std::chrono::seconds(2));
  auto r = health.Get("/healthz");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // Each is closed at its read timeout (3 s from its request's first byte,
  // however it trickles): the socket's own receive timeout is 10 s.
  for (auto& c : slow)
    CHECK(c->closed());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8));
}

TEST_CASE("serve: a live stream is whole for a client that pauses, however "
          "fast the upstream, and a buffered one is not inflated") {
  // 3,000 tokens of 2,000 bytes as fast as the simulator sends them. The
  // client reads nothing for 300 ms (the upstream is done by then), then
  // everything: the deltas waited for it (joined), none was dropped.
  serve_fixture f;
  auto content_of = [](const std::string& sse) {
    size_t bytes = 0;
    for (size_t at = sse.find("data: {"); at != std::string::npos;
         at = sse.find("data: {", at + 1)) {
      auto chunk = json::parse(sse.substr(at + 6, sse.find("\n", at) - at - 6));
      auto& choices = chunk.at("choices").as_array();
      if (!choices.empty() && choices[0].at("delta").as_object().contains("content"))
        bytes += choices[0].at("delta").at("content").as_string().size();
    }
    return bytes;
  };
  const std::string flood
    = R"({"model":"FLOOD","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  raw_connection live{f.port};
  live.send(chat_request_bytes(flood));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto answer = live.read_response();
  CHECK(answer.status == 200);
  CHECK(has(answer.head, "x-pgw-stream-mode: live"));
  CHECK(has(answer.body, "\"finish_reason\":\"stop\""));
  CHECK(has(answer.body, "data: [DONE]"));
  // (Its tokens are 2,000 bytes and more.)
  CHECK(content_of(answer.body) >= 3000u * 2000u);
  // Buffered: the same answer, in pieces of 4 KiB (in pieces of 16 bytes
  // its envelopes made it 74 MB).
  raw_connection buffered{f.port};
  buffered.send(chat_request_bytes(flood, "x-pgw-stream-mode: buffered\r\n"));
  auto whole = buffered.read_response();
  CHECK(whole.status == 200);
  auto content = content_of(whole.body);
  CHECK(content >= 3000u * 2000u);
  CHECK(whole.body.size() < content * 11 / 10);
}

TEST_CASE("serve: a request that stops halfway is dropped after the read "
          "timeout, an idle connection after the keep-alive time") {
  serve_fixture f{{"PGW_SERVE_READ_TIMEOUT_S=0.3"}};
  auto bytes = chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})");
  raw_connection half{f.port};
  half.send(bytes.substr(0, bytes.size() / 2));
  auto t0 = std::chrono::steady_clock::now();
  CHECK(half.closed()); // (the socket's own receive timeout is 10 s)
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= std::chrono::milliseconds(250));
  CHECK(waited < std::chrono::seconds(5));
  raw_connection idle{f.port};
  idle.send(bytes);
  CHECK(idle.read_response().status == 200);
  t0 = std::chrono::steady_clock::now();
  CHECK(idle.closed());
  waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= std::chrono::milliseconds(1500)); // keep-alive: 2 s
  CHECK(waited < std::chrono::seconds(8));
}

TEST_CASE("serve: blank lines sent between requests do not hold an idle "
          "connection past the keep-alive time") {
  // RFC 9112 lets a server ignore empty lines before a request line; each
  // one restarted the 2 s keep-alive wait, so a client sending CRLF every
  // 300 ms held its connection (and descriptor) for as long as it liked.
  serve_fixture f;
  raw_connection c{f.port};
  c.send(chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})"));
  CHECK(c.read_response().status == 200);
  auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  while (!closed
         && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8)) {
    ::send(c.sock, "\r\n", 2, MSG_NOSIGNAL); // fails once serve closed it
    pollfd p{c.sock, POLLIN, 0};
    if (::poll(&p, 1, 300) > 0) {
      char byte;
      closed = ::recv(c.sock, &byte, 1, MSG_DONTWAIT) <= 0;
    }
  }
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(closed);
  CHECK(waited >= std::chrono::milliseconds(1500)); // keep-alive: 2 s
  CHECK(waited < std::chrono::seconds(5));
  // A request after blank lines is still answered.
  raw_connection next{f.port};
  next.send("\r\n\r\n" + chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})"));
  CHECK(next.read_response().status == 200);
}

TEST_CASE("serve: SIGTERM lets a running call finish within the drain time, exit 0") {
  serve_fixture f{{"PGW_SERVE_DRAIN_S=20", "PGW_LOG=warn"}};
  auto call = f.chat_async("SHORT");
  f.wait_for_upstream("slow_short");
  f.serve.signal(SIGTERM);
  CHECK(call.get().first == 200);
  CHECK(f.serve.wait() == 0);
  auto log = f.stderr_text();
  CHECK(log.find("draining 1 call(s)") != std::string::npos);
  CHECK(log.find("access ") == std::string::npos); // PGW_LOG=warn
}

TEST_CASE("serve: SIGTERM cancels what is still running after the drain time") {
  serve_fixture f{{"PGW_SERVE_DRAIN_S=0.2"}};
  auto call = f.chat_async("SLOW");
  f.wait_for_upstream("slow_abort");
  auto t0 = std::chrono::steady_clock::now();
  f.serve.signal(SIGTERM);
  auto [status, body] = call.get();
  CHECK(status == 503);
  REQUIRE(status != 0);
  CHECK(json::parse(body).at("error").at("code").as_string() == "cancelled");
  // The server's drain, not the caller, ended it.
  CHECK(json::parse(body).at("error").at("message").as_string()
        == "cancelled: the server is shutting down: its drain time "
           "(PGW_SERVE_DRAIN_S=0.2) ran out");
  CHECK(f.serve.wait() == 0);
  // The answer needs 5 s; the drain ended it long before.
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4));
  CHECK(f.stderr_text().find("cancelling 1 call(s)") != std::string::npos);
}

namespace {

/// Signals SIGTERM to `f`'s serve, whose connections include one that a
/// write waits on, and checks that it closes them and exits 0 within the
/// drain time and the 2 s grace after it (with a margin for a busy
/// machine): `f` runs with PGW_SERVE_DRAIN_S=0.5 and the default write
/// timeout (60 s), which no client here may stretch the exit to.
/// `must_close`: the connection is sure to be open after the drain, so the
/// log must say it was closed.
void closes_and_exits_in_time(serve_fixture& f, bool must_close = true) {
  auto t0 = std::chrono::steady_clock::now();
  f.serve.signal(SIGTERM);
  auto rc = f.serve.wait_for(std::chrono::seconds(20));
  auto waited = std::chrono::steady_clock::now() - t0;
  INFO("serve stderr:\n" << f.stderr_text());
  REQUIRE(rc.has_value());
  CHECK(*rc == 0);
  CHECK(waited < std::chrono::milliseconds(500 + 2000 + 3000));
  if (must_close)
    CHECK(has(f.stderr_text(), "closing the client connections still open"));
}

/// A live stream of 6 MB of SSE, sent as fast as the simulator can: more
/// than the socket buffers take for a client that reads nothing, so that
/// serve's write waits on it.
const std::string unread_flood
  = R"({"model":"FLOOD","stream":true,"messages":[{"role":"user","content":"hi"}]})";

} // namespace

TEST_CASE("serve: after the drain a live stream whose client reads no more "
          "does not hold the exit, nor do an idle or a half-sent request") {
  serve_fixture f{{"PGW_SERVE_DRAIN_S=0.5"}};
  // The front's write to it waits for the write timeout, a minute.
  raw_connection stream{f.port, 4096};
  stream.send(chat_request_bytes(unread_flood));
  REQUIRE_FALSE(f.upstream_ended("flood").empty()); // all of it in serve
  // A keep-alive connection after its answer, and a request half sent.
  auto bytes = chat_request_bytes(
    R"({"model":"LLM","messages":[{"role":"user","content":"hi"}]})");
  raw_connection idle{f.port};
  idle.send(bytes);
  CHECK(idle.read_response().status == 200);
  raw_connection half{f.port};
  half.send(bytes.substr(0, bytes.size() / 2));
  closes_and_exits_in_time(f);
}

TEST_CASE("serve: after the drain a stream an httplib thread writes to a "
          "client that reads no more does not hold the exit") {
  // A chunked body goes to the cpp-httplib server: its thread streams the
  // answer with blocking writes, which wait for the write timeout.
  serve_fixture f{{"PGW_SERVE_DRAIN_S=0.5"}};
  char size[16];
  std::snprintf(size, sizeof size, "%zx", unread_flood.size());
  raw_connection stream{f.port, 4096};
  stream.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              "Authorization: Bearer " + the_key + "\r\n"
              "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n"
              + unread_flood + "\r\n0\r\n\r\n");
  REQUIRE_FALSE(f.upstream_ended("flood").empty()); // all of it in serve
  // cpp-httplib ends a content provider between two writes once the server
  // stops, so a slow build may finish the answer inside the drain; the
  // thread blocked in a write (a fast build) is the case closed here.
  closes_and_exits_in_time(f, false);
}

TEST_CASE("serve: no keys file on a non-loopback address warns, a bad keys "
          "file stops the start") {
  {
    serve_fixture f{{"PGW_SERVE_KEYS_FILE="}, "0.0.0.0:0"};
    auto cli = f.http();
    auto r = cli.Get("/v1/models"); // no key needed now
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(f.stderr_text().find("no PGW_SERVE_KEYS_FILE") != std::string::npos);
  }
  auto dir = temp_dir();
  std::ofstream(dir + "/keys") << "sk-a-raw-key-not-a-digest\n";
  auto r = run_program({PGW_ACTOR_BIN, "serve", "--listen", "127.0.0.1:0"},
                       {"PGW_TELEMETRY_DB=off", "PGW_SERVE_KEYS_FILE=" + dir + "/keys",
                        "LLM__OPENAI__A__BASE_URL=http://127.0.0.1:9/v1",
                        "LLM__OPENAI__A__MODEL=ok"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("line 1 is not a SHA-256 hex digest") != std::string::npos);
  CHECK(r.err.find("sk-a-raw-key") == std::string::npos); // never echoed
  std::string cmd = "rm -rf '" + dir + "'";
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("serve: a keys file in sha256sum's output format is accepted, a "
          "bad line says what was found") {
  // README's recipe, `printf %s KEY | sha256sum > keys`, writes "DIGEST  -",
  // which serve refused as "store digests, not keys".
  auto keys_dir = temp_dir();
  auto keys = keys_dir + "/keys";
  std::ofstream(keys) << the_key_digest << "  -\n"
                      << "# binary mode, a file name\n"
                      << "411459502c9d7bb257c378d48f51704b1bd7e7bd8aaee95454"
                         "b78e7d946880a2 *second key.txt\n";
  {
    serve_fixture f{{"PGW_SERVE_KEYS_FILE=" + keys}};
    auto cli = f.http();
    auto first = cli.Get("/v1/models", f.auth());
    REQUIRE(first);
    CHECK(first->status == 200);
    auto second = cli.Get("/v1/models",
                          {{"Authorization", "Bearer sk-second-key"}});
    REQUIRE(second);
    CHECK(second->status == 200);
    auto none = cli.Get("/v1/models");
    REQUIRE(none);
    CHECK(none->status == 401);
  }
  // A bad line is named with what was found, never echoed; only a line
  // that looks like a key is called one.
  auto problem = [&](const std::string& text) {
    std::ofstream(keys) << text;
    auto r = run_program({PGW_ACTOR_BIN, "config", "check"},
                         {"PGW_TELEMETRY_DB=off", "PGW_SERVE_KEYS_FILE=" + keys,
                          "LLM__OPENAI__A__BASE_URL=http://127.0.0.1:9/v1",
                          "LLM__OPENAI__A__MODEL=ok"});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(text.substr(0, 10)) == std::string::npos);
    return r.err;
  };
  auto short_digest = problem(the_key_digest.substr(1) + "  -\n");
  CHECK(short_digest.find("line 1 is not a SHA-256 hex digest") != std::string::npos);
  CHECK(short_digest.find("found 63 hex digits") != std::string::npos);
  CHECK(short_digest.find("not keys") == std::string::npos);
  auto typo = problem("# keys\n" + the_key_digest.substr(0, 10) + "g"
                      + the_key_digest.substr(11) + "\n");
  CHECK(typo.find("line 2 is not a SHA-256 hex digest") != std::string::npos);
  CHECK(typo.find("not a hex digit at column 11") != std::string::npos);
  auto raw_key = problem("sk-a-raw-key-not-a-digest\n");
  CHECK(raw_key.find("looks like an API key") != std::string::npos);
  auto empty = problem("# nothing\n\n");
  CHECK(empty.find("no key digest in the file") != std::string::npos);
  std::string cmd = "rm -rf '" + keys_dir + "'";
  CHECK(std::system(cmd.c_str()) == 0);
}

} // TEST_SUITE

// -- response cache (issue 14) ------------------------------------------------

TEST_CASE("serve: 50 identical concurrent calls make one upstream request, "
          "cache controls and a streamed hit") {
  serve_fixture fx({"PGW_CACHE_BACKEND=memory", "SHORT__CACHE__ENABLED=true"});
  auto upstream_count = [&fx](const std::string& model) {
    httplib::Client s{"127.0.0.1", fx.sim->port()};
    auto log = s.Get("/_sim/log");
    REQUIRE(log);
    size_t n = 0;
    auto parsed = json::parse(log->body);
    for (auto& e : parsed.at("requests").as_array())
      if (json::serialize(e).find("\"" + model + "\"") != std::string::npos)
        ++n;
    return n;
  };
  std::vector<std::future<std::pair<int, std::string>>> calls;
  for (int i = 0; i < 50; ++i)
    calls.push_back(fx.chat_async("SHORT"));
  std::string first_content;
  // The usage of the answers made upstream (tokens are upstream work).
  int64_t upstream_prompt = 0, upstream_completion = 0;
  auto add_usage = [&](const std::string& body) {
    auto u = json::parse(body).at("usage");
    upstream_prompt += u.at("prompt_tokens").as_int64();
    upstream_completion += u.at("completion_tokens").as_int64();
  };
  for (auto& c : calls) {
    auto [status, body] = c.get();
    INFO(body);
    REQUIRE(status == 200);
    auto obj = json::parse(body).as_object();
    auto content = json::serialize(
      obj.at("choices").at(0).at("message").at("content"));
    if (first_content.empty()) {
      first_content = content;
      add_usage(body);
    }
    CHECK(content == first_content);
    CHECK(obj.at("usage").at("completion_tokens").as_int64() > 0);
  }
  CHECK(upstream_count("slow_short") == 1);

  auto post = [&fx](const std::string& body, httplib::Headers extra) {
    auto headers = fx.auth();
    headers.insert(extra.begin(), extra.end());
    auto c = fx.http();
    auto res = c.Post("/v1/chat/completions", headers, body, "application/json");
    REQUIRE(res);
    return res;
  };
  const std::string plain
    = R"({"model":"SHORT","messages":[{"role":"user","content":"hi"}]})";
  // A streamed hit: several SSE chunks, the usage chunk, [DONE].
  auto streamed = post(
    R"({"model":"SHORT","stream":true,"stream_options":{"include_usage":true},)"
    R"("messages":[{"role":"user","content":"hi"}]})",
    {});
  CHECK(streamed->status == 200);
  CHECK(streamed->get_header_value("x-pgw-cache") == "hit");
  size_t chunks = 0;
  for (size_t p = 0; (p = streamed->body.find("data: {", p)) != std::string::npos;
       ++p)
    ++chunks;
  CHECK(chunks >= 3);
  CHECK(streamed->body.find("\"usage\"") != std::string::npos);
  CHECK(streamed->body.find("data: [DONE]") != std::string::npos);
  CHECK(upstream_count("slow_short") == 1);
  // Cache-Control: no-cache does not read (and stores the fresh answer).
  auto fresh = post(plain, {{"Cache-Control", "no-cache"}});
  CHECK(fresh->status == 200);
  CHECK(fresh->get_header_value("x-pgw-cache") == "miss");
  CHECK(upstream_count("slow_short") == 2);
  add_usage(fresh->body);
  // x-pgw-cache: off and the body's `cache` field.
  auto off = post(plain, {{"x-pgw-cache", "off"}});
  CHECK(off->get_header_value("x-pgw-cache") == "miss");
  CHECK(upstream_count("slow_short") == 3);
  add_usage(off->body);
  CHECK(post(plain, {})->get_header_value("x-pgw-cache") == "hit");
  auto bad = post(
    R"({"model":"SHORT","cache":"sometimes","messages":[{"role":"user","content":"hi"}]})",
    {});
  CHECK(bad->status == 400);
  CHECK(bad->body.find("cache") != std::string::npos);
  CHECK(upstream_count("slow_short") == 3);
  // The metrics count the tokens of the 3 upstream answers, not the hits'
  // replayed usage.
  auto m = fx.http().Get("/metrics");
  REQUIRE(m);
  INFO(m->body);
  CHECK(m->body.find("pgw_tokens_total{scope=\"SHORT\",source=\"s\","
                     "kind=\"prompt\"} "
                     + std::to_string(upstream_prompt) + "\n")
        != std::string::npos);
  CHECK(m->body.find("pgw_tokens_total{scope=\"SHORT\",source=\"s\","
                     "kind=\"completion\"} "
                     + std::to_string(upstream_completion) + "\n")
        != std::string::npos);
}

TEST_CASE("serve: while the Redis limiter cannot be read, its usage gauges "
          "are left out, not 0") {
  pgw::harness::redis_server redis;
  serve_fixture f({"PGW_LIMITER_BACKEND=redis", "PGW_BREAKER_BACKEND=redis",
                   "REDIS_URL=" + redis.url()});
  REQUIRE(f.chat_async("LLM").get().first == 200);
  auto cli = f.http();
  const std::string rpm = R"(pgw_limiter_rpm_used{scope="LLM",source="a"} )";
  const std::string tpm = R"(pgw_limiter_tpm_used{scope="LLM",source="a"} )";
  auto up = cli.Get("/metrics");
  REQUIRE(up);
  CHECK(up->body.find(rpm + "1\n") != std::string::npos);
  CHECK(up->body.find(tpm) != std::string::npos);
  redis.kill();
  // Once a status finds Redis gone (the breaker says unknown), the
  // limiter's gauges are not samples of 0.
  std::string body;
  CHECK(pgw::test::eventually(
    [&] {
      auto m = cli.Get("/metrics");
      body = m ? m->body : std::string{};
      return body.find(R"(pgw_breaker_state{scope="LLM",source="a",)"
                       R"(state="unknown"} 1)")
             != std::string::npos;
    },
    std::chrono::seconds(20)));
  INFO(body);
  CHECK(body.find(rpm) == std::string::npos);
  CHECK(body.find(tpm) == std::string::npos);
  CHECK(body.find("# TYPE pgw_limiter_rpm_used gauge") != std::string::npos);
}

TEST_CASE("serve: response_format json_schema is structured output: validated, re-asked, the JSON as content") {
  serve_fixture fx;
  auto c = fx.http();
  auto res = c.Post(
    "/v1/chat/completions", fx.auth(),
    R"({"model":"STRUCT","messages":[{"role":"user","content":"who?"}],)"
    R"("response_format":{"type":"json_schema","json_schema":{"name":"p",)"
    R"("strict":true,"schema":{"type":"object","properties":)"
    R"({"name":{"type":"string"},"age":{"type":"integer"}},)"
    R"("required":["name","age"],"additionalProperties":false}}}})",
    "application/json");
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  // The first answer is prose (re-asked), the second fenced JSON with a
  // trailing comma (repaired): the client gets plain, valid JSON.
  auto content = json::parse(res->body).at("choices").at(0).at("message")
                   .at("content").as_string();
  CHECK(json::parse(content) == json::parse(R"({"name":"Ada","age":36})"));
  httplib::Client s{"127.0.0.1", fx.sim->port()};
  auto log = s.Get("/_sim/log");
  REQUIRE(log);
  size_t asked = 0;
  auto requests = json::parse(log->body);
  for (auto& e : requests.at("requests").as_array())
    if (json::serialize(e).find("\"person\"") != std::string::npos)
      ++asked;
  CHECK(asked == 2);
  // A json_schema format without a schema object is the caller's error.
  auto bad = c.Post("/v1/chat/completions", fx.auth(),
                    R"({"model":"STRUCT","messages":[{"role":"user","content":"x"}],)"
                    R"("response_format":{"type":"json_schema","json_schema":{"name":"p"}}})",
                    "application/json");
  REQUIRE(bad);
  CHECK(bad->status == 400);
  CHECK(bad->body.find("response_format.json_schema.schema") != std::string::npos);
  // A $ref valijson cannot follow used to abort (or overflow the stack of)
  // the whole server: now it is the caller's error and the server stays up.
  for (auto [ref, said] :
       {std::pair{"#/nope", "does not resolve in the schema"},
        std::pair{"other.json", "only local $ref"}}) {
    CAPTURE(ref);
    auto body = std::string(R"({"model":"STRUCT","messages":[{"role":)"
                            R"("user","content":"x"}],"response_format":)"
                            R"({"type":"json_schema","json_schema":)"
                            R"({"name":"p","schema":{"$ref":")")
                + ref + R"("}}}})";
    auto refd = c.Post("/v1/chat/completions", fx.auth(), body,
                       "application/json");
    REQUIRE(refd);
    CHECK(refd->status == 400);
    CHECK(refd->body.find(said) != std::string::npos);
  }
  auto alive = c.Get("/healthz");
  REQUIRE(alive);
  CHECK(alive->status == 200);
}

namespace {

/// The prompt and completion tokens the simulator reported for the chat
/// requests of `model` (its log).
std::pair<int64_t, int64_t> sim_tokens_of(serve_fixture& f,
                                          const std::string& model) {
  httplib::Client s{"127.0.0.1", f.sim->port()};
  auto log = s.Get("/_sim/log");
  REQUIRE(log);
  std::pair<int64_t, int64_t> sum{0, 0};
  auto requests = json::parse(log->body);
  for (auto& e : requests.at("requests").as_array())
    if (e.at("model").as_string() == model.c_str()) {
      sum.first += e.at("prompt_tokens").to_number<int64_t>();
      sum.second += e.at("tokens_sent").to_number<int64_t>();
    }
  return sum;
}

std::string structured_person_body(const std::string& model) {
  return R"({"model":")" + model
         + R"(","messages":[{"role":"user","content":"who?"}],)"
           R"("response_format":{"type":"json_schema","json_schema":)"
           R"({"name":"p","schema":{"type":"object","properties":)"
           R"({"name":{"type":"string"},"age":{"type":"integer"}},)"
           R"("required":["name","age"]}}}})";
}

} // namespace

TEST_CASE("serve: /metrics counts the tokens of answers a call refused "
          "(schema mismatch, invalid tool calls), whether the call then "
          "succeeds or fails") {
  // STRUCT's first answer is prose (refused, re-asked), its second valid:
  // both rounds were upstream work. LLM's source answers prose every time:
  // the call ends result_invalid after its re-asks, every round spent.
  // TOOLBAD's first source answers tool calls with invalid arguments
  // (refused, failed over to the second). Before, /metrics counted only
  // the returned answer's tokens, and none of a failed call's.
  serve_fixture f;
  auto c = f.http();
  auto tools = c.Post(
    "/v1/chat/completions", f.auth(),
    R"({"model":"TOOLBAD","messages":[{"role":"user","content":"hi"}],)"
    R"("tools":[{"type":"function","function":{"name":"get_weather",)"
    R"("parameters":{"type":"object"}}}]})",
    "application/json");
  REQUIRE(tools);
  INFO(tools->body);
  REQUIRE(tools->status == 200);
  auto ok = c.Post("/v1/chat/completions", f.auth(),
                   structured_person_body("STRUCT"), "application/json");
  REQUIRE(ok);
  INFO(ok->body);
  REQUIRE(ok->status == 200);
  auto bad = c.Post("/v1/chat/completions", f.auth(),
                    structured_person_body("LLM"), "application/json");
  REQUIRE(bad);
  INFO(bad->body);
  CHECK(bad->status == 502);
  CHECK(bad->body.find("result_invalid") != std::string::npos);
  auto person = sim_tokens_of(f, "person");
  auto prose = sim_tokens_of(f, "ok");
  auto bad_tools = sim_tokens_of(f, "tools_bad");
  auto answered = json::parse(ok->body).at("usage");
  // The returned answer is only part of what was spent.
  CHECK(person.first > answered.at("prompt_tokens").to_number<int64_t>());
  CHECK(prose.first > 0);
  CHECK(bad_tools.first > 0);
  auto m = c.Get("/metrics");
  REQUIRE(m);
  INFO(m->body);
  auto line = [](const char* scope, const char* source, const char* kind,
                 int64_t n) {
    return std::string{"pgw_tokens_total{scope=\""} + scope + "\",source=\""
           + source + "\",kind=\"" + kind + "\"} " + std::to_string(n)
           + "\n";
  };
  CHECK(m->body.find(line("STRUCT", "p", "prompt", person.first))
        != std::string::npos);
  CHECK(m->body.find(line("STRUCT", "p", "completion", person.second))
        != std::string::npos);
  CHECK(m->body.find(line("LLM", "a", "prompt", prose.first))
        != std::string::npos);
  CHECK(m->body.find(line("LLM", "a", "completion", prose.second))
        != std::string::npos);
  CHECK(m->body.find(line("TOOLBAD", "bad", "prompt", bad_tools.first))
        != std::string::npos);
  CHECK(m->body.find(line("TOOLBAD", "bad", "completion", bad_tools.second))
        != std::string::npos);
  CHECK(m->body.find(R"(pgw_calls_total{scope="LLM",source="none",)"
                     R"(outcome="result_invalid"} 1)" "\n")
        != std::string::npos);
}

// -- issue 16: POST /v1/embeddings and POST /v1/ocr --------------------------

TEST_SUITE("serve") {

TEST_CASE("serve: the openai SDK's embeddings (float, base64, SDK default) "
          "are the simulator's vectors in order, kind and model errors") {
  REQUIRE_MESSAGE(have_node_client(),
                  "run `make deps` (npm ci in tests/e2e/serve_client)");
  serve_fixture f;
  auto out = f.node_case("embeddings");
  REQUIRE(out.at("ok").as_bool());
  const std::vector<std::string> inputs{"alpha", "beta", "gamma"};
  auto check = [&](const char* key, size_t n) {
    CAPTURE(key);
    auto& got = out.at(key).as_array();
    REQUIRE(got.size() == n);
    for (size_t i = 0; i < n; ++i) {
      auto expected = pgw::sim::detail::embed_vector(inputs[i], 8);
      auto& vec = got[i].as_array();
      REQUIRE(vec.size() == expected.size());
      for (size_t k = 0; k < vec.size(); ++k)
        CHECK(static_cast<float>(vec[k].to_number<double>()) == expected[k]);
    }
  };
  check("float", 3);
  check("sdk_default", 3);
  check("base64", 1);
  // Counted like chat: the route's requests and the scope's calls.
  auto cli = f.http();
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find(R"(route="/v1/embeddings",status="200")") != std::string::npos);
  CHECK(m->body.find(R"(scope="EMBED")") != std::string::npos);
  CHECK(f.stderr_when([](const std::string& log) {
          return log.find("access POST /v1/embeddings 200 scope=EMBED source=e")
                 != std::string::npos;
        }).find("access POST /v1/embeddings 200 scope=EMBED source=e")
        != std::string::npos);
}

TEST_CASE("serve: /v1/embeddings rejects dimensions, bad formats and token "
          "arrays, a pinned source (EMBED/e) answers, an unknown one is 404") {
  serve_fixture f;
  auto cli = f.http();
  auto post = [&](const std::string& body) {
    auto res = cli.Post("/v1/embeddings", f.auth(), body, "application/json");
    REQUIRE(res);
    CAPTURE(res->body);
    CHECK(json::parse(res->body).at("error").at("type").as_string()
          == "invalid_request_error");
    return std::make_pair(res->status, res->body);
  };
  // A body that is not a JSON object says what is wrong and where, as a
  // chat body's does (it said only "not a JSON object").
  auto cut = post(R"({"model":"EMBED","input":)");
  CHECK(cut.first == 400);
  CHECK(cut.second.find("the body is not valid JSON (incomplete JSON at byte "
                        "offset 25)")
        != std::string::npos);
  CHECK(post("[1]").second.find("the body must be a JSON object")
        != std::string::npos);
  auto dims = post(R"({"model":"EMBED","input":"x","dimensions":4})");
  CHECK(dims.first == 400);
  CHECK(dims.second.find("`dimensions` is not supported") != std::string::npos);
  CHECK(post(R"({"model":"EMBED","input":"x","encoding_format":"int8"})").first == 400);
  CHECK(post(R"({"model":"EMBED","input":[[1,2,3]]})").first == 400);
  // At most 2048 inputs (OpenAI's limit): each asks for a whole vector.
  std::string many = R"({"model":"EMBED","input":[)";
  for (int i = 0; i < 2049; ++i)
    many += i == 0 ? R"("a")" : R"(,"a")";
  auto too_many = post(many + "]}");
  CHECK(too_many.first == 400);
  CHECK(too_many.second.find("`input` has 2049 items; at most 2048")
        != std::string::npos);
  auto pinned = cli.Post("/v1/embeddings", f.auth(),
                         R"({"model":"EMBED/e","input":"x"})",
                         "application/json");
  REQUIRE(pinned);
  CHECK(pinned->status == 200);
  CHECK(pinned->get_header_value("x-pgw-source") == "e");
  CHECK(json::parse(pinned->body).at("model").as_string() == "EMBED/e");
  auto unknown = cli.Post("/v1/embeddings", f.auth(),
                          R"({"model":"EMBED/zz","input":"x"})",
                          "application/json");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  auto empty = post(R"({"model":"EMBED","input":["a",""]})");
  CHECK(empty.first == 400);
  CHECK(empty.second.find("input 1 is empty") != std::string::npos);
  // A batch over 256 KiB (decoded on an httplib thread, not the front's):
  // the same answer, one vector per input, in order.
  json::array inputs;
  for (int i = 0; i < 300; ++i)
    inputs.emplace_back(std::to_string(i) + std::string(1000, 'w'));
  auto big = cli.Post("/v1/embeddings", f.auth(),
                      json::serialize(json::object{{"model", "EMBED"},
                                                   {"input", inputs}}),
                      "application/json");
  REQUIRE(big);
  CHECK(big->status == 200);
  auto data = json::parse(big->body).at("data").as_array();
  REQUIRE(data.size() == 300);
  CHECK(data[299].at("index").as_int64() == 299);
}

namespace {

/// Embeds four 7-byte inputs through `f`'s EMBED scope: the answer (status
/// `status` required) and /metrics after it.
std::pair<json::object, std::string> embed_four_inputs(serve_fixture& f,
                                                       int status = 200) {
  auto cli = f.http();
  auto res = cli.Post("/v1/embeddings", f.auth(),
                      R"({"model":"EMBED","input":["aaaaaaa","bbbbbbb",)"
                      R"("ccccccc","ddddddd"]})",
                      "application/json");
  REQUIRE(res);
  CAPTURE(res->body);
  REQUIRE(res->status == status);
  auto m = cli.Get("/metrics");
  REQUIRE(m);
  return {json::parse(res->body).as_object(), m->body};
}

/// EMBED/e's counts in `metrics`: `reported` prompt tokens and
/// `estimated` tokens settled by estimate.
bool reported_and_estimated(const std::string& metrics, int reported,
                            int estimated) {
  auto has = [&](const std::string& line) {
    return metrics.find(line + "\n") != std::string::npos;
  };
  return has(R"(pgw_tokens_total{scope="EMBED",source="e",kind="prompt"} )"
             + std::to_string(reported))
         && has(R"(pgw_tokens_estimated_total{scope="EMBED",source="e"} )"
                + std::to_string(estimated));
}

} // namespace

TEST_CASE("serve: an embedding call whose sub-batches reported usage only in "
          "part counts the reported tokens in /metrics, the estimates apart") {
  // Two sub-batches of two 7-byte inputs, one after the other: the first
  // answer reports 14 / 4 = 3 prompt tokens, the second none (estimated at
  // at two tokens per input, 4).
  serve_fixture f{{"EMBED__OPENAI__E__MODEL=halfusage",
                   "EMBED__OPENAI__E__MAX_BATCH_INPUTS=2",
                   "EMBED__BATCH_CONCURRENCY=1"}};
  auto got = embed_four_inputs(f);
  auto& answer = got.first;
  auto& metrics = got.second;
  CHECK(answer.at("data").as_array().size() == 4);
  CHECK(answer.at("usage").at("prompt_tokens").as_int64() == 7);
  CHECK(answer.at("call_stats").at("usage_source").as_string()
        == "unavailable");
  INFO(metrics);
  CHECK(reported_and_estimated(metrics, 3, 4));
  CHECK(metrics.find(R"(pgw_calls_total{scope="EMBED",source="e",)"
                     R"(outcome="ok"} 1)" "\n")
        != std::string::npos);
}

TEST_CASE("serve: an embedding call whose sub-batches ran on two sources "
          "counts each source's tokens against it in /metrics") {
  // Two sub-batches of two 7-byte inputs (3 reported tokens each), one
  // after the other: the first on e, the second refused by e (400) and
  // answered by f. The call is e's (its first source); the tokens are
  // each source's. Before, all 6 were counted against e.
  serve_fixture f{{"EMBED__OPENAI__E__MODEL=emb_then_400",
                   "EMBED__OPENAI__E__MAX_BATCH_INPUTS=2",
                   "EMBED__OPENAI__F__BASE_URL={SIM_URL}",
                   "EMBED__OPENAI__F__MODEL=emb",
                   "EMBED__OPENAI__F__KIND=embedding",
                   "EMBED__OPENAI__F__PRIORITY=1",
                   "EMBED__SELECTOR=priority",
                   "EMBED__BATCH_CONCURRENCY=1"}};
  auto got = embed_four_inputs(f);
  auto& answer = got.first;
  auto& metrics = got.second;
  CHECK(answer.at("usage").at("prompt_tokens").as_int64() == 6);
  CHECK(answer.at("call_stats").at("source").as_string() == "e,f");
  INFO(metrics);
  for (auto source : {"e", "f"})
    CHECK(metrics.find(std::string(R"(pgw_tokens_total{scope="EMBED",source=")")
                       + source + R"(",kind="prompt"} 3)" "\n")
          != std::string::npos);
  CHECK(metrics.find(R"(pgw_calls_total{scope="EMBED",source="e",)"
                     R"(outcome="ok"} 1)" "\n")
        != std::string::npos);
  CHECK(metrics.find(R"(pgw_calls_total{scope="EMBED",source="f",)")
        == std::string::npos);
}

TEST_CASE("serve: an embedding call that fails after a sub-batch was "
          "answered counts that sub-batch's tokens in /metrics") {
  // Two sub-batches of two 7-byte inputs, one after the other, on the one
  // source: the first answered (3 reported tokens), the second refused
  // (400). The call fails; the tokens of the first were spent all the
  // same. Before, a failed call counted none.
  serve_fixture f{{"EMBED__OPENAI__E__MODEL=emb_then_400",
                   "EMBED__OPENAI__E__MAX_BATCH_INPUTS=2",
                   "EMBED__BATCH_CONCURRENCY=1"}};
  auto metrics = embed_four_inputs(f, 400).second;
  INFO(metrics);
  CHECK(metrics.find(R"(pgw_tokens_total{scope="EMBED",source="e",)"
                     R"(kind="prompt"} 3)" "\n")
        != std::string::npos);
  CHECK(metrics.find(R"(pgw_calls_total{scope="EMBED",source="none",)"
                     R"(outcome="request_rejected"} 1)" "\n")
        != std::string::npos);
}

TEST_CASE("serve: an embedding call that fails with a 503 after a sub-batch "
          "was answered counts the 503's estimate apart from the tokens") {
  // Two sub-batches of two 7-byte inputs, one after the other, on the one
  // source with one attempt: the first answered (3 reported tokens), the
  // second a 503 after its request was sent, so its permit settled the
  // estimate (two tokens per input, 4). Before, the failed call's /metrics
  // showed the 3 and nothing of the 4.
  serve_fixture f{{"EMBED__OPENAI__E__MODEL=emb_then_503",
                   "EMBED__OPENAI__E__MAX_BATCH_INPUTS=2",
                   "EMBED__BATCH_CONCURRENCY=1", "EMBED__MAX_ATTEMPTS=1"}};
  auto metrics = embed_four_inputs(f, 503).second;
  INFO(metrics);
  CHECK(reported_and_estimated(metrics, 3, 4));
}

TEST_CASE("serve: /v1/embeddings of 600 inputs at 1536 dimensions works with "
          "the default limits, an answer too large for one input is a 502 "
          "result_invalid, never the caller's 400") {
  json::array inputs;
  for (int i = 0; i < 600; ++i)
    inputs.emplace_back("text number " + std::to_string(i));
  {
    serve_fixture f{{"EMBED__OPENAI__E__MODEL=e1536"}};
    auto cli = f.http();
    auto res = cli.Post("/v1/embeddings", f.auth(),
                        json::serialize(json::object{{"model", "EMBED"},
                                                     {"input", inputs}}),
                        "application/json");
    REQUIRE(res);
    CAPTURE(res->body.substr(0, 1000));
    REQUIRE(res->status == 200);
    auto data = json::parse(res->body).at("data").as_array();
    REQUIRE(data.size() == 600);
    CHECK(data[599].at("index").as_int64() == 599);
    CHECK(data[599].at("embedding").as_array().size() == 1536);
    // Written straight from the vectors, each item is the very text the
    // project's JSON writer (json_text, plain decimals) makes of it.
    for (int i : {0, 599}) {
      json::array expected;
      for (auto x : pgw::sim::detail::embed_vector(
             "text number " + std::to_string(i), 1536))
        expected.emplace_back(static_cast<double>(x));
      auto item = R"({"object":"embedding","index":)" + std::to_string(i)
                  + R"(,"embedding":)" + pgw::json_text(expected) + "}";
      CHECK(res->body.find(item) != std::string::npos);
    }
    CHECK(res->body.rfind(R"({"object":"list","data":[{"object":)", 0) == 0);
  }
  serve_fixture f{{"EMBED__OPENAI__E__MODEL=e8192",
                   "EMBED__OPENAI__E__MAX_RESPONSE_BYTES=1024"}};
  auto cli = f.http();
  auto res = cli.Post("/v1/embeddings", f.auth(),
                      R"({"model":"EMBED","input":"x"})", "application/json");
  REQUIRE(res);
  CAPTURE(res->body);
  CHECK(res->status == 502);
  auto err = json::parse(res->body).at("error").as_object();
  CHECK(err.at("code").as_string() == "result_invalid");
  CHECK(err.at("type").as_string() == "api_error");
  CHECK(std::string(err.at("message").as_string())
          .find("raise EMBED__OPENAI__E__MAX_RESPONSE_BYTES")
        != std::string::npos);
}

TEST_CASE("serve: /v1/ocr reads a data: URL image and a PDF document, "
          "http URLs, oversize, wrong type, wrong kind are errors") {
  serve_fixture f;
  auto cli = f.http();
  const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + "a page";
  auto body = [](const std::string& type, const std::string& url,
                 const std::string& model = "ocr") {
    return json::serialize(json::object{
      {"model", model},
      {"document", json::object{{"type", type}, {type, url}}}});
  };
  auto data_url = [](const std::string& mime, const std::string& bytes) {
    return "data:" + mime + ";base64," + pgw::base64_encode(bytes);
  };
  auto res = cli.Post("/v1/ocr", f.auth(),
                      body("image_url", data_url("image/png", png)),
                      "application/json");
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  auto doc = json::parse(res->body).as_object();
  auto& page = doc.at("pages").at(0).as_object();
  CHECK(page.at("index").to_number<int>() == 0);
  CHECK(page.at("markdown").as_string() == pgw::sim::detail::ocr_text_of(png));
  CHECK(doc.at("model").as_string() == "ocr");
  CHECK(doc.at("usage_info").at("pages_processed").to_number<int>() == 1);
  CHECK(doc.at("usage_info").at("doc_size_bytes").to_number<size_t>() == png.size());
  CHECK(doc.at("pgw").at("source").as_string() == "m");
  CHECK(res->get_header_value("x-pgw-source") == "m");
  // Pinned to its source (SCOPE/source, as chat): the same answer.
  auto pin = cli.Post("/v1/ocr", f.auth(),
                      body("image_url", data_url("image/png", png), "ocr/m"),
                      "application/json");
  REQUIRE(pin);
  CHECK(pin->status == 200);
  CHECK(pin->get_header_value("x-pgw-source") == "m");
  // A PDF as document_url, the layout asked for (pgw's `layout: true`).
  const std::string pdf = "%PDF-1.4 tiny";
  auto lay = json::parse(body("document_url", data_url("application/pdf", pdf))).as_object();
  lay["layout"] = true;
  auto pr = cli.Post("/v1/ocr", f.auth(), json::serialize(lay), "application/json");
  REQUIRE(pr);
  INFO(pr->body);
  REQUIRE(pr->status == 200);
  auto pdoc = json::parse(pr->body);
  CHECK(pdoc.at("pages").at(0).at("blocks").as_array().size() == 2);
  auto error = [&](const std::string& b, int status, const std::string& words) {
    auto r = cli.Post("/v1/ocr", f.auth(), b, "application/json");
    REQUIRE(r);
    CAPTURE(b.substr(0, 200));
    CAPTURE(r->body);
    CHECK(r->status == status);
    CHECK(r->body.find(words) != std::string::npos);
    CHECK(json::parse(r->body).at("error").is_object());
  };
  error("", 400, "the body is empty");
  error("{\"model\":\"OCR\",\xff}", 400,
        "the body is not valid UTF-8 at byte offset 15");
  error(body("image_url", "https://example.com/a.png"), 400, "only data: URLs");
  error(body("image_url", data_url("image/png", png + std::string(1200, 'x'))),
        400, "MAX_IMAGE_BYTES=1000");
  error(body("image_url", data_url("image/png", "GIF89a not a png")), 400,
        "PNG");
  error(body("image_url", "data:image/png;base64,@@@"), 400, "malformed");
  error(body("image_url", data_url("image/png", png), "NOPE"), 404,
        "model_not_found");
  error(body("image_url", data_url("image/png", png), "ocr/zz"), 404,
        "model_not_found");
  error(body("image_url", data_url("image/png", png), "EMBED"), 400,
        "KIND=embedding, not OCR");
  error(R"({"model":"ocr","document":{"type":"file","file":"x"}})", 400,
        "document.type");
  // Only the three good requests reached the upstream: the errors are
  // answered at the edge or by the gateway, never sent on.
  httplib::Client s{"127.0.0.1", f.sim->port()};
  auto log = s.Get("/_sim/log");
  REQUIRE(log);
  CHECK(json::parse(log->body).at("requests").as_array().size() == 3);
}

} // TEST_SUITE

TEST_CASE("serve: a message's and a content part's other members, an image's detail and numbers large or long reach the upstream unchanged") {
  // Dropped before: cache_control, prefix and image_url.detail never left
  // serve (the request-level unknown fields did).
  std::mutex mtx;
  std::string seen;
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string& req) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      seen = req.substr(req.find("\r\n\r\n") + 4);
    }
    std::string body
      = R"({"id":"x","object":"chat.completion","created":1,"model":"m",)"
        R"("choices":[{"index":0,"message":{"role":"assistant",)"
        R"("content":"fine"},"finish_reason":"stop"}],)"
        R"("usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}})";
    u.send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   "Content-Length: "
                     + std::to_string(body.size()) + "\r\n\r\n" + body);
  }};
  serve_fixture f{{"RAW__GENERIC__R__BASE_URL=" + up.base_url(),
                   "RAW__GENERIC__R__MODEL=m", "RAW__STREAM=false"}};
  httplib::Client cli{"127.0.0.1", f.port};
  auto body = R"({"model":"RAW","messages":[)"
              R"({"role":"system","content":"s","cache_control":{"type":"ephemeral"}},)"
              R"({"role":"user","content":[)"
              R"({"type":"text","text":"look","cache_control":{"type":"ephemeral"}},)"
              R"({"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]},)"
              R"({"role":"assistant","content":"Sure,","prefix":true}],)"
              // Doubles as written, however large; the edges of int64 and
              // uint64 (refused before: a double of 2^64 or more could have
              // been a rounded integer).
              R"("metadata":{"big":1e20,"lo":-9223372036854775808,)"
              R"("hi":18446744073709551615,)"
              // Literals Boost.JSON 1.81's own parse reads off by an ulp or
              // more: they reach the upstream as the same doubles.
              R"("exact":[2.5e229,0.75438530415285798,-0.94930120289264419]}})";
  auto r = cli.Post("/v1/chat/completions", f.auth(), body, "application/json");
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  std::string sent;
  {
    std::lock_guard<std::mutex> guard{mtx};
    sent = seen;
  }
  INFO(sent);
  auto msgs = json::parse(sent).at("messages").as_array();
  REQUIRE(msgs.size() == 3);
  CHECK(msgs[0].at("cache_control").at("type").as_string() == "ephemeral");
  auto& parts = msgs[1].at("content").as_array();
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].at("cache_control").at("type").as_string() == "ephemeral");
  CHECK(parts[1].at("image_url").at("detail").as_string() == "low");
  CHECK(parts[1].at("image_url").at("url").as_string()
        == "https://example.com/a.png");
  CHECK(msgs[2].at("prefix").as_bool());
  CHECK(sent.find(R"("big":100000000000000000000)") != std::string::npos);
  CHECK(sent.find(R"("lo":-9223372036854775808)") != std::string::npos);
  CHECK(sent.find(R"("hi":18446744073709551615)") != std::string::npos);
  json::error_code ec;
  auto exact = pgw::parse_json(sent, ec).at("metadata").at("exact").as_array();
  REQUIRE(exact.size() == 3);
  CHECK(exact[0].as_double() == std::strtod("2.5e229", nullptr));
  CHECK(exact[1].as_double() == std::strtod("0.75438530415285798", nullptr));
  CHECK(exact[2].as_double() == std::strtod("-0.94930120289264419", nullptr));
}
