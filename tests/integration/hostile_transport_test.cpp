// Both upstream transports (beast, cpp-httplib; each case runs once per
// transport, fixtures/transport_kinds.hpp) against hostile upstreams written outside the
// project (raw sockets, SPEC 12): endless answers and headers are cut at
// their caps, encodings nobody asked for are refused, [DONE] and
// finish_reason end a stream at once, echoed secrets are scrubbed,
// redirects are not followed, far-future Retry-After is capped.

#include "config/limits.hpp"
#include "config/scrub.hpp"
#include "fixtures/eventually.hpp"
#include "fixtures/raw_upstream.hpp"
#include "fixtures/sim_process.hpp"
#include "fixtures/tls_upstream.hpp"
#include "messages/registry.hpp"
#include "fixtures/transport_kinds.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

using namespace pgw;
using namespace pgw::test;

namespace {

struct config : caf::actor_system_config {
  config() {
    pgw::add_message_types(*this);
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

struct outcome_of_call {
  attempt_result result;
  double elapsed_s = 0;
};

const std::string sse_head = "HTTP/1.1 200 OK\r\nContent-Type: "
                             "text/event-stream\r\nTransfer-Encoding: "
                             "chunked\r\n\r\n";

/// One chunk of a chunked body.
std::string chunk(const std::string& bytes) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

std::string event(const std::string& json) {
  return chunk("data: " + json + "\n\n");
}

std::string delta(const std::string& content,
                  const std::string& finish = "null") {
  return R"({"choices":[{"index":0,"delta":{"content":")" + content
         + R"("},"finish_reason":)" + finish + "}]}";
}

std::string response(int status, const std::string& head_extra,
                     const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: "
         "application/json\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n" + head_extra + "\r\n" + body;
}

/// Blocks until the peer closes or we stop (a hanging upstream).
void hang(raw_upstream& up, int fd) {
  char buf[256];
  while (!up.stopping()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0 && ::recv(fd, buf, sizeof(buf), 0) <= 0)
      return;
  }
}

struct fixture {
  config cfg;
  caf::actor_system sys{cfg};
  std::string kind;
  test_transport made;
  transport_ptr tp;
  int sources = 0;

  explicit fixture(const std::string& kind_name)
    : kind(kind_name), made(make_test_transport(kind)), tp(made.tp) {
    // nop
  }

  std::shared_ptr<source_config> source(const raw_upstream& up) {
    auto src = std::make_shared<source_config>();
    src->scope = "LLM";
    src->provider = "generic";
    // One name per upstream: pooled connections are kept per source name.
    src->name = "hostile-" + std::to_string(++sources);
    src->base_url = up.base_url();
    src->model = "m";
    src->api_key = "sk-hostile-test-key-0001";
    src->timeout_s = 20;
    src->connect_timeout_s = 2;
    return src;
  }

  /// A call with the message `content` ("hi" by default).
  outcome_of_call run(std::shared_ptr<source_config> src, bool stream,
                      const std::string& content = "hi") {
    caf::scoped_actor self{sys};
    upstream_call call;
    call.body = R"({"model":")" + src->model
                + R"(","messages":[{"role":"user","content":")" + content
                + R"("}],"stream":)" + (stream ? "true" : "false") + "}";
    call.stream = stream;
    call.source = src;
    auto t0 = std::chrono::steady_clock::now();
    auto handle = tp->start(call, caf::actor_cast<caf::actor>(self), 1);
    outcome_of_call out;
    bool done = false;
    while (!done)
      self->receive([](atom::first_token, uint64_t) {},
                    [&](atom::done, uint64_t, attempt_result& r) {
                      done = true;
                      out.result = std::move(r);
                    },
                    caf::after(std::chrono::seconds(30)) >> [&] {
                      FAIL("no answer from the transport within 30 s");
                    });
    out.elapsed_s = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    return out;
  }
};

} // namespace

PGW_TRANSPORT_CASE(fixture, "an endless stream of 1 MB tokens is cut at "
                           "MAX_RESPONSE_BYTES") {
  raw_upstream up{[](raw_upstream& u, int fd, const std::string&) {
    auto ev = event(delta(std::string(1 << 20, 'x')));
    if (!u.send_all(fd, sse_head))
      return;
    while (u.send_all(fd, ev)) {
    }
  }};
  auto src = source(up);
  auto r = run(src, true);
  CHECK(r.result.kind == outcome::source_rejected);
  CHECK(r.result.reason == "response_too_large");
  CHECK(r.result.content.empty());
  CHECK(r.elapsed_s < 10);
  // A non-streamed body is held to the same cap.
  raw_upstream body{[](raw_upstream& u, int fd, const std::string&) {
    if (!u.send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                        "\r\nTransfer-Encoding: chunked\r\n\r\n"))
      return;
    auto c = chunk(std::string(1 << 20, ' '));
    while (u.send_all(fd, c)) {
    }
  }};
  src = source(body);
  src->max_response_bytes = 2 * 1024 * 1024;
  r = run(src, false);
  CHECK(r.result.kind == outcome::source_rejected);
  CHECK(r.result.reason == "response_too_large");
}

