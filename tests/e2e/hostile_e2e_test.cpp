// `pgw-actor` against hostile upstreams (SPEC 12), run as a user runs it,
// under an address-space limit so that unbounded growth fails the test
// instead of swapping: an endless answer fails over to a healthy source, an
// echoed API key is printed and stored nowhere, bad numbers and bad files
// are refused with the key and the limit named.

#include "fixtures/process.hpp"
#include "fixtures/raw_upstream.hpp"
#include "fixtures/redis_process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

using namespace pgw::test;
namespace json = boost::json;

namespace {

/// The address-space limit the CLI runs under (its normal peak is ~0.5 GB
/// of mostly reserved thread stacks and arenas). ASan reserves terabytes of
/// shadow memory, so sanitized builds run without it; there the tests bound
/// the child's peak resident set instead (`max_peak_rss_kib`).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool limit_address_space = false;
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool limit_address_space = false;
#  else
constexpr bool limit_address_space = true;
#  endif
#else
constexpr bool limit_address_space = true;
#endif

/// The peak RSS a flooded CLI may reach (MAX_RESPONSE_BYTES is 8 MiB; the
/// sanitizers' shadow and quarantine add a few hundred MB). Without the
/// caps the flood tests grow by ~300 MB/s until killed.
constexpr long max_peak_rss_kib = 1'000'000;

run_result pgw_limited(std::vector<std::string> args,
                       std::vector<std::string> env) {
  std::vector<std::string> argv;
  if (limit_address_space)
    argv = {"/usr/bin/prlimit", "--as=1500000000", "--"};
  argv.push_back(PGW_ACTOR_BIN);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, env);
}

const std::string sse_head = "HTTP/1.1 200 OK\r\nContent-Type: "
                             "text/event-stream\r\nTransfer-Encoding: "
                             "chunked\r\n\r\n";

std::string chunk(const std::string& bytes) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
    .count();
}

} // namespace

TEST_CASE("an endless stream fails over to a healthy source within bounded "
          "memory") {
  sim_process sim{{"--seed", "5"}};
  raw_upstream flood{[](raw_upstream& u, int fd, const std::string&) {
    auto ev = chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\""
                    + std::string(1 << 20, 'x') + "\"}}]}\n\n");
    if (!u.send_all(fd, sse_head))
      return;
    while (u.send_all(fd, ev)) {
    }
  }};
  std::vector<std::string> env{
    "LLM__SELECTOR=priority",
    "LLM__GENERIC__AFLOOD__BASE_URL=" + flood.base_url(),
    "LLM__GENERIC__AFLOOD__MODEL=m", "LLM__GENERIC__AFLOOD__PRIORITY=0",
    "LLM__GENERIC__BSIM__BASE_URL=" + sim.base_url(),
    "LLM__GENERIC__BSIM__MODEL=ok", "LLM__GENERIC__BSIM__PRIORITY=1",
    "PGW_TELEMETRY_DB=off"};
  auto t0 = std::chrono::steady_clock::now();
  auto r = pgw_limited({"chat", "--json", "hi"}, env);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto answer = json::parse(r.out).as_object();
  CHECK(answer.at("source").as_string() == "bsim");
  CHECK(flood.connections() == 1); // not retried within the call
  CHECK(seconds_since(t0) < 20);
  CHECK(r.peak_rss_kib < max_peak_rss_kib);
}

TEST_CASE("an answer over MAX_RESPONSE_BYTES and a redirect on every source "
          "are result_invalid (exit 1), not the caller's request_rejected") {
  raw_upstream huge{[](raw_upstream& u, int fd, const std::string&) {
    auto body = R"({"id":"x","object":"chat.completion","model":"m",)"
                R"("choices":[{"index":0,"message":{"role":"assistant",)"
                R"("content":")"
                + std::string(4096, 'x')
                + R"("},"finish_reason":"stop"}]})";
    u.send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   "Content-Length: "
                     + std::to_string(body.size()) + "\r\n\r\n" + body);
  }};
  raw_upstream moved{[](raw_upstream& u, int fd, const std::string&) {
    u.send_all(fd, "HTTP/1.1 302 Found\r\nLocation: http://elsewhere/\r\n"
                   "Content-Length: 0\r\n\r\n");
  }};
  std::vector<std::string> env{
    "LLM__SELECTOR=priority", "LLM__STREAM=false",
    "LLM__GENERIC__A__BASE_URL=" + huge.base_url(),
    "LLM__GENERIC__A__MODEL=m", "LLM__GENERIC__A__PRIORITY=0",
    "LLM__GENERIC__A__MAX_RESPONSE_BYTES=1024",
    "LLM__GENERIC__B__BASE_URL=" + moved.base_url(),
    "LLM__GENERIC__B__MODEL=m", "LLM__GENERIC__B__PRIORITY=1",
    "PGW_TELEMETRY_DB=off"};
  auto r = pgw_limited({"chat", "--json", "hi"}, env);
  INFO(r.out);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  auto e = json::parse(r.out).at("error").as_object();
  CHECK(e.at("code").as_string() == "result_invalid");
  auto message = std::string{e.at("message").as_string()};
  CHECK(message.find("no source gave a usable answer") != std::string::npos);
  CHECK(message.find("a: response_too_large (200)") != std::string::npos);
  CHECK(message.find("b: redirect (302") != std::string::npos);
  CHECK(huge.connections() == 1); // each source once
  CHECK(moved.connections() == 1);
}

