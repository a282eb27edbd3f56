#pragma once

/// The one throwaway `redis-server` of the harness (the CLI's fleet
/// scenario and Redis benches, the Redis contract and integration tests):
/// a free loopback port, no persistence, its log in a temporary directory,
/// killed with us (PR_SET_PDEATHSIG), stopped by its PID (never by name).

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace pgw::harness {

/// The redis-server binary: $PGW_REDIS_SERVER, else the first
/// `redis-server` on PATH (then /usr/bin, /usr/local/bin). Throws
/// std::runtime_error when there is none.
std::string redis_server_binary();

/// Sends PING to 127.0.0.1:`port` and returns the first reply line ("" when
/// nothing answers within `timeout`).
std::string ping_redis(int port, std::chrono::milliseconds timeout
                                 = std::chrono::milliseconds(200));

/// A running `redis-server --bind 127.0.0.1 --port N --save ''
/// --appendonly no` (plus `extra_args`). Stopped (SIGTERM, then SIGKILL)
/// by the destructor.
class redis_server {
public:
  /// Starts on a free port (retrying a few ports if one was taken
  /// meanwhile) and waits until it answers PING. Throws
  /// std::runtime_error when it does not start.
  explicit redis_server(std::vector<std::string> extra_args = {});

  /// The same, null (and the reason on stderr, prefixed by `who`) when it
  /// does not start: for the CLI, which reports and exits.
  static std::unique_ptr<redis_server> try_start(const char* who);

  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;
  ~redis_server();

  int port() const {
    return port_;
  }

  pid_t pid() const {
    return pid_;
  }

  bool running() const {
    return pid_ > 0;
  }

  /// "redis://[:password@]127.0.0.1:PORT/db"
  std::string url(int db = 0, const std::string& password = "") const;

  /// Kills the server at once (SIGKILL), as a crash would, and reaps it.
  void kill();

  /// Stops the server: SIGTERM, up to 2 s grace, then SIGKILL.
  void stop();

  /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: it keeps its socket
  /// but answers nothing while frozen.
  void freeze();
  void thaw();

  /// Starts the server again on the same port (after `kill` or `stop`);
  /// its data is gone (no persistence).
  void restart();

  /// The server's log so far.
  std::string log() const;

private:
  /// Starts the child on `port_` and waits until it answers PING.
  bool launch(std::string& problem);

  std::vector<std::string> extra_args_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

} // namespace pgw::harness