PGW_TRANSPORT_CASE(fixture, "identity is asked for, an encoded answer is "
                           "refused") {
  std::string accept;
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string& req) {
    accept = raw_upstream::header(req, "accept-encoding");
    u.send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\n"
                   "\x1f\x8b\x08\x00");
  }};
  auto r = run(source(up), true);
  CHECK(accept == "identity");
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "malformed_response");
  CHECK(r.result.error_message == "unexpected_content_encoding");
}

namespace {

// gzip of a chat completion answering "zipped" (python: gzip.compress).
const char gzip_answer[] =
  "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x0d\xc9\x31\x0e\x80\x20\x0c\x05"
  "\xd0\xbb\xfc\x99\xc1\xb9\x57\x31\xc6\x90\x52\xa5\x83\x2d\xb1\x0c\x46\xc2"
  "\xdd\xf5\xad\x6f\x80\xab\x2b\x4b\x80\xd6\x01\xb5\x22\x0f\x68\x49\xb8\x24"
  "\x22\x9f\x02\x1a\x60\xb7\x2e\xd6\x41\x78\xb5\x35\x29\x98\x09\x87\x9a\x46"
  "\xdd\x6f\xc9\xe1\xf6\x4f\x74\x6f\x98\xdb\xfc\x00\x51\x57\x40\x82\x4f\x00"
  "\x00\x00";

// gzip of an SSE stream: deltas "z0", "z1", "z2", a finish_reason, [DONE].
const char gzip_stream[] =
  "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xad\xcc\xb1\x0a\x83\x30\x10\x06"
  "\xe0\x3d\x4f\x51\xfe\xd9\xc1\x3a\xde\xac\xab\x3e\x80\x88\x04\x73\x62\x20"
  "\x5c\xa4\xb9\x42\x51\xf2\xee\xed\x58\x70\x12\x9d\x3f\xf8\x9c\x55\x4b\x8f"
  "\x1d\xd3\x12\xfd\xc4\x09\xd4\xef\xf0\xe2\xf8\x03\x2a\x0b\x38\x0e\x6a\x41"
  "\x3f\x8e\xa2\x2c\x0a\xc2\x56\x22\x17\x98\xbd\xf8\xb4\x8c\x2f\xb6\x29\x0a"
  "\x48\xde\x21\xe4\x21\x1b\xe3\x4e\x77\xcf\x7b\xbb\xea\x7a\x77\x0c\x90\x34"
  "\xae\xf8\x2b\xfa\xba\x6b\x9b\xc1\x98\x2f\xeb\x70\x05\xc1\x3e\x01\x00\x00";

} // namespace

PGW_TRANSPORT_CASE(fixture, "an encoding the source's HEADERS asked for is "
                            "decoded, a body that does not decode is "
                            "malformed_response") {
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    std::string accept;
    raw_upstream up{[&](raw_upstream& u, int fd, const std::string& req) {
      accept = raw_upstream::header(req, "accept-encoding");
      auto gz = stream ? std::string(gzip_stream, sizeof(gzip_stream) - 1)
                       : std::string(gzip_answer, sizeof(gzip_answer) - 1);
      u.send_all(fd, std::string("HTTP/1.1 200 OK\r\nContent-Type: ")
                       + (stream ? "text/event-stream" : "application/json")
                       + "\r\nContent-Encoding: gzip\r\nContent-Length: "
                       + std::to_string(gz.size()) + "\r\n\r\n" + gz);
    }};
    auto src = source(up);
    src->headers.emplace_back("Accept-Encoding", "gzip");
    auto r = run(src, stream);
    CHECK(accept == "gzip");
    CAPTURE(r.result.reason);
    CHECK(r.result.kind == outcome::ok);
    CHECK(r.result.content == (stream ? "z0z1z2" : "zipped"));
  }
  raw_upstream bad{[](raw_upstream& u, int fd, const std::string&) {
    u.send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   "Content-Encoding: gzip\r\nContent-Length: 8\r\n\r\n"
                   "notgzip!");
  }};
  auto src = source(bad);
  src->headers.emplace_back("Accept-Encoding", "gzip");
  auto r = run(src, false);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "malformed_response");
  CHECK(r.result.error_message == "body_not_decodable");
}