TEST_CASE("an API key echoed by the upstream is printed and stored nowhere") {
  const std::string key = "sk-e2e-echo-secret-424242";
  raw_upstream echo{[](raw_upstream& u, int fd, const std::string& req) {
    auto body = R"({"error":{"message":"bad key: )"
                + raw_upstream::header(req, "authorization")
                + R"(","code":"invalid_api_key"}})";
    u.send_all(fd, "HTTP/1.1 400 X\r\nContent-Type: application/json\r\n"
                   "Content-Length: "
                     + std::to_string(body.size()) + "\r\n\r\n" + body);
  }};
  auto db = "/tmp/pgw-hostile-e2e-" + std::to_string(::getpid()) + ".db";
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + echo.base_url(),
    "LLM__GENERIC__A__MODEL=m", "LLM__GENERIC__A__API_KEY=" + key,
    "LLM__MAX_ATTEMPTS=2", "LLM__BACKOFF_BASE_S=0", "PGW_LOG=info",
    "PGW_TELEMETRY_DB=" + db};
  auto r = pgw_limited({"chat", "--json", "hi"}, env);
  INFO(r.out);
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.out.find("[redacted]") != std::string::npos);
  CHECK(r.out.find("e2e-echo-secret") == std::string::npos);
  CHECK(r.err.find("e2e-echo-secret") == std::string::npos);
  // SQLite keeps text as is: the key is in no byte of the database (nor of
  // its write-ahead log), while the scrubbed message is.
  std::string stored;
  for (auto& path : {db, db + "-wal"}) {
    std::ifstream in{path, std::ios::binary};
    stored += std::string{std::istreambuf_iterator<char>(in),
                          std::istreambuf_iterator<char>()};
  }
  CHECK(stored.find("[redacted]") != std::string::npos);
  CHECK(stored.find("e2e-echo-secret") == std::string::npos);
  for (auto suffix : {"", "-wal", "-shm"})
    std::remove((db + suffix).c_str());
}

TEST_CASE("chat --json prints an upstream's error text on one line") {
  raw_upstream weird{[](raw_upstream& u, int fd, const std::string&) {
    std::string body = R"({"error":{"code":"bad\"code\nx","message":)"
                       R"("line1\nline2 \"quoted\" \u0001 tab\t end"}})";
    u.send_all(fd, "HTTP/1.1 400 X\r\nContent-Type: application/json\r\n"
                   "Content-Length: "
                     + std::to_string(body.size()) + "\r\n\r\n" + body);
  }};
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=" + weird.base_url(),
                               "LLM__GENERIC__A__MODEL=m",
                               "PGW_TELEMETRY_DB=off"};
  auto r = pgw_limited({"chat", "--json", "hi"}, env);
  INFO(r.out);
  INFO(r.err);
  CHECK(r.exit_code != 0);
  auto e = json::parse(r.out).at("error").as_object();
  CHECK(e.at("upstream_code").as_string() == "bad\"code x");
  auto one_line = std::string("line1 line2 \"quoted\"   tab  end");
  CHECK(e.at("upstream_message").as_string() == one_line);
  CHECK(e.at("per_source").at("a").at("message").as_string() == one_line);
}

