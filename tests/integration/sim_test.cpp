// The simulator as a real process on loopback (SPEC §11, §11.1): every
// built-in behaviour, the log, reset, timing under --time-scale, clients
// that leave, load, and the command line.

#include "apps/pgw-upstream-sim/sim.hpp"
#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace json = boost::json;
using pgw::sim::answer_text;
using pgw::test::sim_process;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// -- HTTP via cpp-httplib -----------------------------------------------------

std::string chat(const std::string& model, bool stream = false,
                 json::object extra = {}) {
  json::object o;
  o["model"] = model;
  o["messages"] = json::array{
    json::object{{"role", "user"}, {"content", "Tell me something, please."}}};
  if (stream)
    o["stream"] = true;
  for (auto& kv : extra)
    o[kv.key()] = kv.value();
  return json::serialize(o);
}

void configure(httplib::Client& c) {
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(20, 0);
  c.set_tcp_nodelay(true);
  c.set_keep_alive(true);
}

httplib::Result post(httplib::Client& c, const std::string& body,
                     const httplib::Headers& headers = {}) {
  return c.Post("/v1/chat/completions", headers, body, "application/json");
}

httplib::Result post_to(int port, const std::string& body,
                        const httplib::Headers& headers = {}) {
  httplib::Client c("127.0.0.1", port);
  configure(c);
  return post(c, body, headers);
}

json::array sim_log(int port, uint64_t* dropped = nullptr) {
  httplib::Client c("127.0.0.1", port);
  configure(c);
  auto res = c.Get("/_sim/log");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  auto doc = json::parse(res->body).as_object();
  if (dropped)
    *dropped = doc.at("dropped").to_number<uint64_t>();
  return doc.at("requests").as_array();
}

std::string sim_log_text(int port) {
  httplib::Client c("127.0.0.1", port);
  configure(c);
  auto res = c.Get("/_sim/log");
  REQUIRE(res);
  return res->body;
}

void sim_reset(int port) {
  httplib::Client c("127.0.0.1", port);
  configure(c);
  auto res = c.Post("/_sim/reset", "", "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  CHECK(json::parse(res->body) == json::parse(R"({"ok":true})"));
}

/// Polls `pred` until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = 10s) {
  auto until = steady::now() + timeout;
  while (steady::now() < until) {
    if (pred())
      return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

double num(const json::value& v) {
  return v.to_number<double>();
}

// -- SSE --------------------------------------------------------------------------

/// What a streamed body contained.
struct stream_view {
  std::vector<json::object> chunks; ///< every valid JSON event
  std::string content;              ///< delta.content joined
  int content_events = 0;
  std::string finish_reason;        ///< empty when none came
  bool role_first = false;          ///< the first event is a role-only delta
  bool usage_chunk = false;         ///< a `choices: []` event with usage
  json::object usage;
  bool done = false;                ///< `data: [DONE]` seen
  bool done_last = false;           ///< nothing after [DONE]
  int invalid = 0;                  ///< events whose data is not JSON
  int invalid_after_tokens = -1;    ///< content events before the first invalid one
};

stream_view parse_sse(const std::string& body) {
  stream_view v;
  size_t pos = 0;
  bool first = true;
  while (pos < body.size()) {
    auto end = body.find("\n\n", pos);
    if (end == std::string::npos)
      break;
    auto ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0)
      continue;
    auto data = ev.substr(6);
    if (v.done)
      v.done_last = false;
    if (data == "[DONE]") {
      v.done = v.done_last = true;
      continue;
    }
    json::error_code ec;
    auto doc = json::parse(data, ec);
    if (ec || !doc.is_object()) {
      if (v.invalid++ == 0)
        v.invalid_after_tokens = v.content_events;
      continue;
    }
    auto& o = doc.as_object();
    v.chunks.push_back(o);
    auto& choices = o.at("choices").as_array();
    if (choices.empty()) {
      if (auto* u = o.if_contains("usage")) {
        v.usage_chunk = true;
        v.usage = u->as_object();
      }
      continue;
    }
    auto& c = choices[0].as_object();
    auto& delta = c.at("delta").as_object();
    if (first)
      v.role_first = delta.size() == 1 && delta.contains("role")
                     && delta.at("role") == "assistant";
    first = false;
    if (auto* content = delta.if_contains("content")) {
      v.content += std::string(content->as_string());
      ++v.content_events;
    }
    if (!c.at("finish_reason").is_null())
      v.finish_reason = std::string(c.at("finish_reason").as_string());
  }
  return v;
}

// -- raw sockets ------------------------------------------------------------------

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

std::string raw_post(const std::string& body, const std::string& extra = {},
                     const std::string& path = "/v1/chat/completions") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
         + "Content-Type: application/json\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

void send_text(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    auto n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<size_t>(n);
  }
}

struct read_result {
  std::string data;
  bool eof = false;   ///< orderly close (FIN)
  bool error = false; ///< e.g. ECONNRESET
  int err = 0;
};

/// Reads until the peer closes, an error, `stop(data)` holds, or `timeout`.
read_result read_until(int fd, std::chrono::milliseconds timeout,
                       const std::function<bool(const std::string&)>& stop
                       = nullptr) {
  read_result r;
  auto until = steady::now() + timeout;
  for (;;) {
    if (stop && stop(r.data))
      return r;
    auto now = steady::now();
    if (now >= until)
      return r;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now);
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char buf[65536];
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      r.data.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      r.eof = true;
      return r;
    } else {
      r.error = true;
      r.err = errno;
      return r;
    }
  }
}

