#pragma once

/// A throwaway `redis-server` on a free loopback port, for the fleet
/// scenario and `bench throughput`: no persistence, killed with us
/// (PR_SET_PDEATHSIG), stopped by its PID (never by name).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

namespace pgw::cli {

class local_redis {
public:
  local_redis() = default;
  local_redis(const local_redis&) = delete;
  local_redis& operator=(const local_redis&) = delete;

  ~local_redis() {
    stop();
  }

  /// Starts redis-server (from PATH) and waits until it answers PING.
  /// False when it cannot be started within a few seconds.
  bool start() {
    for (int i = 0; i < 5; ++i) {
      port_ = free_port();
      if (port_ > 0 && launch())
        return true;
    }
    return false;
  }

  void stop() {
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
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port() const {
    return port_;
  }

  std::string url() const {
    return "redis://127.0.0.1:" + std::to_string(port_) + "/0";
  }

private:
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0
        && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
  }

  static bool pong(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const char ping[] = "*1\r\n$4\r\nPING\r\n";
      if (::send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL) > 0) {
        pollfd pfd{fd, POLLIN, 0};
        char buf[64];
        if (::poll(&pfd, 1, 200) > 0) {
          auto n = ::recv(fd, buf, sizeof(buf), 0);
          ok = n >= 5 && std::string(buf, 5) == "+PONG";
        }
      }
    }
    ::close(fd);
    return ok;
  }

  bool launch() {
    auto parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0)
      return false;
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(126);
      auto p = std::to_string(port_);
      int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      ::execlp("redis-server", "redis-server", "--bind", "127.0.0.1",
               "--port", p.c_str(), "--save", "", "--appendonly", "no",
               "--dir", "/tmp", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1; // exited: the port was taken, or no redis-server
        return false;
      }
      if (pong(port_))
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    return false;
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

} // namespace pgw::cli