TEST_CASE("durations above 30 days are refused, naming the key") {
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=http://127.0.0.1:9/v1",
                               "LLM__GENERIC__A__MODEL=m",
                               "PGW_TELEMETRY_DB=off"};
  for (const char* bad : {"LLM__GENERIC__A__TIMEOUT_S=1e10",
                          "LLM__STALL_WINDOW_S=1e10"}) {
    CAPTURE(bad);
    auto with = env;
    with.push_back(bad);
    auto r = pgw_limited({"config", "check"}, with);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(std::string(bad).substr(0, std::string(bad).find('=')))
          != std::string::npos);
    CHECK(r.err.find("30 days") != std::string::npos);
  }
  auto r = pgw_limited({"chat", "--deadline", "1e10", "hi"}, env);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("30 days") != std::string::npos);
}

TEST_CASE("an env file that is a device or a FIFO is refused at once") {
  auto fifo = "/tmp/pgw-hostile-fifo-" + std::to_string(::getpid());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {std::string("/dev/zero"), fifo}) {
    CAPTURE(path);
    auto t0 = std::chrono::steady_clock::now();
    auto r = pgw_limited({"chat", "--env-file", path, "hi"}, {});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("not a regular file") != std::string::npos);
    CHECK(seconds_since(t0) < 5);
  }
  ::unlink(fifo.c_str());
}

TEST_CASE("a keys file, providers or price table that is a device, a FIFO "
          "or a directory is refused at once, naming the key") {
  // They were read without bound: /dev/zero grew until bad_alloc, a FIFO
  // blocked, a directory read as an empty or incomplete file; and `config
  // check` passed a price table or keys file that serve then refused.
  auto dir = "/tmp/pgw-hostile-dir-" + std::to_string(::getpid());
  auto fifo = dir + "/fifo";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=http://127.0.0.1:9/v1",
                               "LLM__GENERIC__A__MODEL=m",
                               "PGW_TELEMETRY_DB=off"};
  for (const char* key : {"PGW_SERVE_KEYS_FILE", "PGW_PROVIDERS_PATH",
                          "PGW_PRICING_PATH"})
    for (const std::string& path : {std::string("/dev/zero"), fifo, dir}) {
      CAPTURE(key);
      CAPTURE(path);
      auto with = env;
      with.push_back(std::string(key) + "=" + path);
      auto t0 = std::chrono::steady_clock::now();
      auto r = pgw_limited({"config", "check"}, with);
      CHECK(r.exit_code == 2);
      CHECK(r.err.find(std::string(key) + "=" + path) != std::string::npos);
      CHECK(r.err.find(path == dir ? "is a directory" : "not a regular file")
            != std::string::npos);
      CHECK(seconds_since(t0) < 5);
    }
  auto keys = env;
  keys.push_back("PGW_SERVE_KEYS_FILE=/dev/zero");
  auto serve = pgw_limited({"serve", "--listen", "127.0.0.1:0"}, keys);
  CHECK(serve.exit_code == 2);
  CHECK(serve.err.find("PGW_SERVE_KEYS_FILE=/dev/zero (key digests file): "
                       "is not a regular file")
        != std::string::npos);
  ::unlink(fifo.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("chat - and embed - read at most 8 MiB from stdin") {
  // `chat -` read stdin whole: /dev/zero aborted with bad_alloc (and no
  // {error} with --json), a 60 MB prompt took 391 MB.
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=http://127.0.0.1:9/v1",
                               "LLM__GENERIC__A__MODEL=m",
                               "EMBED__GENERIC__E__BASE_URL=http://127.0.0.1:9/v1",
                               "EMBED__GENERIC__E__MODEL=e",
                               "EMBED__GENERIC__E__KIND=embedding",
                               "PGW_TELEMETRY_DB=off"};
  for (const char* command : {"chat", "embed"}) {
    CAPTURE(command);
    std::string run = std::string("exec \"$0\" ") + command
                      + " - --json < /dev/zero";
    std::vector<std::string> argv{"/bin/sh", "-c", run};
    if (limit_address_space)
      argv.insert(argv.begin(), {"/usr/bin/prlimit", "--as=1500000000", "--"});
    argv.push_back(PGW_ACTOR_BIN);
    auto r = run_program(argv, env);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.peak_rss_kib < max_peak_rss_kib);
    auto error = json::parse(r.out).at("error").as_object();
    CHECK(error.at("code").as_string() == "invalid_request");
    CHECK(std::string(error.at("message").as_string()).find(
            "on stdin: is larger than 8388608 bytes")
          != std::string::npos);
  }
  // At the bound the prompt is read (the call then fails: no upstream).
  env.push_back("LLM__MAX_ATTEMPTS=1");
  auto at_bound = run_program({PGW_ACTOR_BIN, "chat", "-", "--json"}, env,
                              std::string(8 * 1024 * 1024, 'a'));
  CHECK(at_bound.out.find("larger than") == std::string::npos);
  CHECK(at_bound.exit_code == 4);
}

