// serve's connection stream (issue 13): cpp-httplib's request processing
// over one http_connection per connection, on a real loopback TCP pair.
// A response leaves in one send (head and body together), a bodiless one
// at the request's end, a `100 Continue` before the body is read, and the
// bytes of a pipelined second request stay for it.

#include "apps/cli/http_connection.hpp"

#include <doctest/doctest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace {

/// A connected loopback TCP pair: `client` (the test) and `server`.
struct tcp_pair {
  int client = -1;
  int server = -1;

  tcp_pair() {
    int lst = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(::bind(lst, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::listen(lst, 1) == 0);
    REQUIRE(::getsockname(lst, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    server = ::accept(lst, nullptr, nullptr);
    REQUIRE(server >= 0);
    ::close(lst);
  }

  ~tcp_pair() {
    ::close(client);
    ::close(server);
  }

  void send(const std::string& text) const {
    REQUIRE(::send(client, text.data(), text.size(), 0)
            == static_cast<ssize_t>(text.size()));
  }

  /// What the server has sent: waits up to 1 s for the first bytes, then
  /// takes what is there without waiting (every case reads after the
  /// sends it expects are done, or when no more can come).
  std::string received() const {
    std::string out;
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0)
      return out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(client, buf, sizeof buf, MSG_DONTWAIT)) > 0;)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

/// cpp-httplib's server with its request processing reachable.
struct test_server : httplib::Server {
  test_server() {
    Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("got " + req.body + " from " + req.remote_addr,
                      "text/plain");
    });
    Get("/empty", [](const httplib::Request&, httplib::Response& res) {
      res.status = 204;
    });
  }

  bool serve_one(pgw::cli::http_connection& strm) {
    bool closed = false;
    bool ok = process_request(strm, false, closed, nullptr);
    return strm.end_request() && ok;
  }
};

/// One connection: the pair, the server and the stream of its requests.
struct connection {
  tcp_pair pair;
  test_server svr;
  pgw::cli::http_connection strm{pair.server, 5, 0, 5, 0};

  /// Sends `request`, serves it, checks that the answer left in one send
  /// and returns what the client received.
  std::string answer_in_one_send(const std::string& request) {
    pair.send(request);
    REQUIRE(svr.serve_one(strm));
    CHECK(strm.sends() == 1);
    return pair.received();
  }
};

} // namespace

TEST_CASE_FIXTURE(connection, "http_connection sends a response's head and body in one send") {
  auto got = answer_in_one_send(
    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  CHECK(got.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(got.find("\r\n\r\ngot hello from 127.0.0.1") != std::string::npos);
}

TEST_CASE_FIXTURE(connection, "http_connection sends a bodiless response at the request's end") {
  auto got = answer_in_one_send("GET /empty HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(got.rfind("HTTP/1.1 204 No Content\r\n", 0) == 0);
  CHECK(got.size() >= 4);
  CHECK(got.compare(got.size() - 4, 4, "\r\n\r\n") == 0);
}

TEST_CASE_FIXTURE(connection, "http_connection sends 100 Continue before the body is awaited") {
  // The client waits for the interim answer before sending its body: the
  // server must send it before it reads (else both wait until the read
  // timeout). The body is sent by the test once the 100 arrived.
  pair.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
            "Expect: 100-continue\r\n\r\n");
  std::string interim;
  bool served = false;
  std::thread server{[&] { served = svr.serve_one(strm); }};
  interim = pair.received();
  if (interim.find("100 Continue") != std::string::npos)
    pair.send("later");
  server.join();
  CHECK(interim.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0) == 0);
  CHECK(served);
  CHECK(strm.sends() == 2);
  CHECK(pair.received().find("got later") != std::string::npos);
}

TEST_CASE_FIXTURE(connection, "http_connection keeps a pipelined request's bytes for it") {
  pair.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\none"
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\ntwo");
  REQUIRE(svr.serve_one(strm));
  CHECK(strm.buffered());
  REQUIRE(svr.serve_one(strm));
  CHECK_FALSE(strm.buffered());
  CHECK(strm.sends() == 2);
  auto got = pair.received();
  auto one = got.find("got one");
  auto two = got.find("got two");
  CHECK(one != std::string::npos);
  CHECK(two != std::string::npos);
  CHECK(one < two);
}

TEST_CASE_FIXTURE(connection, "http_connection reads prefilled bytes first, then the socket") {
  // serve's front read a request's head and part of its body (larger than
  // the stream's own buffer) before it handed the connection over; the rest
  // of the body and a second request come from the socket.
  std::string body(10000, 'a');
  body += "end";
  std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     + std::to_string(body.size()) + "\r\n\r\n";
  strm.prefill(head + body.substr(0, 6000));
  pair.send(body.substr(6000)
            + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\ntwo");
  REQUIRE(svr.serve_one(strm));
  REQUIRE(svr.serve_one(strm));
  CHECK_FALSE(strm.buffered());
  auto got = pair.received(); // both were sent in full before this
  auto one = got.find("got " + body + " from");
  auto two = got.find("got two from");
  CHECK(one != std::string::npos);
  CHECK(two != std::string::npos);
  CHECK(one < two);
}

TEST_CASE_FIXTURE(connection, "http_connection fails a write once the peer is gone") {
  pair.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx");
  // The client resets the connection before the answer goes out.
  linger off{1, 0};
  ::setsockopt(pair.client, SOL_SOCKET, SO_LINGER, &off, sizeof off);
  ::shutdown(pair.client, SHUT_RDWR);
  ::close(pair.client);
  pair.client = ::socket(AF_INET, SOCK_STREAM, 0); // closed by the pair
  std::string big(1 << 20, 'x');
  bool ok = strm.write(big.data(), big.size()) >= 0; // held: the head
  ok = strm.write(big.data(), big.size()) >= 0 && ok;
  ok = strm.write(big.data(), big.size()) >= 0 && ok;
  CHECK_FALSE(ok);
  CHECK(strm.write("y", 1) == -1);
}