/// A response split into its head and its de-chunked body.
struct chunked_body {
  std::string head;
  std::string body;
  bool complete = false; ///< the terminating zero chunk arrived
};

chunked_body dechunk(const std::string& raw) {
  chunked_body out;
  auto head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos)
    return out;
  out.head = raw.substr(0, head_end + 2);
  size_t pos = head_end + 4;
  for (;;) {
    auto eol = raw.find("\r\n", pos);
    if (eol == std::string::npos)
      return out;
    auto size = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) {
      out.complete = raw.compare(eol, 4, "\r\n\r\n") == 0;
      return out;
    }
    if (raw.size() < eol + 2 + size + 2)
      return out;
    out.body += raw.substr(eol + 2, size);
    pos = eol + 2 + size + 2;
  }
}

/// The value of header `name` in `head` ("" when absent).
std::string header_value(const std::string& head, const std::string& name) {
  auto lower = [](std::string s) {
    for (auto& c : s)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  auto h = lower(head);
  auto key = "\r\n" + lower(name) + ": ";
  auto pos = h.find(key);
  if (pos == std::string::npos)
    return "";
  pos += key.size();
  return head.substr(pos, head.find("\r\n", pos) - pos);
}

/// A scenario file that removes itself.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& text) {
    char name[] = "/tmp/pgw-sim-test-XXXXXX";
    int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = name;
    std::ofstream(path) << text;
  }
  ~temp_file() {
    ::unlink(path.c_str());
  }
};

} // namespace

// -- answers --------------------------------------------------------------------

TEST_CASE("sim: ok: a non-streamed answer equals answer_text and reports usage") {
  sim_process sim;
  auto res = post_to(sim.port(), chat("ok"));
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == "application/json");
  auto doc = json::parse(res->body).as_object();
  CHECK(doc.at("object") == "chat.completion");
  CHECK(doc.contains("id"));
  CHECK(doc.contains("created"));
  CHECK(doc.at("model") == "ok");
  auto& choice = doc.at("choices").as_array().at(0).as_object();
  CHECK(choice.at("message").at("role") == "assistant");
  CHECK(choice.at("message").at("content") == answer_text("ok", 1, 20).c_str());
  CHECK(choice.at("finish_reason") == "stop");
  auto& usage = doc.at("usage").as_object();
  CHECK(usage.at("completion_tokens") == 20);
  CHECK(usage.at("prompt_tokens").as_int64() >= 1);
  CHECK(usage.at("total_tokens").as_int64()
        == usage.at("prompt_tokens").as_int64() + 20);
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 1);
  auto& e = log[0].as_object();
  CHECK(e.at("model") == "ok");
  CHECK(e.at("n") == 1);
  CHECK(e.at("action") == "ok");
  CHECK(e.at("status") == 200);
  CHECK(e.at("stream") == false);
  CHECK(e.at("client_closed") == false);
  CHECK(e.at("tokens_sent") == 20);
  CHECK(num(e.at("ended_ms")) >= num(e.at("arrived_ms")));
}

TEST_CASE("sim: ok: streamed deltas join to answer_text and the usage chunk comes only when asked") {
  sim_process sim({"--seed", "5"});
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto expected = answer_text("ok", 5, 20);
  CHECK(expected != answer_text("ok", 1, 20));

  auto res = post(c, chat("ok", true));
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == "text/event-stream");
  auto v = parse_sse(res->body);
  CHECK(v.role_first);
  CHECK(v.content == expected);
  CHECK(v.content_events == 20);
  CHECK(v.finish_reason == "stop");
  CHECK(v.done);
  CHECK(v.done_last);
  CHECK(v.invalid == 0);
  CHECK_FALSE(v.usage_chunk);
  for (auto& chunk : v.chunks) {
    CHECK(chunk.contains("id"));
    CHECK(chunk.at("object") == "chat.completion.chunk");
    CHECK(chunk.contains("created"));
    CHECK(chunk.at("model") == "ok");
  }

  auto res2 = post(c, chat("ok", true,
                           {{"stream_options", {{"include_usage", true}}}}));
  REQUIRE(res2);
  auto v2 = parse_sse(res2->body);
  CHECK(v2.content == expected);
  REQUIRE(v2.usage_chunk);
  CHECK(v2.usage.at("completion_tokens") == 20);
  CHECK(v2.usage.at("total_tokens").as_int64()
        == v2.usage.at("prompt_tokens").as_int64() + 20);
  // finish chunk, then the usage chunk, then [DONE].
  REQUIRE(v2.chunks.size() >= 2);
  CHECK(v2.chunks.back().at("choices").as_array().empty());
  CHECK(v2.done_last);

  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("stream") == true);
  CHECK(log[1].at("n") == 2);
  CHECK(log[1].at("tokens_sent") == 20);
}

TEST_CASE("sim: nousage: no usage streamed or not") {
  sim_process sim;
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto res = post(c, chat("nousage"));
  REQUIRE(res);
  auto doc = json::parse(res->body).as_object();
  CHECK_FALSE(doc.contains("usage"));
  CHECK(doc.at("choices").at(0).at("message").at("content")
        == answer_text("nousage", 1, 20).c_str());
  auto res2 = post(c, chat("nousage", true,
                           {{"stream_options", {{"include_usage", true}}}}));
  REQUIRE(res2);
  auto v = parse_sse(res2->body);
  CHECK(v.content == answer_text("nousage", 1, 20));
  CHECK_FALSE(v.usage_chunk);
  CHECK(v.done);
}