PGW_TRANSPORT_CASE(fixture, "headers forever, or too many, are "
                           "malformed_response") {
  raw_upstream endless{[](raw_upstream& u, int fd, const std::string&) {
    if (!u.send_all(fd, "HTTP/1.1 200 OK\r\n"))
      return;
    std::string lines;
    for (int i = 0; i < 1000; ++i)
      lines += "X-Filler-" + std::to_string(i) + ": yes\r\n";
    while (u.send_all(fd, lines)) {
    }
  }};
  auto r = run(source(endless), true);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "malformed_response");
  CHECK(r.result.error_message == "headers_too_large");
  CHECK(r.elapsed_s < 5);
  raw_upstream many{[](raw_upstream& u, int fd, const std::string&) {
    std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
    for (int i = 0; i < 150; ++i)
      head += "X-" + std::to_string(i) + ": y\r\n";
    u.send_all(fd, head + "\r\n{}");
  }};
  r = run(source(many), false);
  CHECK(r.result.reason == "malformed_response");
  CHECK(r.result.error_message == "headers_too_large");
  // Too many lines, then the connection ends inside the head (no blank
  // line), as fast as the kernel takes it: beast counted them while
  // reading, cpp-httplib kept them.
  for (int lines : {150, 9000}) {
    CAPTURE(lines);
    raw_upstream cut{[lines](raw_upstream& u, int fd, const std::string&) {
      std::string head = "HTTP/1.1 200 OK\r\n";
      for (int i = 0; i < lines; ++i)
        head += "X-" + std::to_string(i) + ": y\r\n";
      u.send_all(fd, head);
    }};
    r = run(source(cut), false);
    CHECK(r.result.reason == "malformed_response");
    CHECK(r.result.error_message == "headers_too_large");
  }
}

PGW_TRANSPORT_CASE(fixture, "[DONE] ends the attempt at once, finish_reason "
                           "waits at most 2 s for usage") {
  raw_upstream done_then_hang{[](raw_upstream& u, int fd, const std::string&) {
    if (u.send_all(fd, sse_head + event(delta("hi", "\"stop\""))
                         + event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})")
                         + chunk("data: [DONE]\n\n")))
      hang(u, fd);
  }};
  auto r = run(source(done_then_hang), true);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.content == "hi");
  CHECK(r.result.usage_reported);
  CHECK(r.elapsed_s < 1.5); // STREAM_IDLE_TIMEOUT_S is 30, TIMEOUT_S 20
  raw_upstream finish_then_hang{
    [](raw_upstream& u, int fd, const std::string&) {
      if (u.send_all(fd, sse_head + event(delta("yo", "\"stop\""))
                           + event(delta(" more", "null"))))
        hang(u, fd);
    }};
  r = run(source(finish_then_hang), true);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.content == "yo"); // nothing after the finish_reason
  CHECK_FALSE(r.result.usage_reported);
  CHECK(r.elapsed_s >= 1.9);
  CHECK(r.elapsed_s < 5);
}

namespace {

/// Sends `bytes` every 100 ms until the peer closes or we stop (an
/// upstream that keeps a stream alive without adding to the answer).
void trickle(raw_upstream& up, int fd, const std::string& bytes) {
  char buf[256];
  while (up.send_all(fd, bytes)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0 && ::recv(fd, buf, sizeof(buf), 0) <= 0)
      return;
  }
}

} // namespace

PGW_TRANSPORT_CASE(fixture, "keep-alive comments, empty deltas and usage "
                            "after the first token do not hold off "
                            "STREAM_IDLE_TIMEOUT_S") {
  const std::string keep_alive[] = {
    chunk(": ping\n\n"),
    event(R"({"choices":[{"index":0,"delta":{},"finish_reason":null}]})"),
    event(R"({"choices":[{"index":0,"delta":{"content":""}}]})"),
    event(R"({"choices":[],"usage":{"prompt_tokens":3,)"
          R"("completion_tokens":1}})"),
  };
  for (auto& bytes : keep_alive) {
    CAPTURE(bytes);
    raw_upstream up{[&](raw_upstream& u, int fd, const std::string&) {
      if (u.send_all(fd, sse_head + event(delta("A0 "))))
        trickle(u, fd, bytes);
    }};
    auto src = source(up);
    src->timeout_s = 10;
    src->stream_idle_timeout_s = 0.5;
    auto r = run(src, true);
    CHECK(r.result.kind == outcome::transient);
    CHECK(r.result.reason == "idle_timeout");
    CHECK(r.elapsed_s < 5);
  }
}

