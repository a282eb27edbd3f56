// `pgw-actor embed` against a real simulator (issue 16).

#include "apps/pgw-upstream-sim/embeddings.hpp"
#include "backends/sqlite/db.hpp"
#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>

using namespace pgw::test;
namespace json = boost::json;

namespace {

/// `emb-small` takes at most 100 inputs per request and fails 30 % of its
/// requests with a 503 (flapping); `emb` is healthy. Both answer 8 floats;
/// `e1536` and `e8192` answer real-sized vectors.
constexpr const char* embed_scenario = R"({"models": {
  "emb-small": {"dim": 8, "max_inputs": 100, "faults": [{"p": 0.3, "status": 503}]},
  "emb":       {"dim": 8},
  "e1536":     {"dim": 1536},
  "e8192":     {"dim": 8192}
}})";

std::string scenario_file() {
  auto path = "/tmp/pgw-embed-e2e-" + std::to_string(::getpid()) + ".json";
  std::ofstream{path} << embed_scenario;
  return path;
}

struct embed_e2e_fixture {
  std::string scenario = scenario_file();
  sim_process sim{{"--seed", "5", "--scenario", scenario}};

  ~embed_e2e_fixture() {
    std::remove(scenario.c_str());
  }

  std::vector<std::string> source(const std::string& name,
                                  const std::string& model) {
    auto prefix = "EMBED__GENERIC__" + name + "__";
    return {prefix + "BASE_URL=" + sim.base_url(), prefix + "MODEL=" + model,
            prefix + "KIND=embedding"};
  }

  run_result embed(std::vector<std::string> args,
                   std::vector<std::string> env,
                   const std::string& input = "") {
    args.insert(args.begin(), {PGW_ACTOR_BIN, "embed"});
    return run_program(args, env, input);
  }

  /// Requests the simulator saw per model and status.
  std::map<std::string, int> seen() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    std::map<std::string, int> out;
    auto doc = json::parse(res->body);
    for (auto& e : doc.at("requests").as_array()) {
      auto& o = e.as_object();
      auto key = std::string(o.at("model").as_string()) + ":"
                 + std::to_string(o.at("status").to_number<int>());
      ++out[key];
    }
    return out;
  }
};

std::vector<std::string> concat(std::vector<std::string> a,
                                const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// "text number 0", "text number 1", ...: `n` inputs.
std::vector<std::string> numbered_texts(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back("text number " + std::to_string(i));
  return out;
}

/// `inputs` as stdin for `embed -`: one a line.
std::string lines_of(const std::vector<std::string>& inputs) {
  std::string out;
  for (auto& in : inputs)
    out += in + "\n";
  return out;
}

/// Checks that the --json answer holds, for every input in order, the
/// simulator's vector of that input's text.
void check_vectors(const std::string& out,
                   const std::vector<std::string>& inputs) {
  auto doc = json::parse(out).as_object();
  CHECK(doc.at("object").as_string() == "list");
  auto& data = doc.at("data").as_array();
  REQUIRE(data.size() == inputs.size());
  size_t wrong = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto& item = data[i].as_object();
    auto expected = pgw::sim::detail::embed_vector(inputs[i], 8);
    auto& got = item.at("embedding").as_array();
    bool same = item.at("index").to_number<size_t>() == i
                && got.size() == expected.size();
    for (size_t k = 0; same && k < got.size(); ++k)
      same = static_cast<float>(got[k].to_number<double>()) == expected[k];
    if (!same)
      ++wrong;
  }
  CHECK(wrong == 0);
}

} // namespace

TEST_CASE_FIXTURE(embed_e2e_fixture,
                  "embed: 10,000 inputs through a flapping source that takes "
                  "at most 100, order verified") {
  auto inputs = numbered_texts(10000);
  auto stdin_text = lines_of(inputs);
  auto env = concat(source("A", "emb-small"), source("B", "emb"));
  env.push_back("EMBED__GENERIC__A__MAX_BATCH_INPUTS=100");
  env.push_back("EMBED__SELECTOR=round_robin");
  env.push_back("EMBED__MAX_ATTEMPTS=6");
  env.push_back("EMBED__BACKOFF_BASE_S=0.01");
  env.push_back("EMBED__BACKOFF_MAX_S=0.05");
  auto db_path = scenario + ".sqlite";
  env.push_back("PGW_TELEMETRY_DB=" + db_path);
  auto r = embed({"-", "--json"}, env, stdin_text);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  check_vectors(r.out, inputs);
  auto doc = json::parse(r.out);
  auto stats = doc.at("call_stats").as_object();
  CHECK(stats.at("usage_source").as_string() == "reported");
  auto seen = this->seen();
  // 100 sub-batches, spread over both sources; the flapping one failed some.
  CHECK(seen["emb-small:200"] > 10);
  CHECK(seen["emb:200"] > 10);
  CHECK(seen["emb-small:200"] + seen["emb:200"] == 100);
  CHECK(seen["emb-small:503"] > 0);
  CHECK(stats.at("attempts").to_number<int>()
        == 100 + seen["emb-small:503"]);
  // One telemetry row per sub-batch request, operation embeddings.
  {
    auto db = pgw::sqlite::connection::open(db_path,
                                            pgw::sqlite::open_mode::read_only);
    REQUIRE(db);
    auto rows = db->query_text("SELECT count(*) FROM attempt WHERE "
                               "pgw_operation = 'embeddings'");
    REQUIRE(rows);
    CHECK(*rows == std::to_string(stats.at("attempts").to_number<int>()));
    auto ok = db->query_text("SELECT count(*) FROM attempt WHERE "
                             "pgw_outcome = 'ok'");
    REQUIRE(ok);
    CHECK(*ok == "100");
  }
  for (const char* suffix : {"", "-wal", "-shm"})
    std::remove((db_path + suffix).c_str());
}