TEST_CASE("sim: max_tokens cuts the answer short with finish_reason length") {
  sim_process sim;
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto res = post(c, chat("ok", false, {{"max_tokens", 5}}));
  REQUIRE(res);
  auto doc = json::parse(res->body).as_object();
  CHECK(doc.at("choices").at(0).at("message").at("content")
        == answer_text("ok", 1, 5).c_str());
  CHECK(doc.at("choices").at(0).at("finish_reason") == "length");
  CHECK(doc.at("usage").at("completion_tokens") == 5);

  auto res2 = post(c, chat("ok", true, {{"max_completion_tokens", 7}}));
  REQUIRE(res2);
  auto v = parse_sse(res2->body);
  CHECK(v.content == answer_text("ok", 1, 7));
  CHECK(v.content_events == 7);
  CHECK(v.finish_reason == "length");
  CHECK(v.done);

  auto res3 = post(c, chat("ok", false, {{"max_tokens", 50}}));
  REQUIRE(res3);
  auto doc3 = json::parse(res3->body).as_object();
  CHECK(doc3.at("choices").at(0).at("finish_reason") == "stop");
  CHECK(doc3.at("usage").at("completion_tokens") == 20);
}

// -- status faults -------------------------------------------------------------

TEST_CASE("sim: flaky: a seed gives a pattern that repeats across resets") {
  auto run = [](int port) {
    httplib::Client c("127.0.0.1", port);
    configure(c);
    std::vector<int> statuses;
    for (int i = 0; i < 40; ++i) {
      auto res = post(c, chat("flaky"));
      REQUIRE(res);
      statuses.push_back(res->status);
    }
    return statuses;
  };
  sim_process sim({"--seed", "42"});
  auto first = run(sim.port());
  CHECK(std::count(first.begin(), first.end(), 200) > 0);
  CHECK(std::count(first.begin(), first.end(), 503) > 0);
  CHECK(std::count(first.begin(), first.end(), 200)
          + std::count(first.begin(), first.end(), 503)
        == 40);
  sim_reset(sim.port());
  auto second = run(sim.port());
  CHECK(first == second);
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 40);
  for (size_t i = 0; i < log.size(); ++i) {
    CHECK(log[i].at("n") == i + 1);
    CHECK(log[i].at("status") == first[i]);
    CHECK(log[i].at("action") == (first[i] == 200 ? "ok" : "error"));
  }
  sim_process other({"--seed", "43"});
  CHECK(run(other.port()) != first);
}

TEST_CASE("sim: down: always 503 with an OpenAI-style error body") {
  sim_process sim;
  for (int i = 0; i < 3; ++i) {
    auto res = post_to(sim.port(), chat("down"));
    REQUIRE(res);
    CHECK(res->status == 503);
    auto err = json::parse(res->body).at("error").as_object();
    CHECK(err.at("message") == "simulated 503");
    CHECK(err.at("type") == "server_error");
    CHECK(err.at("code").is_null());
  }
  auto streamed = post_to(sim.port(), chat("down", true));
  REQUIRE(streamed);
  CHECK(streamed->status == 503);
}

TEST_CASE("sim: ra2: 429 with Retry-After 2 and then answers while the log counts n") {
  sim_process sim;
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto r1 = post(c, chat("ra2"));
  REQUIRE(r1);
  CHECK(r1->status == 429);
  CHECK(r1->get_header_value("Retry-After") == "2");
  CHECK_FALSE(r1->has_header("retry-after-ms"));
  CHECK(json::parse(r1->body).at("error").at("type") == "rate_limit_error");
  auto r2 = post(c, chat("ra2"));
  REQUIRE(r2);
  CHECK(r2->status == 200);
  CHECK_FALSE(r2->has_header("Retry-After"));
  auto r3 = post(c, chat("ra2")); // the last script entry repeats
  REQUIRE(r3);
  CHECK(r3->status == 200);
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 3);
  CHECK(log[0].at("n") == 1);
  CHECK(log[0].at("action") == "error");
  CHECK(log[0].at("status") == 429);
  CHECK(log[1].at("n") == 2);
  CHECK(log[1].at("action") == "ok");
  CHECK(log[2].at("n") == 3);
  sim_reset(sim.port());
  auto again = post(c, chat("ra2"));
  REQUIRE(again);
  CHECK(again->status == 429);
  auto log2 = sim_log(sim.port());
  REQUIRE(log2.size() == 1);
  CHECK(log2[0].at("n") == 1);
}

TEST_CASE("sim: throttled: 429 without any retry hint") {
  sim_process sim;
  auto res = post_to(sim.port(), chat("throttled"));
  REQUIRE(res);
  CHECK(res->status == 429);
  CHECK_FALSE(res->has_header("Retry-After"));
  CHECK_FALSE(res->has_header("retry-after-ms"));
  CHECK(json::parse(res->body).at("error").at("code").is_null());
}

