// The simulator embedded in-process through pgw::sim::server (how the CLI's
// demo runs it).

#include "apps/pgw-upstream-sim/sim.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace json = boost::json;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

std::string body_for(const std::string& model) {
  return R"({"model":")" + model
         + R"(","messages":[{"role":"user","content":"hi"}]})";
}

json::array requests(const pgw::sim::server& srv) {
  return json::parse(srv.log_json()).at("requests").as_array();
}

} // namespace

TEST_CASE("sim in-process: serve then log then reset") {
  pgw::sim::options opts;
  opts.seed = 9;
  opts.scenario_json = R"({"models": {"tiny": {"tokens": 2}}})";
  pgw::sim::server srv(opts);
  REQUIRE(srv.port() != 0);
  httplib::Client c("127.0.0.1", srv.port());
  c.set_tcp_nodelay(true);
  auto res = c.Post("/v1/chat/completions", body_for("tiny"), "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json::parse(res->body).at("choices").at(0).at("message").at("content")
        == pgw::sim::answer_text("tiny", 9, 2).c_str());
  auto log = requests(srv);
  REQUIRE(log.size() == 1);
  CHECK(log[0].at("model") == "tiny");
  CHECK(log[0].at("n") == 1);
  srv.reset();
  CHECK(requests(srv).empty());
  REQUIRE(c.Post("/v1/chat/completions", body_for("tiny"), "application/json"));
  log = requests(srv);
  REQUIRE(log.size() == 1);
  CHECK(log[0].at("n") == 1);
}

TEST_CASE("sim in-process: stop() interrupts hanging requests promptly") {
  pgw::sim::server srv(pgw::sim::options{});
  int fd = connect_loopback(srv.port());
  std::string body = body_for("hang");
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    "Content-Length: "
                    + std::to_string(body.size()) + "\r\n\r\n" + body;
  REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL)
          == static_cast<ssize_t>(req.size()));
  auto until = steady::now() + 10s;
  while (requests(srv).empty() && steady::now() < until)
    std::this_thread::sleep_for(2ms);
  REQUIRE(requests(srv).size() == 1);
  auto t0 = steady::now();
  srv.stop();
  auto took = std::chrono::duration<double, std::milli>(steady::now() - t0);
  CHECK(took.count() < 500);
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 2000) == 1);
  char buf[16];
  CHECK(::recv(fd, buf, sizeof(buf), 0) <= 0); // closed, nothing sent
  ::close(fd);
  auto log = requests(srv);
  REQUIRE(log.size() == 1);
  CHECK_FALSE(log[0].at("ended_ms").is_null());
  CHECK(log[0].at("client_closed") == false);
  srv.stop(); // idempotent
}

TEST_CASE("sim in-process: bad options are refused") {
  pgw::sim::options bad;
  bad.scenario_json = R"({"models": {"m": {"tokens": -1}}})";
  CHECK_THROWS_AS(pgw::sim::server{bad}, std::invalid_argument);
  pgw::sim::options scale;
  scale.time_scale = -1;
  CHECK_THROWS_AS(pgw::sim::server{scale}, std::invalid_argument);
  pgw::sim::server first(pgw::sim::options{});
  pgw::sim::options same;
  same.port = first.port();
  CHECK_THROWS_AS(pgw::sim::server{same}, std::runtime_error);
}
