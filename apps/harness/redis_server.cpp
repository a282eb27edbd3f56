#include "apps/harness/redis_server.hpp"

#include "apps/harness/process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace pgw::harness {

std::string redis_server_binary() {
  if (auto env = std::getenv("PGW_REDIS_SERVER"); env && *env)
    return env;
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/bin:/usr/local/bin";
  size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find(':', start);
    if (end == std::string::npos)
      end = path.size();
    auto candidate = path.substr(start, end - start) + "/redis-server";
    if (end > start && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  throw std::runtime_error("redis-server not found (set PGW_REDIS_SERVER)");
}

std::string ping_redis(int port, std::chrono::milliseconds timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const char ping[] = "*1\r\n$4\r\nPING\r\n";
    if (::send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL)
        == static_cast<ssize_t>(sizeof(ping) - 1)) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(timeout.count())) > 0) {
        char buf[256];
        auto n = ::recv(fd, buf, sizeof(buf), 0);
        if (n > 0)
          reply.assign(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  if (auto eol = reply.find("\r\n"); eol != std::string::npos)
    reply.resize(eol);
  return reply;
}

redis_server::redis_server(std::vector<std::string> extra_args)
  : extra_args_(std::move(extra_args)) {
  char dir[] = "/tmp/pgw-redis-XXXXXX";
  if (::mkdtemp(dir) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  dir_ = dir;
  std::string problem;
  for (int i = 0; i < 5; ++i) {
    port_ = free_loopback_port();
    if (launch(problem))
      return;
  }
  ::rmdir(dir_.c_str());
  throw std::runtime_error("redis-server did not start: " + problem);
}

std::unique_ptr<redis_server> redis_server::try_start(const char* who) {
  try {
    return std::make_unique<redis_server>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return nullptr;
  }
}

redis_server::~redis_server() {
  stop();
  ::unlink((dir_ + "/redis.log").c_str());
  ::rmdir(dir_.c_str());
}

std::string redis_server::url(int db, const std::string& password) const {
  std::string auth = password.empty() ? "" : ":" + password + "@";
  return "redis://" + auth + "127.0.0.1:" + std::to_string(port_) + "/"
         + std::to_string(db);
}

void redis_server::kill() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void redis_server::stop() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
}

void redis_server::freeze() {
  if (pid_ > 0)
    ::kill(pid_, SIGSTOP);
}

void redis_server::thaw() {
  if (pid_ > 0)
    ::kill(pid_, SIGCONT);
}

void redis_server::restart() {
  stop();
  std::string problem;
  // The port was ours a moment ago; give the kernel a few tries.
  for (int i = 0; i < 20; ++i) {
    if (launch(problem))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("redis-server did not restart: " + problem);
}

std::string redis_server::log() const {
  std::string out;
  if (auto f = std::fopen((dir_ + "/redis.log").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
      out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

bool redis_server::launch(std::string& problem) {
  std::vector<std::string> argv{redis_server_binary(),
                                "--bind",
                                "127.0.0.1",
                                "--port",
                                std::to_string(port_),
                                "--save",
                                "",
                                "--appendonly",
                                "no",
                                "--dir",
                                dir_,
                                "--logfile",
                                dir_ + "/redis.log"};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  null_fd null;
  spawn_options opts;
  opts.stdin_fd = null.get();
  opts.stdout_fd = null.get();
  pid_ = spawn_child(argv, opts);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      problem = "exited at start (port " + std::to_string(port_)
                + "): " + log();
      return false;
    }
    auto reply = ping_redis(port_);
    // NOAUTH: up, with --requirepass.
    if (reply == "+PONG" || reply.rfind("-NOAUTH", 0) == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  problem = "no answer to PING within 10 s";
  kill();
  return false;
}

} // namespace pgw::harness