TEST_CASE("sim: reject ctx dead unauth: status and error code") {
  struct expectation {
    const char* model;
    int status;
    const char* code; // nullptr = null
    const char* type;
  };
  const expectation cases[] = {
    {"reject", 400, "content_policy_violation", "invalid_request_error"},
    {"ctx", 400, "context_length_exceeded", "invalid_request_error"},
    {"dead", 429, "insufficient_quota", "insufficient_quota"},
    {"unauth", 401, nullptr, "authentication_error"},
  };
  sim_process sim;
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  for (auto& x : cases) {
    CAPTURE(x.model);
    auto res = post(c, chat(x.model));
    REQUIRE(res);
    CHECK(res->status == x.status);
    auto err = json::parse(res->body).at("error").as_object();
    if (x.code)
      CHECK(err.at("code") == x.code);
    else
      CHECK(err.at("code").is_null());
    CHECK(err.at("type") == x.type);
    CHECK(err.at("message").is_string());
  }
}

TEST_CASE("sim: token_bytes makes each token a word repeated to that length, streamed or not") {
  temp_file file(R"({"models": {"big": {"tokens": 5, "token_bytes": 1000}}})");
  sim_process sim({"--scenario", file.path});
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto expected = answer_text("big", 1, 5, 1000);
  CHECK(expected.size() >= 5000);
  CHECK(expected.size() < 5000 + 5 * 16); // one word at most past each
  auto whole = post(c, chat("big"));
  REQUIRE(whole);
  auto doc = json::parse(whole->body).as_object();
  CHECK(doc.at("choices").as_array().at(0).at("message").at("content")
        == expected.c_str());
  CHECK(doc.at("usage").at("completion_tokens") == 5);
  auto streamed = post(c, chat("big", true));
  REQUIRE(streamed);
  auto v = parse_sse(streamed->body);
  CHECK(v.content == expected);
  CHECK(v.content_events == 5);
  // Out of range: refused with its path.
  temp_file bad(R"({"models": {"big": {"token_bytes": 70000}}})");
  auto r = pgw::test::run_program(
    {PGW_SIM_BIN, "--listen", "127.0.0.1:0", "--scenario", bad.path});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("models.big.token_bytes") != std::string::npos);
}

TEST_CASE("sim: a scenario file adds models: script with retry-after-ms and message") {
  temp_file file(R"({"models": {
    "custom": {"script": [{"status": 503, "retry_after_ms": 250,
                           "message": "busy", "code": "overloaded"},
                          {"tokens": 3}]},
    "ok": {"tokens": 4}}})");
  sim_process sim({"--scenario", file.path});
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto r1 = post(c, chat("custom"));
  REQUIRE(r1);
  CHECK(r1->status == 503);
  CHECK(r1->get_header_value("retry-after-ms") == "250");
  CHECK_FALSE(r1->has_header("Retry-After"));
  auto err = json::parse(r1->body).at("error").as_object();
  CHECK(err.at("message") == "busy");
  CHECK(err.at("code") == "overloaded");
  auto r2 = post(c, chat("custom"));
  REQUIRE(r2);
  CHECK(r2->status == 200);
  CHECK(json::parse(r2->body).at("choices").at(0).at("message").at("content")
        == answer_text("custom", 1, 3).c_str());
  auto r3 = post(c, chat("ok")); // the built-in, replaced
  REQUIRE(r3);
  CHECK(json::parse(r3->body).at("usage").at("completion_tokens") == 4);
}

// -- connection faults -----------------------------------------------------------

TEST_CASE("sim: reset: the first request sees a connection error and the next an answer") {
  sim_process sim;
  {
    int fd = connect_to(sim.port());
    send_text(fd, raw_post(chat("reset")));
    auto r = read_until(fd, 5s);
    CHECK(r.error);
    CHECK(r.err == ECONNRESET);
    CHECK(r.data.empty());
    ::close(fd);
  }
  auto ok = post_to(sim.port(), chat("reset"));
  REQUIRE(ok);
  CHECK(ok->status == 200);
  sim_reset(sim.port());
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto first = post(c, chat("reset"));
  CHECK_FALSE(first);
  auto second = post(c, chat("reset"));
  REQUIRE(second);
  CHECK(second->status == 200);
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("action") == "reset");
  CHECK(log[0].at("status") == 0);
  CHECK_FALSE(log[0].at("ended_ms").is_null());
  CHECK(log[1].at("action") == "ok");
  CHECK(log[1].at("n") == 2);
}

TEST_CASE("sim: hang: a client that leaves is noticed within milliseconds") {
  sim_process sim;
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    sim_reset(sim.port());
    int fd = connect_to(sim.port());
    auto sent = steady::now();
    send_text(fd, raw_post(chat("hang", stream)));
    // Once the request has arrived, the client gives up after 50 ms.
    REQUIRE(eventually([&] { return sim_log(sim.port()).size() == 1; }));
    auto arrival_bound
      = std::chrono::duration<double, std::milli>(steady::now() - sent).count();
    auto r = read_until(fd, 50ms);
    CHECK(r.data.empty());
    CHECK_FALSE(r.eof);
    ::close(fd);
    json::array log;
    CHECK(eventually([&] {
      log = sim_log(sim.port());
      return log.size() == 1 && !log[0].at("ended_ms").is_null();
    }));
    REQUIRE(log.size() == 1);
    auto& e = log[0].as_object();
    CHECK(e.at("action") == "hang");
    CHECK(e.at("status") == 0);
    CHECK(e.at("client_closed") == true);
    CHECK(e.at("stream") == stream);
    auto held = num(e.at("ended_ms")) - num(e.at("arrived_ms"));
    // arrival_bound (a few ms) bounds how long before our 50 ms the
    // request arrived; the rest is how fast the server noticed.
    CHECK(held >= 50);
    CHECK(held < arrival_bound + 50 + 30);
    MESSAGE("hang held " << held << " ms for a client that left after 50 ms"
                         << " (arrival bound " << arrival_bound << " ms)");
  }
}

