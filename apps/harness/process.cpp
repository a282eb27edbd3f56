#include "apps/harness/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

extern char** environ;

namespace pgw::harness {

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind to port 0 failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// -- spawn_child ------------------------------------------------------------

namespace {

std::string name_of(const std::string& kv) {
  return kv.substr(0, kv.find('='));
}

/// The child's environment, as `opts` says; built in the parent.
std::vector<std::string> child_env(const spawn_options& opts) {
  std::vector<std::string> out;
  switch (opts.mode) {
    case env_mode::clean: {
      out.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
      auto home = std::getenv("HOME");
      out.push_back(std::string{"HOME="} + (home ? home : "/tmp"));
      break;
    }
    case env_mode::replace:
      if (!opts.env.empty())
        break;
      [[fallthrough]];
    case env_mode::add:
      for (char** e = environ; *e != nullptr; ++e)
        out.emplace_back(*e);
      break;
  }
  // `env` may still set them.
  if (opts.mode != env_mode::add)
    for (auto& kv : sanitizer_settings())
      out.push_back(kv);
  // Later entries replace earlier ones of the same name (as putenv did).
  for (auto& kv : opts.env) {
    auto name = name_of(kv);
    out.erase(std::remove_if(out.begin(), out.end(),
                             [&name](const std::string& x) {
                               return name_of(x) == name;
                             }),
              out.end());
    out.push_back(kv);
  }
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& xs) {
  std::vector<char*> out;
  for (auto& x : xs)
    out.push_back(x.data());
  out.push_back(nullptr);
  return out;
}

} // namespace

pid_t spawn_child(const std::vector<std::string>& argv,
                  const spawn_options& opts) {
  auto args_text = argv;
  auto env_text = child_env(opts);
  auto args = pointers(args_text);
  auto envp = pointers(env_text);
  auto parent = ::getpid();
  auto pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid > 0)
    return pid;
  // Dies with us (also when a sanitizer stops us and no destructor runs):
  // an orphan would keep ctest's output pipe open, and ctest would wait for
  // it until the test's timeout.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(126);
  int targets[] = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
  int fds[] = {opts.stdin_fd, opts.stdout_fd, opts.stderr_fd};
  for (int i = 0; i < 3; ++i)
    if (fds[i] >= 0)
      ::dup2(fds[i], targets[i]);
  if (opts.ignore_sigxfsz)
    ::signal(SIGXFSZ, SIG_IGN);
  if (opts.max_file_size) {
    rlimit lim{*opts.max_file_size, *opts.max_file_size};
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ::execve(args[0], args.data(), envp.data());
  const char msg[] = "exec failed: ";
  auto rc = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  rc = ::write(STDERR_FILENO, args[0], std::strlen(args[0]));
  rc = ::write(STDERR_FILENO, "\n", 1);
  (void) rc;
  ::_exit(127);
}

null_fd::null_fd() : fd_(::open("/dev/null", O_RDWR | O_CLOEXEC)) {
  if (fd_ < 0)
    throw std::runtime_error("cannot open /dev/null");
}

null_fd::~null_fd() {
  ::close(fd_);
}

// -- child_process ----------------------------------------------------------

child_process::child_process(std::vector<std::string> argv,
                             std::vector<std::string> env, env_mode mode) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  spawn_options opts;
  opts.env = std::move(env);
  opts.mode = mode;
  opts.stdout_fd = out[1];
  try {
    pid_ = spawn_child(argv, opts);
  } catch (...) {
    ::close(out[0]);
    ::close(out[1]);
    throw;
  }
  ::close(out[1]);
  out_fd_ = out[0];
}

child_process::child_process(child_process&& other) noexcept {
  *this = std::move(other);
}

child_process& child_process::operator=(child_process&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(out_fd_, other.out_fd_);
  std::swap(exit_status_, other.exit_status_);
  std::swap(buffer_, other.buffer_);
  return *this;
}

child_process::~child_process() {
  stop();
  close_output();
}

