#pragma once

/// Child programs for the harness (the CLI's bench/soak/scenario code and
/// the tests): start one, read the port it printed, stop it by its PID
/// (never by name). Every child gets SIGKILL if this process dies first.

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace pgw::harness {

/// A loopback port nobody listens on right now: bind port 0, read it,
/// close. Another process may take it before we use it; callers retry.
/// Throws std::runtime_error when no socket can be bound.
int free_loopback_port();

/// Our sanitizer settings ("ASAN_OPTIONS=…" and the like, those set): a
/// sanitizer build's child is instrumented too, and its suppressions and
/// halt_on_error must hold there as well.
std::vector<std::string> sanitizer_settings();

/// How a child's `env` entries ("K=V") apply.
enum class env_mode {
  add,     ///< added to the inherited environment (replacing same names)
  /// `env` is the child's whole environment (when not empty), with the
  /// sanitizer settings.
  replace,
  /// PATH, HOME and the sanitizer settings, then `env`: a developer's own
  /// `LLM__…` variables cannot change what the child does.
  clean,
};

/// How `spawn_child` starts a program besides its argv.
struct spawn_options {
  std::vector<std::string> env;
  env_mode mode = env_mode::add;
  /// The child's standard streams (dup'ed onto 0, 1, 2); -1: ours.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  /// RLIMIT_FSIZE of the child in bytes (a "full disk").
  std::optional<rlim_t> max_file_size;
  /// SIGXFSZ ignored in the child (inherited through exec), so a write past
  /// `max_file_size` fails with EFBIG instead of killing it.
  bool ignore_sigxfsz = false;
};

/// Starts the program at the path `argv[0]` and returns its PID. Arguments
/// and environment are built before the fork (the caller's threads run
/// meanwhile; the child only dup's, sets limits and execs), and the child
/// dies with the thread that started it (PR_SET_PDEATHSIG). Pass stream
/// fds opened O_CLOEXEC: the child keeps only its 0, 1 and 2. Throws
/// std::runtime_error when the fork fails.
pid_t spawn_child(const std::vector<std::string>& argv,
                  const spawn_options& opts);

/// An fd open on /dev/null, closed by the destructor.
class null_fd {
public:
  null_fd();
  null_fd(const null_fd&) = delete;
  null_fd& operator=(const null_fd&) = delete;
  ~null_fd();
  int get() const {
    return fd_;
  }

private:
  int fd_;
};

/// A child process with its stdout piped to us. Stopped (SIGTERM, up to 2 s
/// grace, then SIGKILL) and reaped by the destructor.
class child_process {
public:
  child_process() = default;

  /// Starts `argv[0]` with `argv`. Throws std::runtime_error when the pipe
  /// or the fork fails.
  child_process(std::vector<std::string> argv,
                std::vector<std::string> env = {},
                env_mode mode = env_mode::add);

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;
  ~child_process();

  pid_t pid() const {
    return pid_;
  }

  /// Reads one line of the child's stdout, waiting at most `timeout`.
  /// Throws when the child closes stdout or the time runs out.
  std::string read_line(std::chrono::milliseconds timeout
                        = std::chrono::seconds(20));

  /// Reads what the child has written to stdout so far (at least one
  /// byte, partial lines too), waiting at most `timeout`; empty once the
  /// child closed its output. Throws when the time runs out.
  std::string read_some(std::chrono::milliseconds timeout
                        = std::chrono::seconds(20));

  /// Closes our end of the child's stdout (nobody reads it any more).
  void close_output();

  /// Sends `sig` to the child.
  void signal(int sig);

  /// Waits for the child to exit and returns its exit status (or -signal).
  int wait();

  /// As `wait`, for at most `timeout`: nullopt when the child still runs
  /// then (it is left running; the destructor stops it).
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

  /// Stops the child: SIGTERM, up to 2 s grace, then SIGKILL.
  void stop();

private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int exit_status_ = -1;
  std::string buffer_;
};

/// A program that prints "listening HOST:PORT" as its first stdout line
/// (`pgw-upstream-sim`, `pgw-actor serve`), started with `--listen
/// 127.0.0.1:0` by the caller so the kernel picks the port.
class listening_process {
public:
  listening_process() = default;

  /// Starts `argv` and reads its port. Throws std::runtime_error when it
  /// does not print one within `timeout`.
  listening_process(std::vector<std::string> argv,
                    std::vector<std::string> env = {},
                    env_mode mode = env_mode::add,
                    std::chrono::milliseconds timeout
                    = std::chrono::seconds(20));

  int port() const {
    return port_;
  }

  pid_t pid() const {
    return proc_.pid();
  }

  /// "http://127.0.0.1:PORT/v1"
  std::string base_url() const;

  child_process& process() {
    return proc_;
  }

private:
  child_process proc_;
  int port_ = 0;
};

/// A running `pgw-upstream-sim` (the program at `binary`) on a free
/// loopback port, with `extra_args` after `--listen 127.0.0.1:0`.
class sim_process : public listening_process {
public:
  sim_process(const std::string& binary, std::vector<std::string> extra_args,
              std::chrono::milliseconds timeout = std::chrono::seconds(20));
};

/// Result of running a program to completion.
struct run_result {
  int exit_code = -1;
  std::string out; ///< stdout
  std::string err; ///< stderr
  /// The child's peak resident set (ru_maxrss), in KiB.
  long peak_rss_kib = 0;
};

/// Runs `argv` with extra `env` ("K=V") and `input` on stdin; waits for it.
/// With `clean_env`, the child gets only PATH, HOME, the sanitizer settings
/// and `env` (env_mode::clean).
run_result run_program(std::vector<std::string> argv,
                       std::vector<std::string> env = {},
                       const std::string& input = "", bool clean_env = true);

} // namespace pgw::harness