TEST_CASE("sim: a client that leaves during latency or ttft is noticed") {
  // slow: ttft 2000 ms at time scale 1; the client leaves long before.
  sim_process sim;
  // Non-streamed: nothing sent yet.
  {
    int fd = connect_to(sim.port());
    send_text(fd, raw_post(chat("slow")));
    read_until(fd, 30ms);
    ::close(fd);
  }
  // Streamed: headers and the role chunk arrive, then the client leaves.
  {
    int fd = connect_to(sim.port());
    send_text(fd, raw_post(chat("slow", true)));
    auto r = read_until(fd, 5s, [](const std::string& d) {
      return d.find("\"role\":\"assistant\"") != std::string::npos;
    });
    CHECK(r.data.rfind("HTTP/1.1 200", 0) == 0);
    ::close(fd);
  }
  json::array log;
  CHECK(eventually([&] {
    log = sim_log(sim.port());
    return log.size() == 2 && !log[0].at("ended_ms").is_null()
           && !log[1].at("ended_ms").is_null();
  }));
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("client_closed") == true);
  CHECK(log[0].at("status") == 0);
  CHECK(num(log[0].at("ended_ms")) - num(log[0].at("arrived_ms")) < 30 + 30);
  CHECK(log[1].at("client_closed") == true);
  CHECK(log[1].at("status") == 200);
  CHECK(log[1].at("tokens_sent") == 0);
  CHECK(num(log[1].at("ended_ms")) - num(log[1].at("arrived_ms")) < 1000);
}

// -- stream faults ----------------------------------------------------------------

TEST_CASE("sim: cut: the stream closes after 5 tokens without finish_reason") {
  sim_process sim;
  int fd = connect_to(sim.port());
  send_text(fd, raw_post(chat("cut", true)));
  auto r = read_until(fd, 5s);
  ::close(fd);
  CHECK(r.eof);
  auto body = dechunk(r.data);
  CHECK(body.head.rfind("HTTP/1.1 200", 0) == 0);
  CHECK_FALSE(body.complete);
  auto v = parse_sse(body.body);
  CHECK(v.content == answer_text("cut", 1, 5));
  CHECK(v.content_events == 5);
  CHECK(v.finish_reason.empty());
  CHECK_FALSE(v.done);

  // Non-streamed: the full Content-Length is announced, half the body sent.
  int fd2 = connect_to(sim.port());
  send_text(fd2, raw_post(chat("cut")));
  auto r2 = read_until(fd2, 5s);
  ::close(fd2);
  CHECK(r2.eof);
  auto head_end = r2.data.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  auto announced = std::stoul(header_value(r2.data.substr(0, head_end + 2),
                                           "Content-Length"));
  auto got = r2.data.size() - head_end - 4;
  CHECK(got > 0);
  CHECK(got < announced);

  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("action") == "cut");
  CHECK(log[0].at("status") == 200);
  CHECK(log[0].at("tokens_sent") == 5);
  CHECK(log[0].at("client_closed") == false);
  CHECK(log[1].at("action") == "cut");
}

TEST_CASE("sim: stall: silence with the connection open for stall_ms and then close") {
  // stall_ms 30000 x 0.01 = 300 real ms.
  sim_process sim({"--time-scale", "0.01"});
  int fd = connect_to(sim.port());
  send_text(fd, raw_post(chat("stall", true)));
  auto r = read_until(fd, 5s, [](const std::string& d) {
    return parse_sse(dechunk(d).body).content_events >= 5;
  });
  auto t5 = steady::now();
  REQUIRE(parse_sse(dechunk(r.data).body).content_events == 5);
  // While it stalls the request is still in progress.
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 1);
  CHECK(log[0].at("ended_ms").is_null());
  auto rest = read_until(fd, 5s);
  auto silent = std::chrono::duration<double, std::milli>(steady::now() - t5);
  ::close(fd);
  CHECK(rest.eof);
  CHECK(rest.data.empty());
  CHECK(silent.count() >= 200); // the server-side check below is exact
  CHECK(silent.count() < 2000);
  auto body = dechunk(r.data + rest.data);
  CHECK_FALSE(body.complete);
  auto v = parse_sse(body.body);
  CHECK(v.content == answer_text("stall", 1, 5));
  CHECK(v.finish_reason.empty());
  CHECK_FALSE(v.done);
  CHECK(eventually([&] {
    log = sim_log(sim.port());
    return !log[0].at("ended_ms").is_null();
  }));
  CHECK(log[0].at("action") == "stall");
  CHECK(log[0].at("client_closed") == false);
  CHECK(num(log[0].at("ended_ms")) - num(log[0].at("arrived_ms")) >= 299);

  // Non-streamed: half the body, silence, close.
  int fd2 = connect_to(sim.port());
  send_text(fd2, raw_post(chat("stall")));
  auto t0 = steady::now();
  auto all = read_until(fd2, 5s);
  auto took = std::chrono::duration<double, std::milli>(steady::now() - t0);
  ::close(fd2);
  CHECK(all.eof);
  CHECK(took.count() >= 290);
  auto head_end = all.data.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  auto announced = std::stoul(header_value(all.data.substr(0, head_end + 2),
                                           "Content-Length"));
  CHECK(all.data.size() - head_end - 4 < announced);
  log = sim_log(sim.port());
  REQUIRE(log.size() == 2);
  CHECK(log[1].at("action") == "stall");
  CHECK(log[1].at("stream") == false);
}