PGW_TRANSPORT_CASE(fixture, "an upstream echoing the Authorization header "
                           "leaks nothing") {
  for (int status : {401, 400, 500, 200}) {
    CAPTURE(status);
    raw_upstream up{[status](raw_upstream& u, int fd, const std::string& req) {
      auto auth = raw_upstream::header(req, "authorization");
      auto body = R"({"error":{"message":"you sent )" + auth
                  + R"(","code":"echo"}})";
      if (status == 200)
        u.send_all(fd, sse_head + chunk("event: error\ndata: " + body + "\n\n")
                         + chunk(""));
      else
        u.send_all(fd, response(status, "", body));
    }};
    auto src = source(up);
    register_secrets({src->api_key});
    auto r = run(src, true);
    CAPTURE(r.result.error_message);
    CAPTURE(r.result.reason);
    CHECK(r.result.error_message.find("hostile-test-key") == std::string::npos);
    CHECK(r.result.error_message.find("[redacted]") != std::string::npos);
  }
}

PGW_TRANSPORT_CASE(fixture, "a redirect is source_rejected and not followed") {
  raw_upstream up{[](raw_upstream& u, int fd, const std::string&) {
    u.send_all(fd, response(302,
                            "Location: http://evil.example/?t=Bearer "
                            "abcdef123456\r\n",
                            ""));
  }};
  auto r = run(source(up), false);
  CHECK(r.result.kind == outcome::source_rejected);
  CHECK(r.result.reason == "redirect");
  CHECK(r.result.error_message
        == "redirect to http://evil.example/?t=Bearer [redacted]");
  CHECK(up.connections() == 1);
}

PGW_TRANSPORT_CASE(fixture, "a far-future Retry-After is capped at 30 days") {
  for (std::string v : {"Fri, 31 Dec 9999 23:59:59 GMT", "1e11"}) {
    CAPTURE(v);
    raw_upstream up{[v](raw_upstream& u, int fd, const std::string&) {
      u.send_all(fd, response(429, "Retry-After: " + v + "\r\n", "{}"));
    }};
    auto r = run(source(up), false);
    CAPTURE(r.result.reason);
    CHECK(r.result.kind == outcome::rate_limited);
    REQUIRE(r.result.retry_after_s);
    CHECK(*r.result.retry_after_s == max_duration_s);
  }
}

PGW_TRANSPORT_CASE(fixture, "IPv6 literals and upper-case URLs reach the "
                           "upstream") {
  std::string host;
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string& req) {
    host = raw_upstream::header(req, "host");
    auto body = std::string(
      R"({"choices":[{"index":0,"message":{"content":"v6"},"finish_reason":"stop"}]})");
    u.send_all(fd, response(200, "", body));
  }};
  auto src = source(up);
  // The IPv4-mapped form of 127.0.0.1: an AF_INET6 socket reaches the IPv4
  // listener through it.
  src->base_url = "http://[::ffff:7f00:1]:" + std::to_string(up.port()) + "/v1";
  auto r = run(src, false);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.content == "v6");
  CHECK(host == "[::ffff:7f00:1]:" + std::to_string(up.port()));
}

namespace {

/// A complete non-streamed chat answer saying `content` (keep-alive).
std::string answer(const std::string& content) {
  return response(200, "",
                  R"({"choices":[{"index":0,"message":{"content":")" + content
                    + R"("},"finish_reason":"stop"}]})");
}

/// Answers a connection's first request ("ok", keep-alive) and reads its
/// next one; false when the peer went first.
bool answer_ok_then_read(raw_upstream& u, int fd) {
  return u.send_all(fd, answer("ok")) && !raw_upstream::read_request(fd).empty();
}

/// True once the peer's kernel has acknowledged every byte sent on `fd`.
bool all_acknowledged(int fd) {
  int unacked = 0;
  return ::ioctl(fd, SIOCOUTQ, &unacked) == 0 && unacked == 0;
}

} // namespace

PGW_TRANSPORT_CASE(fixture, "a stale keep-alive connection is retried once "
                           "on a fresh one") {
  // Answers the first request of a connection with keep-alive; closes on
  // the next one without a byte (an upstream dropping idle connections
  // without `Connection: close`).
  raw_upstream up{[](raw_upstream& u, int fd, const std::string&) {
    if (!answer_ok_then_read(u, fd))
      return;
    linger hard{1, 0}; // reset, as a dropped idle connection does
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  }};
  auto src = source(up);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    auto r = run(src, false);
    CHECK(r.result.kind == outcome::ok);
    CHECK(r.result.content == "ok");
  }
  // Calls 2 and 3 each found the pooled connection stale and retried.
  CHECK(up.connections() == 3);
  CHECK(made.stats().connections_reused == 2);
}