TEST_CASE_FIXTURE(embed_e2e_fixture,
                  "embed: a source that rejects the batch size leaves it to "
                  "another source") {
  std::vector<std::string> inputs;
  std::vector<std::string> args{"--json"};
  for (int i = 0; i < 150; ++i) {
    inputs.push_back("word" + std::to_string(i));
    args.push_back(inputs.back());
  }
  // Sub-batches of 2048 (the default): emb-small answers 400.
  auto env = concat(source("A", "emb-small"), source("B", "emb"));
  env.push_back("EMBED__SELECTOR=priority");
  env.push_back("EMBED__GENERIC__B__PRIORITY=1"); // A (0) is tried first
  auto r = embed(args, env);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  check_vectors(r.out, inputs);
  auto seen = this->seen();
  CHECK(seen["emb-small:400"] + seen["emb-small:503"] == 1);
  CHECK(seen["emb:200"] == 1);
}

TEST_CASE_FIXTURE(embed_e2e_fixture,
                  "embed: plain output, empty input, errors and exit codes") {
  auto env = source("A", "emb");
  auto empty = embed({"--json"}, env);
  REQUIRE(empty.exit_code == 0);
  CHECK(json::parse(empty.out).at("data").as_array().empty());
  CHECK(seen().empty());
  auto r = embed({"hello", "world"}, env);
  REQUIRE(r.exit_code == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);
  auto first = json::parse(r.out.substr(0, r.out.find('\n'))).as_array();
  CHECK(first.size() == 8);
  CHECK(static_cast<float>(first[0].to_number<double>())
        == pgw::sim::detail::embed_vector("hello", 8)[0]);
  // Every source down: the gateway is unavailable (exit 4).
  auto down = embed({"--json", "x"},
                    concat(source("A", "down"),
                           {"EMBED__MAX_ATTEMPTS=2",
                            "EMBED__BACKOFF_BASE_S=0.01"}));
  CHECK(down.exit_code == 4);
  CHECK(json::parse(down.out).at("error").at("code").as_string()
        == "retry_exhausted");
  auto chat_scope = embed({"x", "--scope", "LLM"},
                          {"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                           "LLM__GENERIC__A__MODEL=ok"});
  CHECK(chat_scope.exit_code == 2);
  CHECK(chat_scope.err.find("not embeddings") != std::string::npos);
}

TEST_CASE_FIXTURE(embed_e2e_fixture,
                  "embed: --source and --scope EMBED/NAME pin the call to one "
                  "source, an unknown one is a usage error") {
  auto env = concat(source("A", "emb"), source("B", "emb-small"));
  for (auto pin : {std::vector<std::string>{"--source", "b"},
                   std::vector<std::string>{"--scope", "EMBED/B"}}) {
    CAPTURE(pin[1]);
    auto args = concat({"--json", "one", "two"}, pin);
    auto r = embed(args, concat(env, {"EMBED__BACKOFF_BASE_S=0.01"}));
    REQUIRE(r.exit_code == 0);
    check_vectors(r.out, {"one", "two"});
    CHECK(json::parse(r.out).at("call_stats").at("source").as_string() == "b");
  }
  // Only emb-small (source b) was asked, never emb.
  for (auto& [key, n] : seen())
    CHECK(key.rfind("emb-small:", 0) == 0);
  auto unknown = embed({"x", "--source", "zz"}, env);
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("source 'zz' is not in scope EMBED")
        != std::string::npos);
  auto two = embed({"x", "--scope", "EMBED/a", "--source", "b"}, env);
  CHECK(two.exit_code == 2);
  CHECK(two.err.find("two different sources pinned") != std::string::npos);
}

TEST_CASE_FIXTURE(embed_e2e_fixture,
                  "embed: 600 inputs at 1536 dimensions work with the default "
                  "limits (a sub-batch over MAX_RESPONSE_BYTES is halved), "
                  "one vector over it is result_invalid naming the key") {
  auto inputs = numbered_texts(600);
  auto r = embed({"-", "--json"}, source("A", "e1536"), lines_of(inputs));
  INFO(r.err.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  auto doc = json::parse(r.out).as_object();
  auto& data = doc.at("data").as_array();
  REQUIRE(data.size() == 600);
  for (size_t i : {size_t{0}, size_t{299}, size_t{300}, size_t{599}}) {
    CAPTURE(i);
    auto& item = data[i].as_object();
    CHECK(item.at("index").to_number<size_t>() == i);
    auto& got = item.at("embedding").as_array();
    REQUIRE(got.size() == 1536);
    auto expected = pgw::sim::detail::embed_vector(inputs[i], 1536);
    CHECK(static_cast<float>(got[1535].to_number<double>()) == expected[1535]);
  }
  // The whole list was too large for one answer: it was halved.
  CHECK(doc.at("call_stats").at("attempts").as_int64() > 1);
  auto one = embed({"x", "--json"},
                   concat(source("A", "e8192"),
                          {"EMBED__GENERIC__A__MAX_RESPONSE_BYTES=1024"}));
  CHECK(one.exit_code == 1); // not 3: the caller's request was fine
  auto err = json::parse(one.out).at("error").as_object();
  CHECK(err.at("code").as_string() == "result_invalid");
  CHECK(std::string(err.at("message").as_string())
          .find("for a single input: raise "
                "EMBED__GENERIC__A__MAX_RESPONSE_BYTES")
        != std::string::npos);
}