TEST_CASE("sim: malformed: one invalid event after token 3 and then a normal end") {
  sim_process sim;
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto res = post(c, chat("malformed", true));
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body.find("data: {\"choices\": [\n\n") != std::string::npos);
  auto v = parse_sse(res->body);
  CHECK(v.invalid == 1);
  CHECK(v.invalid_after_tokens == 3);
  CHECK(v.content == answer_text("malformed", 1, 20));
  CHECK(v.finish_reason == "stop");
  CHECK(v.done);

  auto res2 = post(c, chat("malformed"));
  REQUIRE(res2);
  CHECK(res2->status == 200);
  json::error_code ec;
  json::parse(res2->body, ec);
  CHECK(ec);
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("action") == "malformed");
  CHECK(log[1].at("action") == "malformed");
}

TEST_CASE("sim: nodone: a complete stream without the DONE event") {
  sim_process sim;
  int fd = connect_to(sim.port());
  send_text(fd, raw_post(chat("nodone", true)));
  auto r = read_until(fd, 5s, [](const std::string& d) {
    return dechunk(d).complete;
  });
  ::close(fd);
  auto body = dechunk(r.data);
  CHECK(body.complete);
  auto v = parse_sse(body.body);
  CHECK(v.content == answer_text("nodone", 1, 20));
  CHECK(v.finish_reason == "stop");
  CHECK_FALSE(v.done);
  // Non-streamed requests are unaffected.
  auto res = post_to(sim.port(), chat("nodone"));
  REQUIRE(res);
  CHECK(res->status == 200);
  auto log = sim_log(sim.port());
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("action") == "nodone");
  CHECK(log[1].at("action") == "ok");
}

// -- time ---------------------------------------------------------------------------

TEST_CASE("sim: flap: an outage window in scaled time with recovery and restart on reset") {
  // first_ms 60000 x 0.005 = 300 real ms.
  sim_process sim({"--time-scale", "0.005"});
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  sim_reset(sim.port());
  auto first = post(c, chat("flap"));
  REQUIRE(first);
  CHECK(first->status == 503);
  CHECK(eventually(
    [&] {
      auto res = post(c, chat("flap"));
      return res && res->status == 200;
    },
    5s));
  auto log = sim_log(sim.port());
  REQUIRE(log.size() >= 2);
  for (auto& e : log) {
    if (e.at("status") == 503)
      CHECK(num(e.at("arrived_ms")) < 300);
    else
      CHECK(num(e.at("arrived_ms")) >= 300);
  }
  CHECK(log.back().at("status") == 200);
  sim_reset(sim.port());
  auto again = post(c, chat("flap"));
  REQUIRE(again);
  CHECK(again->status == 503);
}

TEST_CASE("sim: slow: timing follows --time-scale") {
  // slow: ttft 2000 + 50 tokens x 5 ms = 2250 simulated ms.
  for (double scale : {0.02, 0.1}) {
    CAPTURE(scale);
    sim_process sim({"--time-scale", std::to_string(scale)});
    double expected = 2250 * scale;
    auto t0 = steady::now();
    auto res = post_to(sim.port(), chat("slow"));
    auto took = std::chrono::duration<double, std::milli>(steady::now() - t0);
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(took.count() >= expected - 1);
    CHECK(took.count() < expected + 300);
    auto log = sim_log(sim.port());
    REQUIRE(log.size() == 1);
    auto served = num(log[0].at("ended_ms")) - num(log[0].at("arrived_ms"));
    CHECK(served >= expected - 0.1);
    CHECK(served < expected + 100);
  }
  // Streamed: the first content token comes ttft after the headers.
  sim_process sim({"--time-scale", "0.1"});
  int fd = connect_to(sim.port());
  send_text(fd, raw_post(chat("slow", true)));
  auto head = read_until(fd, 5s, [](const std::string& d) {
    return d.find("\"role\"") != std::string::npos;
  });
  auto t_head = steady::now();
  auto token = read_until(fd, 5s, [](const std::string& d) {
    return d.find("\"content\"") != std::string::npos;
  });
  auto ttft = std::chrono::duration<double, std::milli>(steady::now() - t_head);
  ::close(fd);
  CHECK(head.data.find("\"content\"") == std::string::npos);
  CHECK(ttft.count() >= 150); // 200 ms minus how late we saw the head
  CHECK(ttft.count() < 600);
}

// -- requests the simulator refuses ------------------------------------------------

TEST_CASE("sim: unknown model: 404 model_not_found") {
  sim_process sim;
  auto res = post_to(sim.port(), chat("nosuch"));
  REQUIRE(res);
  CHECK(res->status == 404);
  auto err = json::parse(res->body).at("error").as_object();
  CHECK(err.at("message") == "The model 'nosuch' does not exist");
  CHECK(err.at("type") == "invalid_request_error");
  CHECK(err.at("code") == "model_not_found");
}