PGW_TRANSPORT_CASE(fixture, "a request the upstream held, then dropped "
                           "unanswered, is not sent again") {
  // Answers the first request of a connection with keep-alive; holds the
  // next one (it took it: it may be working on it) and closes without a
  // byte, well after the moment a stale connection would have shown it.
  raw_upstream up{[](raw_upstream& u, int fd, const std::string&) {
    if (!answer_ok_then_read(u, fd))
      return;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 500); // holds it (returns early only if the peer goes)
  }};
  auto src = source(up);
  CHECK(run(src, false).result.kind == outcome::ok);
  auto r = run(src, false);
  CAPTURE(r.result.error_message);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "reset");
  CHECK(r.result.upstream_reached);
  CHECK(r.elapsed_s >= 0.4);
  // Sent once: no second connection carried it again.
  CHECK(up.connections() == 1);
  CHECK(made.stats().connections_reused == 1);
}

namespace {

/// Waits (up to 10 s) for the peer to close `fd` after our last byte; the
/// seconds it took, or -1 when it did not.
double seconds_until_peer_closes(raw_upstream& u, int fd) {
  auto t0 = std::chrono::steady_clock::now();
  pollfd p{fd, POLLIN, 0};
  char byte = 0;
  if (::poll(&p, 1, 10000) <= 0 || u.stopping()
      || ::recv(fd, &byte, 1, 0) != 0)
    return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
    .count();
}

} // namespace

PGW_TRANSPORT_CASE(fixture, "an idle pooled connection is closed after "
                            "idle_timeout") {
  made = make_test_transport(kind, std::chrono::milliseconds{300});
  tp = made.tp;
  std::atomic<double> closed_after{-2};
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string&) {
    if (u.send_all(fd, answer("kept")))
      closed_after = seconds_until_peer_closes(u, fd);
  }};
  auto r = run(source(up), false);
  CHECK(r.result.content == "kept");
  REQUIRE(eventually([&] { return closed_after.load() != -2; },
                     std::chrono::seconds{15}));
  CHECK(closed_after.load() >= 0.25);
  CHECK(closed_after.load() < 2);
  CHECK(made.stats().connections_closed_idle == 1);
}

PGW_TRANSPORT_CASE(fixture, "a pooled connection the upstream closed is "
                            "closed at once, not left in CLOSE_WAIT, and "
                            "never reused") {
  // The upstream ends each connection after its answer (FIN, no
  // `Connection: close`); the pool keeps connections 30 s.
  std::atomic<double> closed_after{-2};
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string&) {
    if (!u.send_all(fd, answer("once")))
      return;
    ::shutdown(fd, SHUT_WR);
    if (u.connections() == 1)
      closed_after = seconds_until_peer_closes(u, fd);
  }};
  auto src = source(up);
  CHECK(run(src, false).result.content == "once");
  REQUIRE(eventually([&] { return closed_after.load() != -2; },
                     std::chrono::seconds{15}));
  CHECK(closed_after.load() >= 0);
  CHECK(closed_after.load() < 2); // the sweep's period is 1 s (httplib)
  CHECK(made.stats().connections_closed_idle == 1);
  CHECK(run(src, false).result.content == "once");
  CHECK(up.connections() == 2);
  CHECK(made.stats().connections_reused == 0);
}

PGW_TRANSPORT_CASE(fixture, "a stray response after the answer is never "
                            "taken for the next call's answer") {
  // Each request gets "answer N" (N counts requests across connections);
  // the first connection, once its answer was read, also sends an
  // unsolicited response "stray" — before the next call takes the
  // connection from the pool.
  std::atomic<int> requests{0};
  std::atomic<bool> answered{false};
  std::atomic<bool> stray_in{false};
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string&) {
    bool first = u.connections() == 1;
    do {
      if (!u.send_all(fd, answer("answer " + std::to_string(++requests))))
        return;
      if (first) {
        first = false;
        eventually([&] { return answered.load(); });
        u.send_all(fd, answer("stray"));
        // In the client's socket before the next call starts.
        eventually([&] { return all_acknowledged(fd); });
        stray_in = true;
      }
    } while (!raw_upstream::read_request(fd).empty());
  }};
  auto src = source(up);
  auto r = run(src, false);
  CHECK(r.result.content == "answer 1");
  answered = true;
  REQUIRE(eventually([&] { return stray_in.load(); }));
  r = run(src, false);
  CAPTURE(r.result.reason);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.content == "answer 2");
  CHECK(up.connections() == 2); // the connection with the stray was left
}

