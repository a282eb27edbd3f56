#include "apps/pgw-upstream-sim/http.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace pgw::sim::detail;

TEST_CASE("sim http: request heads: line and path and keep-alive rules") {
  request_head h;
  CHECK(parse_request_head("POST /v1/chat/completions?x=1 HTTP/1.1\r\n"
                           "Host: a\r\nContent-Length: 12",
                           h)
          .empty());
  CHECK(h.method == "POST");
  CHECK(h.path == "/v1/chat/completions");
  CHECK(h.keep_alive);
  CHECK(h.content_length == size_t{12});
  CHECK_FALSE(h.has_transfer_encoding);

  CHECK(parse_request_head("GET / HTTP/1.1\r\nConnection: Close", h).empty());
  CHECK_FALSE(h.keep_alive);
  CHECK(parse_request_head("GET / HTTP/1.0", h).empty());
  CHECK_FALSE(h.keep_alive);
  CHECK(parse_request_head("GET / HTTP/1.0\r\nconnection: keep-alive", h)
          .empty());
  CHECK(h.keep_alive);
  CHECK(parse_request_head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked", h)
          .empty());
  CHECK(h.has_transfer_encoding);
  CHECK(parse_request_head("POST / HTTP/1.1\r\nExpect: 100-continue", h)
          .empty());
  CHECK(h.expect_continue);
}

TEST_CASE("sim http: request heads: the bearer flag but never the token") {
  request_head h;
  CHECK(parse_request_head("GET / HTTP/1.1\r\nAuthorization: Bearer sk-1", h)
          .empty());
  CHECK(h.has_bearer);
  CHECK(parse_request_head("GET / HTTP/1.1\r\nauthorization: bearer  sk-1 ", h)
          .empty());
  CHECK(h.has_bearer);
  CHECK(parse_request_head("GET / HTTP/1.1\r\nAuthorization: Bearer ", h)
          .empty());
  CHECK_FALSE(h.has_bearer);
  CHECK(parse_request_head("GET / HTTP/1.1\r\nAuthorization: Basic eDp5", h)
          .empty());
  CHECK_FALSE(h.has_bearer);
}

TEST_CASE("sim http: request heads: malformed input is rejected") {
  request_head h;
  CHECK_FALSE(parse_request_head("GARBAGE", h).empty());
  CHECK_FALSE(parse_request_head("GET /", h).empty());
  CHECK_FALSE(parse_request_head("GET / HTTP/2.0", h).empty());
  CHECK_FALSE(parse_request_head("GET / HTTP/1.1\r\nno colon here", h).empty());
  CHECK_FALSE(
    parse_request_head("POST / HTTP/1.1\r\nContent-Length: 12a", h).empty());
  CHECK_FALSE(
    parse_request_head("POST / HTTP/1.1\r\nContent-Length: -1", h).empty());
  CHECK_FALSE(parse_request_head(
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2", h)
                .empty());
}

TEST_CASE("sim http: response pieces") {
  CHECK(response_head(429, "application/json", size_t{5}, false,
                      "Retry-After: 2\r\n")
        == "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
           "Content-Length: 5\r\nRetry-After: 2\r\n\r\n");
  CHECK(response_head(200, "text/event-stream", std::nullopt, true)
        == "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  std::string s;
  append_json_string(s, "a\"b\\c\n\x01");
  CHECK(s == R"("a\"b\\c\n\u0001")");
  std::string c;
  append_chunk(c, std::string(26, 'x'));
  CHECK(c == "1a\r\n" + std::string(26, 'x') + "\r\n");
}