TEST_CASE("sim: bad request bodies: 400 invalid_request_error") {
  sim_process sim;
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  for (std::string body : {std::string("not json"), std::string(R"({"model":"ok"})"),
                           std::string(R"({"model":"ok","messages":[]})"),
                           std::string(R"([1,2])")}) {
    CAPTURE(body);
    auto res = post(c, body);
    REQUIRE(res);
    CHECK(res->status == 400);
    CHECK(json::parse(res->body).at("error").at("type")
          == "invalid_request_error");
  }
  // Without the /v1 prefix the endpoint is the same.
  auto plain = c.Post("/chat/completions", chat("ok"), "application/json");
  REQUIRE(plain);
  CHECK(plain->status == 200);
  auto get = c.Get("/v1/chat/completions");
  REQUIRE(get);
  CHECK(get->status == 405);
  auto nowhere = c.Get("/v1/nowhere");
  REQUIRE(nowhere);
  CHECK(nowhere->status == 404);
}

TEST_CASE("sim: a chunked request body is 411, a POST without "
          "Content-Length has no body") {
  sim_process sim;
  int fd = connect_to(sim.port());
  send_text(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  auto chunked = read_until(fd, 5s);
  ::close(fd);
  CHECK(chunked.data.rfind("HTTP/1.1 411 ", 0) == 0);
  CHECK(chunked.eof);
  // RFC 9112 6.3: neither header means no body (`curl -X POST .../_sim/reset`
  // as README shows it).
  fd = connect_to(sim.port());
  send_text(fd, "POST /_sim/reset HTTP/1.1\r\nHost: x\r\n"
                "Connection: close\r\n\r\n");
  auto reset = read_until(fd, 5s);
  ::close(fd);
  CHECK(reset.data.rfind("HTTP/1.1 200 ", 0) == 0);
  fd = connect_to(sim.port());
  send_text(fd, "GARBAGE\r\n\r\n");
  auto r = read_until(fd, 5s);
  ::close(fd);
  CHECK(r.data.rfind("HTTP/1.1 400 ", 0) == 0);
}

TEST_CASE("sim: /v1/models lists every scenario model") {
  temp_file file(R"({"models": {"mine": {"tokens": 1}}})");
  sim_process sim({"--scenario", file.path});
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  auto res = c.Get("/v1/models");
  REQUIRE(res);
  CHECK(res->status == 200);
  auto doc = json::parse(res->body).as_object();
  CHECK(doc.at("object") == "list");
  std::set<std::string> ids;
  for (auto& m : doc.at("data").as_array()) {
    CHECK(m.at("object") == "model");
    ids.insert(std::string(m.at("id").as_string()));
  }
  CHECK(ids
        == std::set<std::string>{"ok", "slow", "flaky", "down", "hang",
                                 "bimodal", "ra2", "throttled", "cut", "stall",
                                 "malformed", "nodone", "reject", "ctx", "dead",
                                 "unauth", "reset", "flap", "nousage", "echo-auth", "done-hang", "finish-hang",
                  "far-retry", "redirect", "mine"});
}

// -- the log --------------------------------------------------------------------------

TEST_CASE("sim: auth: the log says whether a bearer token came but never the token") {
  sim_process sim;
  auto with = post_to(sim.port(), chat("ok"),
                      {{"Authorization", "Bearer sk-test-SECRET-7731"}});
  REQUIRE(with);
  auto without = post_to(sim.port(), chat("ok"));
  REQUIRE(without);
  auto text = sim_log_text(sim.port());
  CHECK(text.find("SECRET") == std::string::npos);
  CHECK(text.find("7731") == std::string::npos);
  auto log = json::parse(text).at("requests").as_array();
  REQUIRE(log.size() == 2);
  CHECK(log[0].at("auth") == true);
  CHECK(log[1].at("auth") == false);
}

TEST_CASE("sim: the log keeps --log-limit entries and counts the rest") {
  sim_process sim({"--log-limit", "3"});
  httplib::Client c("127.0.0.1", sim.port());
  configure(c);
  for (int i = 0; i < 5; ++i)
    REQUIRE(post(c, chat("ok")));
  uint64_t dropped = 0;
  auto log = sim_log(sim.port(), &dropped);
  CHECK(log.size() == 3);
  CHECK(dropped == 2);
  sim_reset(sim.port());
  REQUIRE(post(c, chat("ok")));
  log = sim_log(sim.port(), &dropped);
  CHECK(log.size() == 1);
  CHECK(dropped == 0);
  CHECK(log[0].at("n") == 1);
}

// -- connections and load ---------------------------------------------------------------

TEST_CASE("sim: keep-alive: pipelined requests and Connection close honoured") {
  sim_process sim;
  int fd = connect_to(sim.port());
  auto req = raw_post(chat("ok"));
  send_text(fd, req + req + raw_post(chat("ok"), "Connection: close\r\n"));
  auto r = read_until(fd, 5s);
  ::close(fd);
  CHECK(r.eof);
  size_t responses = 0;
  for (size_t pos = 0; (pos = r.data.find("HTTP/1.1 200 OK", pos))
                       != std::string::npos;
       ++pos)
    ++responses;
  CHECK(responses == 3);
  CHECK(r.data.find("Connection: close") != std::string::npos);
}

TEST_CASE("sim: 1000 concurrent hanging connections are held and then all noticed") {
  constexpr size_t count = 1000;
  sim_process sim;
  std::vector<int> fds;
  auto req = raw_post(chat("hang"));
  for (size_t i = 0; i < count; ++i) {
    fds.push_back(connect_to(sim.port()));
    send_text(fds.back(), req);
  }
  size_t in_progress = 0;
  CHECK(eventually(
    [&] {
      auto log = sim_log(sim.port());
      in_progress = 0;
      for (auto& e : log)
        in_progress += e.at("ended_ms").is_null();
      return in_progress == count;
    },
    30s));
  MESSAGE("hanging connections held at once: " << in_progress);
  CHECK(in_progress == count);
  for (int fd : fds)
    ::close(fd);
  size_t closed = 0;
  json::array log;
  CHECK(eventually(
    [&] {
      log = sim_log(sim.port());
      closed = 0;
      for (auto& e : log)
        closed += !e.at("ended_ms").is_null() && e.at("client_closed") == true;
      return closed == count;
    },
    30s));
  CHECK(closed == count);
  REQUIRE(log.size() == count);
  for (auto& e : log) {
    CHECK(e.at("action") == "hang");
    CHECK(e.at("status") == 0);
  }
}

TEST_CASE("sim: keep-alive throughput: 5000 sequential requests on one connection") {
  constexpr int count = 5000;
  sim_process sim({"--log-limit", "100000"});
  int fd = connect_to(sim.port());
  auto req = raw_post(chat("ok"));
  std::string pending;
  int completed = 0;
  auto t0 = steady::now();
  for (int i = 0; i < count; ++i) {
    send_text(fd, req);
    // Read exactly one response (framed by Content-Length).
    for (;;) {
      auto head_end = pending.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        auto length = std::stoul(
          header_value(pending.substr(0, head_end + 2), "Content-Length"));
        if (pending.size() >= head_end + 4 + length) {
          if (pending.rfind("HTTP/1.1 200 ", 0) == 0)
            ++completed;
          pending.erase(0, head_end + 4 + length);
          break;
        }
      }
      char buf[65536];
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      REQUIRE(n > 0);
      pending.append(buf, static_cast<size_t>(n));
    }
  }
  auto secs = std::chrono::duration<double>(steady::now() - t0).count();
  ::close(fd);
  CHECK(completed == count);
  MESSAGE("keep-alive: " << count << " requests in " << secs << " s = "
                         << static_cast<int>(count / secs) << " req/s");
  auto log = sim_log(sim.port());
  CHECK(log.size() == static_cast<size_t>(count));
  CHECK(log.back().at("n") == count);
}