PGW_TRANSPORT_CASE(fixture, "interim 1xx responses are skipped, or refused "
                           "at once, never taken for the answer") {
  for (std::string interim :
       {"100 Continue\r\n", "103 Early Hints\r\nLink: </x>\r\n"}) {
    CAPTURE(interim);
    // Every request of a connection gets an interim response, then its
    // answer naming the request's number on the connection, in one write.
    raw_upstream up{[interim](raw_upstream& u, int fd, const std::string&) {
      for (int n = 1; n <= 3; ++n) {
        auto body = R"({"choices":[{"index":0,"message":{"content":"answer )"
                    + std::to_string(n) + R"("},"finish_reason":"stop"}]})";
        if (!u.send_all(fd, "HTTP/1.1 " + interim + "\r\n"
                              + response(200, "", body))
            || raw_upstream::read_request(fd).empty())
          return;
      }
    }};
    auto src = source(up);
    src->timeout_s = 5;
    bool skips = kind == "beast" || interim.rfind("100", 0) == 0;
    for (int n = 1; n <= 2; ++n) {
      CAPTURE(n);
      auto r = run(src, false);
      CAPTURE(r.result.reason);
      if (skips) {
        CHECK(r.result.kind == outcome::ok);
        CHECK(r.result.content == "answer " + std::to_string(n));
        CHECK(up.connections() == 1);
      } else {
        // cpp-httplib 0.11 takes a 103 for the answer: refused at once.
        CHECK(r.result.kind == outcome::transient);
        CHECK(r.result.reason == "malformed_response");
        CHECK(r.result.error_message.find("interim 103 response")
              != std::string::npos);
        CHECK(r.elapsed_s < 2);
        CHECK(up.connections() == n); // never reused
      }
    }
  }
}

namespace {

/// An upstream that answers `bytes` (then holds the connection) fails the
/// attempt at once as malformed_response, its message saying `says`.
void expect_malformed(fixture& f, const std::string& bytes,
                      const std::string& says) {
  CAPTURE(bytes);
  raw_upstream up{[bytes](raw_upstream& u, int fd, const std::string&) {
    if (u.send_all(fd, bytes))
      hang(u, fd);
  }};
  auto r = f.run(f.source(up), false);
  CAPTURE(r.result.error_message);
  CHECK(r.elapsed_s < 2);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "malformed_response");
  CHECK(r.result.error_message.find(says) != std::string::npos);
}

/// cpp-httplib 0.11 accepts or cuts some broken framing its own way
/// (README, "Upstream transport"): what beast tells apart.
struct beast_fixture : fixture {
  beast_fixture() : fixture("beast") {
    // nop
  }
};

} // namespace

TEST_CASE_FIXTURE(beast_fixture, "beast: broken HTTP framing is "
                                 "malformed_response naming what was wrong") {
  struct row {
    std::string bytes;
    std::string says;
  };
  std::string body = R"({"choices":[]})";
  std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
  for (auto& [bytes, says] : {
         row{"HELLO I AM NOT HTTP\r\n\r\n", "status line"},
         row{head + "NoColonHere\r\nContent-Length: 14\r\n\r\n" + body,
             "header line"},
         row{head + "Transfer-Encoding: chunked\r\n\r\n-5\r\n" + body
               + "\r\n0\r\n\r\n",
             "chunk"},
       })
    expect_malformed(*this, bytes, says);
}

PGW_TRANSPORT_CASE(fixture, "a body length two parsers could read two ways is "
                           "malformed_response") {
  // Two different Content-Lengths, or one with chunked: cpp-httplib 0.11
  // took one reading and answered ok (beast refused it already).
  std::string body = R"({"choices":[]})";
  std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
  for (auto& [bytes, says] : {
         std::pair<std::string, std::string>{
           head + "Content-Length: 14\r\nContent-Length: 5\r\n\r\n" + body,
           "Content-Length"},
         {head + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunk(body) + "0\r\n\r\n",
          "Transfer-Encoding"},
       }) {
    expect_malformed(*this, bytes, says);
  }
}

PGW_TRANSPORT_CASE(fixture, "no file descriptor left is our failure, not the "
                           "upstream's") {
  raw_upstream up{[](raw_upstream& u, int fd, const std::string&) {
    u.send_all(fd, response(200, "", "{}"));
  }};
  auto src = source(up);
  // The lowest free descriptor becomes the limit: no new one can be made.
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  int lowest = ::dup(0);
  REQUIRE(lowest >= 0);
  ::close(lowest);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(lowest);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  auto r = run(src, false);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  CHECK(r.result.kind == outcome::source_rejected); // no breaker, no EWMA
  CHECK(r.result.reason == "local_resource_exhausted");
  CHECK_FALSE(r.result.upstream_reached); // settles 0
  CHECK(up.connections() == 0);
}

