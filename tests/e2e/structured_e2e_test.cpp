// `pgw-actor chat --schema F` against a real simulator: the response-format
// ladder learned from a 400, re-asks with the validator's errors, the
// result_invalid exit, an invalid schema.

#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

using namespace pgw::test;
namespace json = boost::json;

namespace {

const char* person_schema
  = R"({"type":"object","properties":{"name":{"type":"string"},)"
    R"("age":{"type":"integer"}},"required":["name","age"],)"
    R"("additionalProperties":false})";

/// Scenario models (config/scenarios/README.md, "Structured output").
const char* scenario = R"({"models": {
  "jsonmode": {"reject_formats": ["json_schema"],
               "content": "Here it is:\n```json\n{\"name\": \"Ada\", \"age\": \"old\",}\n```",
               "json_content": "{\"name\": \"Ada\", \"age\": 36}"},
  "learner":  {"script": [{"content": "I think Ada is 36."},
                          {"content": "{\"name\": \"Ada\", \"age\": \"36\"}"},
                          {"content": "```json\n{\"name\": \"Ada\", \"age\": 36,}\n```"}]},
  "stubborn": {"content": "{\"name\": \"Ada\", \"age\": \"old\"}"}
}})";

std::string write_temp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path()
              / ("pgw-structured-e2e-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream{path, std::ios::binary} << text;
  return path.string();
}

struct structured_fixture {
  std::string scenario_path = write_temp("scenario.json", scenario);
  std::string schema_path = write_temp("schema.json", person_schema);
  sim_process sim{{"--scenario", scenario_path}};

  ~structured_fixture() {
    std::filesystem::remove(scenario_path);
    std::filesystem::remove(schema_path);
  }

  std::vector<std::string> env(const std::string& model) {
    return {"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
            "LLM__GENERIC__A__MODEL=" + model, "LLM__BACKOFF_BASE_S=0.01"};
  }

  run_result chat(std::vector<std::string> args, std::vector<std::string> env) {
    args.insert(args.begin(), {PGW_ACTOR_BIN, "chat"});
    return run_program(args, env, "");
  }

  json::array log() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    return json::parse(res->body).at("requests").as_array();
  }
};

} // namespace

TEST_CASE_FIXTURE(structured_fixture, "chat --schema: json_schema rejected with a 400, json_object honoured") {
  auto r = chat({"--json", "--schema", schema_path, "who?"}, env("jsonmode"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out).as_object();
  CHECK(out.at("parsed") == json::parse(R"({"name":"Ada","age":36})"));
  CHECK(out.at("content").as_string() == R"({"name": "Ada", "age": 36})");
  CHECK(out.at("call_stats").at("attempts").as_int64() == 2);
  CHECK(out.at("call_stats").at("reasks").as_int64() == 0);
  auto entries = log();
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].at("status").as_int64() == 400);
  CHECK(entries[1].at("status").as_int64() == 200);
  // Without --json: the validated JSON alone.
  auto plain = chat({"--schema", schema_path, "who?"}, env("jsonmode"));
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == "{\"name\":\"Ada\",\"age\":36}\n");
}

TEST_CASE_FIXTURE(structured_fixture, "chat --schema: re-asked until valid, the last answer repaired") {
  auto e = env("learner");
  e.push_back("LLM__MAX_ATTEMPTS=3");
  auto r = chat({"--json", "--schema", schema_path, "who?"}, e);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = json::parse(r.out).as_object();
  CHECK(out.at("parsed") == json::parse(R"({"name":"Ada","age":36})"));
  CHECK(out.at("call_stats").at("attempts").as_int64() == 3);
  CHECK(out.at("call_stats").at("reasks").as_int64() == 2);
  CHECK(out.at("call_stats").at("repaired").as_bool());
}

TEST_CASE_FIXTURE(structured_fixture, "chat --schema: no valid answer within MAX_REASKS is result_invalid, exit 1") {
  auto e = env("stubborn");
  e.push_back("LLM__STRUCTURED__MAX_REASKS=1");
  auto r = chat({"--json", "--schema", schema_path, "who?"}, e);
  CHECK(r.exit_code == 1);
  auto err = json::parse(r.out).at("error").as_object();
  CHECK(err.at("code").as_string() == "result_invalid");
  std::string message{err.at("message").as_string()};
  CHECK(message.find("/age: ") != std::string::npos);
  CHECK(log().size() == 2);
}