// -- the program ---------------------------------------------------------------------------

TEST_CASE("sim: SIGTERM stops the simulator promptly with requests in flight") {
  sim_process sim;
  int hanging = connect_to(sim.port());
  send_text(hanging, raw_post(chat("hang")));
  int idle = connect_to(sim.port());
  REQUIRE(eventually([&] { return sim_log(sim.port()).size() == 1; }));
  auto t0 = steady::now();
  sim.process().signal(SIGTERM);
  CHECK(sim.process().wait() == 0);
  auto took = std::chrono::duration<double, std::milli>(steady::now() - t0);
  CHECK(took.count() < 1000);
  CHECK(read_until(hanging, 2s).eof);
  CHECK(read_until(idle, 2s).eof);
  ::close(hanging);
  ::close(idle);
}

TEST_CASE("sim: bad command-line arguments exit 2 naming the flag") {
  struct bad_args {
    std::vector<std::string> args;
    std::string expected;
  };
  const bad_args cases[] = {
    {{"--bogus"}, "--bogus"},
    {{"--seed", "abc"}, "--seed"},
    {{"--seed", "-1"}, "--seed"},
    {{"--listen", "nohost"}, "--listen"},
    {{"--listen", "127.0.0.1:99999"}, "--listen"},
    {{"--time-scale", "-1"}, "--time-scale"},
    {{"--time-scale", "fast"}, "--time-scale"},
    {{"--log-limit", "many"}, "--log-limit"},
    {{"--listen", "127.0.0.1:0", "--seed"}, "--seed: missing value"},
    {{"--scenario", "/nonexistent/scenario.json"}, "/nonexistent/scenario.json"},
  };
  for (auto& c : cases) {
    std::vector<std::string> argv{PGW_SIM_BIN};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CAPTURE(c.expected);
    auto r = pgw::test::run_program(argv);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expected) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("sim: a bad scenario file exits 2 naming the file and the JSON path") {
  temp_file bad(R"({"models": {"flaky": {"faults": [{"p": 1.5, "status": 503}]}}})");
  auto r = pgw::test::run_program(
    {PGW_SIM_BIN, "--listen", "127.0.0.1:0", "--scenario", bad.path});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(bad.path) != std::string::npos);
  CHECK(r.err.find("models.flaky.faults[0].p: must be a number in [0, 1]")
        != std::string::npos);
  temp_file not_json("{\"models\": ");
  auto r2 = pgw::test::run_program(
    {PGW_SIM_BIN, "--listen", "127.0.0.1:0", "--scenario", not_json.path});
  CHECK(r2.exit_code == 2);
  CHECK(r2.err.find(not_json.path) != std::string::npos);
  CHECK(r2.err.find("not valid JSON") != std::string::npos);
}