std::string child_process::read_line(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto pos = buffer_.find('\n'); pos != std::string::npos) {
      auto line = buffer_.substr(0, pos);
      buffer_.erase(0, pos + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw std::runtime_error("timeout reading child output");
    pollfd pfd{out_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char buf[4096];
    auto n = ::read(out_fd_, buf, sizeof(buf));
    if (n <= 0)
      throw std::runtime_error("child closed its output");
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

std::string child_process::read_some(std::chrono::milliseconds timeout) {
  if (!buffer_.empty())
    return std::exchange(buffer_, std::string{});
  pollfd pfd{out_fd_, POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0)
    throw std::runtime_error("timeout reading child output");
  char buf[4096];
  auto n = ::read(out_fd_, buf, sizeof(buf));
  return n <= 0 ? std::string{} : std::string(buf, static_cast<size_t>(n));
}

void child_process::close_output() {
  if (out_fd_ >= 0)
    ::close(out_fd_);
  out_fd_ = -1;
}

void child_process::signal(int sig) {
  if (pid_ > 0)
    ::kill(pid_, sig);
}

int child_process::wait() {
  if (pid_ <= 0)
    return exit_status_;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return exit_status_;
}

std::optional<int>
child_process::wait_for(std::chrono::milliseconds timeout) {
  if (pid_ <= 0)
    return exit_status_;
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                       : -WTERMSIG(status);
      return exit_status_;
    }
    if (std::chrono::steady_clock::now() >= until)
      return std::nullopt;
    ::usleep(5000);
  }
}

void child_process::stop() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    ::usleep(10000);
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

// -- listening_process --------------------------------------------------------

listening_process::listening_process(std::vector<std::string> argv,
                                     std::vector<std::string> env,
                                     env_mode mode,
                                     std::chrono::milliseconds timeout)
  : proc_(std::move(argv), std::move(env), mode) {
  auto line = proc_.read_line(timeout);
  auto colon = line.rfind(':');
  if (line.rfind("listening ", 0) != 0 || colon == std::string::npos)
    throw std::runtime_error("unexpected output instead of the port: "
                             + line);
  port_ = std::atoi(line.c_str() + colon + 1);
  if (port_ <= 0)
    throw std::runtime_error("no port in: " + line);
}

std::string listening_process::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
}

namespace {

std::vector<std::string> sim_argv(const std::string& binary,
                                  std::vector<std::string> extra_args) {
  std::vector<std::string> argv{binary, "--listen", "127.0.0.1:0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  return argv;
}

} // namespace

sim_process::sim_process(const std::string& binary,
                         std::vector<std::string> extra_args,
                         std::chrono::milliseconds timeout)
  : listening_process(sim_argv(binary, std::move(extra_args)), {},
                      env_mode::add, timeout) {
}

// -- sanitizer_settings ---------------------------------------------------------

std::vector<std::string> sanitizer_settings() {
  std::vector<std::string> out;
  for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS",
                           "TSAN_OPTIONS"})
    if (auto v = std::getenv(name))
      out.push_back(std::string{name} + "=" + v);
  return out;
}

// -- run_program --------------------------------------------------------------

run_result run_program(std::vector<std::string> argv,
                       std::vector<std::string> env, const std::string& input,
                       bool clean_env) {
  // O_CLOEXEC: the child keeps only the ends it gets as 0, 1 and 2, so it
  // sees the end of its input when we close ours.
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0
      || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  spawn_options opts;
  opts.env = std::move(env);
  opts.mode = clean_env ? env_mode::clean : env_mode::add;
  opts.stdin_fd = in[0];
  opts.stdout_fd = out[1];
  opts.stderr_fd = err[1];
  auto pid = spawn_child(argv, opts);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (!input.empty()) {
    auto rc = ::write(in[1], input.data(), input.size());
    (void) rc;
  }
  ::close(in[1]);
  run_result result;
  // Read both pipes without deadlock: poll until both are closed.
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      char buf[4096];
      auto n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  result.peak_rss_kib = usage.ru_maxrss;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return result;
}

} // namespace pgw::harness
