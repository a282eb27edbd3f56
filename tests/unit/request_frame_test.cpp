// serve's front frames each request whole before anything answers it:
// where a request ends (Content-Length, chunked), when more bytes are
// needed, and what is refused so that no two parsers can disagree on it.

#include "apps/cli/request_frame.hpp"

#include <doctest/doctest.h>

#include <string>

using pgw::cli::frame_request;
using pgw::cli::request_frame;
using pgw::cli::to_origin_form;
using state = request_frame::state;

namespace {

constexpr size_t max_head = 8192;
constexpr size_t max_body = 1000;

request_frame frame(const std::string& in) {
  return frame_request(in, max_head, max_body);
}

std::string post(const std::string& headers, const std::string& body = "") {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers
         + "\r\n" + body;
}

} // namespace

TEST_CASE("request frame: Content-Length bodies, whole or partial") {
  auto head = post("Content-Length: 5\r\n");
  auto r = frame(head + "hello" + "GET /healthz HTTP/1.1\r\n\r\n");
  CHECK(r.what == state::whole);
  CHECK(r.head_bytes == head.size());
  CHECK(r.bytes == head.size() + 5);
  CHECK(frame(head + "hel").what == state::partial);
  CHECK(frame(head.substr(0, head.size() - 2)).what == state::partial);
  CHECK(frame("POST /v1/chat/comp").what == state::partial);
  // No body framing: no body (a GET).
  auto get = frame("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(get.what == state::whole);
  CHECK(get.bytes == get.head_bytes);
  // The same length twice is one length.
  CHECK(frame(post("Content-Length: 2\r\ncontent-length: 2\r\n", "{}")).what
        == state::whole);
}

TEST_CASE("request frame: chunked bodies end at their last chunk and trailers") {
  auto head = post("Transfer-Encoding: chunked\r\n");
  std::string body = "5\r\nhello\r\na;ext=1\r\n0123456789\r\n0\r\n\r\n";
  auto r = frame(head + body + "GET / HTTP/1.1\r\n\r\n");
  CHECK(r.what == state::whole);
  CHECK(r.bytes == head.size() + body.size());
  std::string trailers = "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n";
  CHECK(frame(head + trailers).bytes == head.size() + trailers.size());
  // Every prefix of a whole chunked body is partial.
  for (size_t n = 0; n < body.size(); ++n) {
    CAPTURE(n);
    CHECK(frame(head + body.substr(0, n)).what == state::partial);
  }
}

TEST_CASE("request frame: a chunked body read byte by byte, its scan carried "
          "on, frames as it does whole") {
  // 2,000 chunks of one byte, then trailers: with the cursor each call
  // scans only what is new, and ends where a whole scan ends.
  auto head = post("Transfer-Encoding: chunked\r\n");
  std::string body;
  for (int i = 0; i < 2000; ++i)
    body += "1\r\nx\r\n";
  body += "0\r\nX-T: 1\r\n\r\n";
  auto in = head + body + "GET / HTTP/1.1\r\n\r\n";
  auto whole = frame_request(in, max_head, 3000);
  REQUIRE(whole.what == state::whole);
  pgw::cli::chunk_cursor cursor;
  request_frame r;
  size_t n = head.size();
  for (; n <= in.size(); ++n) {
    r = frame_request(std::string_view{in}.substr(0, n), max_head, 3000,
                      &cursor);
    if (r.what != state::partial)
      break;
  }
  CHECK(r.what == state::whole);
  CHECK(r.bytes == whole.bytes);
  CHECK(n == whole.bytes);
  CHECK(cursor.total == 2000);
  // The cursor also keeps the body's limit: 2,000 bytes over a limit of
  // 1,000 are refused as soon as the 1,001st chunk's size line is in.
  pgw::cli::chunk_cursor limited;
  for (n = head.size(); n <= in.size(); ++n) {
    r = frame_request(std::string_view{in}.substr(0, n), max_head, max_body,
                      &limited);
    if (r.what != state::partial)
      break;
  }
  CHECK(r.status == 413);
  CHECK(n == head.size() + 1000 * 6 + 3);
}

TEST_CASE("request frame: what would let two parsers disagree is refused") {
  auto bad = [](const std::string& in, int status, const std::string& part) {
    auto r = frame(in);
    CAPTURE(in);
    CHECK(r.what == state::bad);
    CHECK(r.status == status);
    CHECK(r.reason.find(part) != std::string::npos);
  };
  bad(post("Content-Length: 3\r\nContent-Length: 59\r\n"), 400,
      "conflicting Content-Length headers (3 and 59)");
  bad(post("Content-Length: -5\r\n"), 400,
      "Content-Length \"-5\" is not a number of bytes");
  bad(post("Content-Length: abc\r\n"), 400, "is not a number of bytes");
  bad(post("Content-Length: 5, 5\r\n"), 400, "is not a number of bytes");
  bad(post("Content-Length: 99999999999999999999999\r\n"), 400,
      "is not a number of bytes");
  bad(post("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"), 400,
      "both Content-Length and Transfer-Encoding");
  bad(post("Transfer-Encoding: gzip, chunked\r\n"), 501,
      "is not supported (only chunked)");
  bad(post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"),
      400, "more than once");
  bad("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
      "HTTP/1.0");
  bad(post("X-A: 1\r\n folded\r\n"), 400, "obsolete line folding");
  bad(post("X-A: 1\rX-B: 2\r\n"), 400, "bare CR, LF or NUL");
  bad(post("X-A: 1\nX-B: 2\r\n"), 400,
      "a line of the request head ends in a bare LF (CRLF is required): "
      "\"X-A: 1\"");
  bad(post("NoColonHere\r\n"), 400, "is not `Name: value`");
  bad(post("Bad Name: 1\r\n"), 400, "is not `Name: value`");
  bad("GARBAGE\r\nHost: x\r\n\r\n", 400, "the request line is not");
  bad("GET /x HTTP/2.0\r\n\r\n", 400, "the request line is not");
  bad("GET  /x HTTP/1.1\r\n\r\n", 400, "the request line is not");
  // The request line is judged before the head is complete.
  bad("GARBAGE\r\n", 400, "\"GARBAGE\"");
  bad(post("Transfer-Encoding: chunked\r\n", "zz\r\n"), 400,
      "the chunk size \"zz\" is not a hexadecimal number");
  bad(post("Transfer-Encoding: chunked\r\n", "3\r\nabcX\r\n"), 400,
      "not followed by CRLF");
  bad(post("Transfer-Encoding: chunked\r\n", std::string(2000, '1')), 400,
      "chunk-size line is longer");
  // Two keys: which one counts would depend on the parser.
  bad(post("Authorization: Bearer a\r\nauthorization: Bearer b\r\n"), 400,
      "the Authorization header is given more than once");
}

TEST_CASE("request frame: what the hand-off needs: no length, where the "
          "trailers start") {
  // No Content-Length, no Transfer-Encoding: an empty body (RFC 9112 §6.3).
  auto none = frame(post(""));
  CHECK(none.what == state::whole);
  CHECK(none.no_length);
  CHECK(none.bytes == none.head_bytes);
  CHECK_FALSE(frame(post("Content-Length: 0\r\n")).no_length);
  auto head = post("Transfer-Encoding: chunked\r\n");
  CHECK_FALSE(frame(head + "0\r\n\r\n").no_length);
  CHECK(frame(head + "0\r\n\r\n").trailer_at == head.size() + 3);
  auto with = frame(head + "2\r\nhi\r\n0\r\nX-Trailer: 1\r\n\r\n");
  CHECK(with.trailer_at == head.size() + 10);
  CHECK(with.bytes == head.size() + 26);
  CHECK(frame(post("Content-Length: 2\r\n", "{}")).trailer_at == 0);
}

TEST_CASE("request frame: the Connection field's close option, in any of "
          "its forms") {
  // RFC 9110 §7.6.1: a comma-separated list of options, any case, over one
  // field or several. httplib and the front matched only the exact value.
  CHECK_FALSE(frame(post("")).close);
  CHECK_FALSE(frame(post("Connection: keep-alive\r\n")).close);
  CHECK(frame(post("Connection: close\r\n")).close);
  CHECK(frame(post("Connection: keep-alive, close\r\n")).close);
  CHECK(frame(post("Connection: Upgrade ,CLOSE\r\n")).close);
  CHECK(frame(post("Connection: keep-alive\r\nConnection: close\r\n")).close);
  CHECK_FALSE(frame(post("Connection: closed, keep-alive-ish\r\n")).close);
  CHECK_FALSE(frame(post("X-Connection: close\r\n")).close);
  // HTTP/1.0 closes unless the client lists keep-alive.
  CHECK(frame("GET /healthz HTTP/1.0\r\n\r\n").close);
  CHECK_FALSE(frame("GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .close);
  CHECK(frame("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").close);
  // Known as soon as the head is whole, before the body.
  CHECK(frame(post("Connection: te, close\r\nContent-Length: 5\r\n", "ab"))
          .close);
}

TEST_CASE("request frame: an HTTP/1.1 request names its host once") {
  // RFC 9112 §3.2: 400 for a missing Host, two of them, or a value that is
  // not a host.
  auto bad = [](const std::string& in, const std::string& part) {
    auto r = frame(in);
    CAPTURE(in);
    CHECK(r.what == state::bad);
    CHECK(r.status == 400);
    CHECK(r.reason.find(part) != std::string::npos);
  };
  bad("GET /healthz HTTP/1.1\r\n\r\n", "the Host header is missing");
  bad("GET /healthz HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
      "the Host header is given more than once");
  bad("GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n",
      "the Host header \"a b\" is not a host name");
  bad("GET /healthz HTTP/1.1\r\nHost: a/b@c\r\n\r\n", "is not a host name");
  for (std::string host : {"api.example.com", "127.0.0.1:8080", "[::1]:7",
                           "", "xn--bcher-kva.example"}) {
    auto r = frame("GET /healthz HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    CAPTURE(host);
    CHECK(r.what == state::whole);
  }
  // HTTP/1.0 predates Host.
  CHECK(frame("GET /healthz HTTP/1.0\r\n\r\n").what == state::whole);
}

TEST_CASE("request frame: an absolute-form target is read as its path") {
  auto origin = [](std::string in) {
    auto before = in.size();
    auto shorter = to_origin_form(in);
    CHECK(in.size() == before - shorter);
    return in;
  };
  const std::string rest = " HTTP/1.1\r\nHost: h\r\n\r\n";
  CHECK(origin("POST http://127.0.0.1:8080/v1/chat/completions" + rest)
        == "POST /v1/chat/completions" + rest);
  CHECK(origin("GET HTTPS://api.example.com/healthz?x=1" + rest)
        == "GET /healthz?x=1" + rest);
  CHECK(origin("GET http://h" + rest) == "GET /" + rest);
  CHECK(origin("GET http://h?x=1" + rest) == "GET /?x=1" + rest);
  CHECK(origin("GET http://[::1]:7/v1/models" + rest) == "GET /v1/models" + rest);
  // Anything else is left as it is.
  for (std::string target : {"/v1/models", "*", "h:443", "ftp://h/x",
                             "/x?u=http://h/y"}) {
    auto in = "GET " + target + rest;
    CHECK(origin(in) == in);
  }
  // The framing after the cut still holds: the body follows the head.
  std::string in = "POST http://h/v1/chat/completions HTTP/1.1\r\nHost: h\r\n"
            "Content-Length: 2\r\n\r\n{}";
  auto shorter = to_origin_form(in);
  CHECK(shorter == 8);
  auto r = frame(in);
  CHECK(r.what == state::whole);
  CHECK(in.substr(r.head_bytes) == "{}");
}

TEST_CASE("request frame: heads and bodies over their limits") {
  auto r = frame(post("Content-Length: 1001\r\n"));
  CHECK(r.what == state::bad);
  CHECK(r.status == 413);
  CHECK(r.reason == "the request body is 1001 bytes, more than "
                    "PGW_SERVE_MAX_BODY_BYTES (1000)");
  // Chunks count together.
  std::string chunks = "1f4\r\n" + std::string(500, 'a') + "\r\n1f5\r\n";
  r = frame(post("Transfer-Encoding: chunked\r\n", chunks));
  CHECK(r.status == 413);
  // A head that never ends, or ends too late.
  r = frame("GET / HTTP/1.1\r\nX: " + std::string(max_head, 'a'));
  CHECK(r.status == 431);
  r = frame("GET / HTTP/1.1\r\nX: " + std::string(max_head, 'a') + "\r\n\r\n");
  CHECK(r.status == 431);
  r = frame(std::string(max_head + 1, 'G'));
  CHECK(r.status == 431);
  // Unprintable client bytes are not echoed.
  r = frame(std::string("\x01\xff GET\r\n", 8));
  CHECK(r.reason.find("\"?? GET\"") != std::string::npos);
}

TEST_CASE("request frame: Expect 100-continue while the body is missing") {
  auto head = post("Content-Length: 5\r\nExpect: 100-continue\r\n");
  CHECK(frame(head).expects_continue);
  CHECK_FALSE(frame(head + "hello").expects_continue);
  CHECK_FALSE(frame(post("Content-Length: 5\r\n")).expects_continue);
}

TEST_CASE("request frame: a head with bare LF line ends is refused at once, "
          "not left waiting for a CRLF") {
  // Old code: partial until the head limit or the read timeout.
  for (std::string in : {"GET /healthz HTTP/1.1\nHost: x\n\n",
                         "GET /healthz HTTP/1.1\n",
                         "GET /healthz HTTP/1.1\r\nHost: x\n\n",
                         "GET /healthz HTTP/1.1\r\nHost: x\r\n\n"}) {
    CAPTURE(in);
    auto r = frame(in);
    CHECK(r.what == state::bad);
    CHECK(r.status == 400);
    CHECK(r.reason.find("ends in a bare LF (CRLF is required)")
          != std::string::npos);
  }
  // A body may hold any byte.
  auto head = post("Content-Length: 3\r\n");
  CHECK(frame(head + "a\nb").what == state::whole);
}

TEST_CASE("request frame: a chunk-size line with a bare LF or leading white "
          "space is refused") {
  auto head = post("Transfer-Encoding: chunked\r\n");
  auto bad = [&](const std::string& body, const std::string& part) {
    auto r = frame(head + body);
    CAPTURE(body);
    CHECK(r.what == state::bad);
    CHECK(r.status == 400);
    CHECK(r.reason.find(part) != std::string::npos);
  };
  // cpp-httplib, handed this request, ends the size line at the LF: it read
  // "400" as the chunk, then "abc" as the next size (2748 bytes), and
  // waited on the socket for bytes past the request the front framed.
  bad("3;x\n400\r\nabc\r\n0\r\n\r\n",
      "a chunk-size line holds a control byte (a bare CR or LF, say)");
  bad("3;x\rx\r\nabc\r\n0\r\n\r\n", "a chunk-size line holds a control byte");
  bad(" 3\r\nabc\r\n0\r\n\r\n", "the chunk size \" 3\" is not a hexadecimal");
  // What the grammar allows: white space before an extension, leading zeros.
  std::string ok = "3 ;a=b\r\nabc\r\n0003\r\nabc\r\n0\r\n\r\n";
  CHECK(frame(head + ok).what == state::whole);
}

TEST_CASE("request frame: an HTTP/1.0 request's Expect 100-continue is "
          "ignored") {
  // RFC 9110: no 1xx answer to an HTTP/1.0 client.
  std::string in = "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\n"
                   "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n";
  auto r = frame(in);
  CHECK(r.what == state::partial);
  CHECK_FALSE(r.expects_continue);
}

TEST_CASE("request frame: a refusal does not depend on where the reads "
          "ended (found by fuzz_serve_request)") {
  // A chunk-size line of exactly the limit (1024 bytes), the read ending
  // between its CR and LF: more is needed (it was refused as too long).
  auto head = post("Transfer-Encoding: chunked\r\n");
  auto line = "5;" + std::string(1022, 'x');
  REQUIRE(line.size() == 1024);
  CHECK(frame(head + line + "\r").what == state::partial);
  auto whole = frame(head + line + "\r\nhello\r\n0\r\n\r\n");
  CHECK(whole.what == state::whole);
  CHECK(frame(head + line + "x\r").what == state::bad); // 1025 bytes
  // A trailer section of the most the head's limit allows (its fields and
  // their CRLFs; the blank line after), cut the same way before its LF.
  std::string trailer = "T: " + std::string(max_head - 5, 'v') + "\r\n";
  REQUIRE(trailer.size() == max_head);
  CHECK(frame(head + "0\r\n" + trailer + "\r").what == state::partial);
  CHECK(frame(head + "0\r\n" + trailer + "\r\n").what == state::whole);
  CHECK(frame(head + "0\r\nU" + trailer + "\r\n").what == state::bad);

  // A head that does not end within its limit is refused for its size
  // (431), whatever comes after the limit: a read of max_head + 1 bytes
  // sees only that. Before, the whole input was refused for a bare LF or a
  // malformed request line found past the limit (400).
  auto long_line = "GET /" + std::string(max_head, 'a');
  for (auto tail : {std::string(" HTTP/1.1\n\r\n"),
                    std::string(" HTTP/9\r\nHost: x\r\n\r\n")}) {
    auto in = long_line + tail;
    CHECK(frame(in.substr(0, max_head + 1)).status == 431);
    CHECK(frame(in).status == 431);
  }
  // Within the limit the same faults are refused for what they are.
  CHECK(frame("GET / HTTP/1.1\n\r\n").status == 400);
  CHECK(frame("GET / HTTP/9\r\nHost: x\r\n\r\n").status == 400);
}