PGW_TRANSPORT_CASE(fixture, "the simulator's hostile models, through the "
                           "transport") {
  sim_process sim{{"--seed", "3"}};
  auto from_sim = [&](const std::string& model) {
    auto src = std::make_shared<source_config>();
    src->scope = "LLM";
    src->provider = "generic";
    src->name = "sim-" + model;
    src->base_url = sim.base_url();
    src->model = model;
    src->api_key = "sk-sim-echo-secret-7777";
    src->timeout_s = 20;
    src->connect_timeout_s = 2;
    return src;
  };
  SUBCASE("echo-auth") {
    register_secrets({"sk-sim-echo-secret-7777"});
    auto r = run(from_sim("echo-auth"), false);
    CAPTURE(r.result.reason);
    CAPTURE(r.result.error_message);
    CHECK(r.result.kind == outcome::source_dead);
    CHECK(r.result.error_message.find("[redacted]") != std::string::npos);
    CHECK(r.result.error_message.find("echo-secret") == std::string::npos);
  }
  SUBCASE("done-hang ends at [DONE]") {
    auto r = run(from_sim("done-hang"), true);
    CHECK(r.result.kind == outcome::ok);
    CHECK(r.elapsed_s < 1.5);
  }
  SUBCASE("finish-hang ends 2 s after the finish_reason") {
    auto r = run(from_sim("finish-hang"), true);
    CHECK(r.result.kind == outcome::ok);
    CHECK(r.elapsed_s >= 1.9);
    CHECK(r.elapsed_s < 5);
  }
  SUBCASE("far-retry is capped") {
    auto r = run(from_sim("far-retry"), false);
    CHECK(r.result.kind == outcome::rate_limited);
    REQUIRE(r.result.retry_after_s);
    CHECK(*r.result.retry_after_s == max_duration_s);
  }
  SUBCASE("redirect") {
    auto r = run(from_sim("redirect"), false);
    CHECK(r.result.kind == outcome::source_rejected);
    CHECK(r.result.reason == "redirect");
    CHECK(r.result.error_message.find("elsewhere.invalid")
          != std::string::npos);
  }
}

PGW_TRANSPORT_CASE(fixture, "an https source on a TCP server that never "
                            "answers the handshake is tls_handshake after "
                            "CONNECT_TIMEOUT_S") {
  raw_upstream silent{[](raw_upstream& u, int fd, const std::string&) {
    hang(u, fd); // never: a ClientHello is no request
  }};
  auto src = source(silent);
  src->base_url = "https://127.0.0.1:" + std::to_string(silent.port()) + "/v1";
  src->connect_timeout_s = 0.5;
  auto r = run(src, false);
  CAPTURE(r.result.error_message);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "tls_handshake");
  CHECK(r.result.timed_out); // demotes the source at once, as connect does
  CHECK(r.result.error_message
        == "the TLS handshake did not finish within CONNECT_TIMEOUT_S (0.5 s)");
  CHECK_FALSE(r.result.upstream_reached);
  CHECK(r.elapsed_s >= 0.45);
  CHECK(r.elapsed_s < 5);
  CHECK(silent.connections() == 1); // the TCP connect succeeded
}

PGW_TRANSPORT_CASE(fixture, "a call stopped before its request left never "
                            "sends it (SPEC §8: it settles 0)") {
  std::atomic<int> requests{0};
  raw_upstream up{[&](raw_upstream& u, int fd, const std::string& request) {
    if (!request.empty()) {
      ++requests;
      u.send_all(fd, response(200, "", R"({"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}]})"));
    }
  }};
  auto src = source(up);
  caf::scoped_actor self{sys};
  upstream_call call;
  call.body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  call.source = src;
  call.gate = std::make_shared<send_gate>();
  // Whoever stops the call decided first: the request never leaves, and
  // the transport ends the call as cancelled (the cancel is on its way).
  REQUIRE(call.gate->withhold());
  auto handle = tp->start(call, caf::actor_cast<caf::actor>(self), 1);
  REQUIRE(eventually([&] { return made.stats().finished == 1; }));
  auto st = made.stats();
  CHECK(st.cancelled == 1);
  // beast connected (the request is written after the connect); httplib
  // connects inside its send, which never ran. Either way no request byte
  // reached the upstream: every connection it accepted ended empty.
  CHECK(st.connections_opened == (kind == "beast" ? 1u : 0u));
  REQUIRE(eventually([&] {
    return up.ended() == static_cast<int>(st.connections_opened);
  }));
  CHECK(requests.load() == 0);
  CHECK_FALSE(call.gate->pass());
  // The gate passed first, the same call is sent and answered.
  auto ok = run(src, false);
  CHECK(ok.result.kind == outcome::ok);
  CHECK(requests.load() == 1);
}