TEST_CASE_FIXTURE(structured_fixture, "chat --schema: an invalid schema is exit 2 before any upstream call") {
  auto bad = write_temp("bad.json", R"({"type":"object","required":"name"})");
  auto r = chat({"--json", "--schema", bad, "who?"}, env("stubborn"));
  std::filesystem::remove(bad);
  CHECK(r.exit_code == 2);
  auto err = json::parse(r.out).at("error").as_object();
  CHECK(err.at("code").as_string() == "invalid_request");
  CHECK(std::string(err.at("message").as_string()).find("schema /required: ")
        == 0);
  auto missing = chat({"--schema", "/nonexistent/schema.json", "who?"},
                      env("stubborn"));
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("--schema /nonexistent/schema.json: cannot be read "
                         "(No such file or directory)")
        != std::string::npos);
  CHECK(log().empty());
}

TEST_CASE_FIXTURE(structured_fixture, "chat --schema: the file is read bounded, a FIFO, a device or a big file is refused naming it, exit 2") {
  // A FIFO with no writer blocked the read forever and /dev/zero grew
  // without end: `timeout` turns a hang into exit 124.
  auto fifo = std::filesystem::temp_directory_path()
              / ("pgw-structured-e2e-" + std::to_string(::getpid()) + ".fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto big = write_temp("big.json", R"({"description":")"
                                      + std::string(200 * 1024, 'x') + "\"}");
  auto bounded = [&](const std::string& path, bool json_out) {
    std::vector<std::string> args{"/usr/bin/timeout", "20", PGW_ACTOR_BIN, "chat",
                                  "--schema", path, "who?"};
    if (json_out)
      args.push_back("--json");
    return run_program(args, env("stubborn"), "");
  };
  auto from_fifo = bounded(fifo.string(), false);
  auto from_zero = bounded("/dev/zero", false);
  auto from_big = bounded(big, false);
  auto as_json = bounded(fifo.string(), true);
  std::filesystem::remove(fifo);
  std::filesystem::remove(big);
  CHECK(from_fifo.exit_code == 2);
  CHECK(from_fifo.err.find("--schema " + fifo.string()
                           + ": is not a regular file")
        != std::string::npos);
  CHECK(from_zero.exit_code == 2);
  CHECK(from_zero.err.find("--schema /dev/zero: is not a regular file")
        != std::string::npos);
  CHECK(from_big.exit_code == 2);
  CHECK(from_big.err.find("--schema " + big + ": is larger than 131072 bytes")
        != std::string::npos);
  CHECK(as_json.exit_code == 2);
  auto err = json::parse(as_json.out).at("error").as_object();
  CHECK(err.at("code").as_string() == "invalid_request");
  CHECK(std::string(err.at("message").as_string()).rfind("--schema " + fifo.string() + ": is not a regular file", 0) == 0);
  CHECK(log().empty());
}

TEST_CASE_FIXTURE(structured_fixture, "chat --schema: an empty file is invalid_request naming it, exit 2, as a whitespace-only one") {
  // An empty schema means "no schema" to the gateway: an empty file once
  // gave unvalidated free text with exit 0.
  auto empty = write_temp("empty.json", "");
  auto blank = write_temp("blank.json", " \n");
  auto json_run = chat({"--json", "--schema", empty, "who?"}, env("stubborn"));
  auto plain = chat({"--schema", empty, "who?"}, env("stubborn"));
  auto blank_run = chat({"--json", "--schema", blank, "who?"}, env("stubborn"));
  std::filesystem::remove(empty);
  std::filesystem::remove(blank);
  CHECK(json_run.exit_code == 2);
  auto err = json::parse(json_run.out).at("error").as_object();
  CHECK(err.at("code").as_string() == "invalid_request");
  CHECK(std::string(err.at("message").as_string())
        == "--schema " + empty + ": not valid JSON (the file is empty)");
  CHECK(plain.exit_code == 2);
  CHECK(plain.out.empty());
  CHECK(plain.err.find("pgw-actor: invalid_request: --schema " + empty)
        != std::string::npos);
  CHECK(blank_run.exit_code == 2);
  CHECK(json::parse(blank_run.out).at("error").at("code").as_string()
        == "invalid_request");
  CHECK(log().empty());
}