TEST_CASE("command-line numbers are decimal: hex is refused") {
  // strtod read --max-tokens 0x10 as 16, while the env keys refuse hex.
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=http://127.0.0.1:9/v1",
                               "LLM__GENERIC__A__MODEL=m",
                               "PGW_TELEMETRY_DB=off"};
  auto tokens = pgw_limited({"chat", "--max-tokens", "0x10", "hi"}, env);
  CHECK(tokens.exit_code == 2);
  CHECK(tokens.err.find("--max-tokens 0x10: must be a decimal integer >= 1")
        != std::string::npos);
  auto deadline = pgw_limited({"chat", "--deadline", "0X1p2", "hi"}, env);
  CHECK(deadline.exit_code == 2);
  CHECK(deadline.err.find("--deadline 0X1p2: must be a finite decimal number")
        != std::string::npos);
  // serve's port too (the old code went on to the keys file).
  env.push_back("PGW_SERVE_KEYS_FILE=/nonexistent/keys");
  auto port = pgw_limited({"serve", "--listen", "127.0.0.1:0x0"}, env);
  CHECK(port.exit_code == 2);
  CHECK(port.err.find("--listen 127.0.0.1:0x0: expected HOST:PORT")
        != std::string::npos);
}

TEST_CASE("a prompt that is not UTF-8 is invalid_request naming the offset") {
  sim_process sim{{"--seed", "5"}};
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                               "LLM__GENERIC__A__MODEL=ok",
                               "PGW_TELEMETRY_DB=off"};
  auto r = pgw_limited({"chat", "--json", "ab\xFF"}, env);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("invalid_request") != std::string::npos);
  CHECK(r.out.find("byte offset 2") != std::string::npos);
}

TEST_CASE("--deadline 0.3 answers in time while Redis is stalled") {
  redis_process redis;
  sim_process sim{{"--seed", "5"}};
  std::vector<std::string> env{
    "LLM__GENERIC__A__BASE_URL=" + sim.base_url(), "LLM__GENERIC__A__MODEL=ok",
    "LLM__GENERIC__A__RPM=100000", "PGW_LIMITER_BACKEND=redis",
    "PGW_BREAKER_BACKEND=redis", "REDIS_URL=" + redis.url(),
    "PGW_TELEMETRY_DB=off"};
  // A healthy run's first line (start-up, slow in a sanitizer build, and a
  // call) is the baseline the stalled run is measured against, the same way.
  auto warm_t0 = std::chrono::steady_clock::now();
  child_process warm{{PGW_ACTOR_BIN, "chat", "--json", "hi"}, env};
  auto warm_line = warm.read_line(std::chrono::seconds(10));
  auto baseline = seconds_since(warm_t0);
  warm.wait();
  REQUIRE(warm_line.find("\"content\"") != std::string::npos);
  redis.freeze();
  auto t0 = std::chrono::steady_clock::now();
  child_process proc{{PGW_ACTOR_BIN, "chat", "--json", "--deadline", "0.3",
                      "hi"},
                     env};
  auto line = proc.read_line(std::chrono::seconds(10));
  auto answered = seconds_since(t0);
  redis.thaw();
  proc.wait();
  INFO(line);
  MESSAGE("answered after " << answered << " s (a healthy run: " << baseline
                              << " s)");
  CHECK(line.find("call_deadline_exceeded") != std::string::npos);
  // The answer comes at the deadline (before: after the stuck admission's
  // 1 s command timeout, i.e. at least 1 s past the healthy run's answer);
  // the process then gives the admission up.
  CHECK(answered < baseline + 0.8);
}

TEST_CASE("soak --progress 60 ends when the soak does, not an interval "
          "later") {
  sim_process sim{{"--seed", "5"}};
  std::vector<std::string> env{"LLM__GENERIC__A__BASE_URL=" + sim.base_url(),
                               "LLM__GENERIC__A__MODEL=ok",
                               "PGW_TELEMETRY_DB=off"};
  auto t0 = std::chrono::steady_clock::now();
  auto r = pgw_limited({"soak", "--calls", "4", "--concurrency", "2",
                        "--progress", "60"},
                       env);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(seconds_since(t0) < 30);
}