PGW_TRANSPORT_CASE(fixture, "TLS names the host in SNI, and a failed handshake "
                            "is tls_handshake and never reached") {
  // A listener that reads the ClientHello and hangs up.
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string hello;
  std::thread peer{[&] {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0)
      return;
    int fd = ::accept(lfd, nullptr, nullptr);
    char buf[4096];
    pollfd q{fd, POLLIN, 0};
    if (::poll(&q, 1, 5000) > 0) {
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0)
        hello.assign(buf, static_cast<size_t>(n));
    }
    ::close(fd);
  }};
  auto src = std::make_shared<source_config>();
  src->scope = "LLM";
  src->provider = "generic";
  src->name = "tls-sni";
  src->base_url = "https://localhost:" + std::to_string(ntohs(addr.sin_port))
                  + "/v1";
  src->model = "m";
  src->timeout_s = 10;
  src->connect_timeout_s = 5;
  auto r = run(src, false);
  peer.join();
  ::close(lfd);
  CHECK(hello.find("localhost") != std::string::npos);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "tls_handshake");
  CHECK_FALSE(r.result.upstream_reached);
}

// -- SIGPIPE over TLS ----------------------------------------------------------
// cpp-httplib's OpenSSL writes TLS records with write(2), not MSG_NOSIGNAL:
// once a read took a connection's reset, the next write to it (the TLS
// close_notify sent when the client closes) raises SIGPIPE, which ends this
// test process unless the transport guards it (the process' disposition
// stays the default: pgw must not change it). Before the guard, the
// read-then-reset and the pooled cases ended the process every run.

namespace {

std::shared_ptr<source_config> tls_source(const tls_upstream& up,
                                          const std::string& name) {
  auto src = std::make_shared<source_config>();
  src->scope = "LLM";
  src->provider = "generic";
  src->name = name;
  src->base_url = up.base_url();
  src->ca_file = up.ca_file();
  src->model = "m";
  src->timeout_s = 20;
  src->connect_timeout_s = 5;
  return src;
}

} // namespace

PGW_TRANSPORT_CASE(fixture, "a TLS upstream that resets the connection while "
                            "a large request is written fails the call as "
                            "write_error, and no SIGPIPE ends the process") {
  // The upstream reads nothing: with a 16 KiB receive buffer the request
  // waits unread, and the connection is reset while the client still has
  // megabytes to write (its send buffer is at most 4 MiB, net.ipv4.tcp_wmem).
  // The write the reset meets fails with ECONNRESET (no SIGPIPE yet, and
  // OpenSSL keeps its close_notify behind the record it could not send).
  auto hold = [](tls_upstream& u, SSL*, int fd) {
    u.wait_for([fd] { return tls_upstream::unread(fd) >= 4096; });
  };
  tls_upstream up{hold, 16 * 1024};
  auto src = tls_source(up, "tls-reset-write");
  auto r = run(src, false, std::string(8 * 1024 * 1024, 'a'));
  CAPTURE(r.result.error_message);
  CHECK(up.handshakes() == 1);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "write_error");
  CHECK(made.stats().finished == 1);
}

PGW_TRANSPORT_CASE(fixture, "a TLS upstream that reads the request and "
                            "resets the connection fails the call as reset, "
                            "and no SIGPIPE ends the process") {
  // The client waits for the answer when the reset comes: its read takes
  // the reset, and the TLS close_notify it sends next meets a socket that
  // cannot send any more.
  tls_upstream up{[](tls_upstream&, SSL* ssl, int) {
    tls_upstream::read_request(ssl);
  }};
  auto src = tls_source(up, "tls-reset-read");
  auto r = run(src, false, std::string(1024 * 1024, 'a'));
  CAPTURE(r.result.error_message);
  CHECK(up.handshakes() == 1);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "reset");
  CHECK(r.result.upstream_reached);
}

PGW_TRANSPORT_CASE(fixture, "a pooled TLS connection the upstream resets is "
                            "closed by the pool sweep, and no SIGPIPE ends the "
                            "process") {
  std::atomic<bool> reset_now{false};
  tls_upstream up{[&reset_now](tls_upstream& u, SSL* ssl, int) {
    if (tls_upstream::read_request(ssl).empty())
      return;
    std::string body = R"({"choices":[{"index":0,"message":{"role":)"
                       R"("assistant","content":"ok"},"finish_reason":)"
                       R"("stop"}]})";
    tls_upstream::write_all(ssl, response(200, "", body));
    u.wait_for([&reset_now] { return reset_now.load(); });
  }};
  auto src = tls_source(up, "tls-reset-idle");
  auto r = run(src, false);
  CAPTURE(r.result.error_message);
  REQUIRE(r.result.kind == outcome::ok);
  REQUIRE(made.stats().connections_opened == 1);
  reset_now = true;
  REQUIRE(eventually([&] { return up.resets() == 1; }));
  // The sweep finds the reset (reading it) and closes the client, whose TLS
  // close_notify then goes to a socket that cannot send any more.
  CHECK(eventually(
    [&] { return made.stats().connections_closed_idle == 1; }));
}
