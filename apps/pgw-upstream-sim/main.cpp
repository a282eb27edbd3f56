/// pgw-upstream-sim: the simulator as a program (SPEC §11). Prints
/// "listening HOST:PORT" once bound, serves until SIGTERM/SIGINT, exits 0.
/// Bad arguments or a bad scenario file: a message on stderr, exit 2.

#include "apps/pgw-upstream-sim/sim.hpp"

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <pthread.h>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

constexpr const char* usage_text =
  "usage: pgw-upstream-sim --listen HOST:PORT [--scenario FILE] [--seed N]\n"
  "                        [--time-scale X] [--log-limit N]\n"
  "  --listen HOST:PORT  address to bind (PORT 0 = any free port)\n"
  "  --scenario FILE     JSON scenario adding to / overriding the built-ins\n"
  "  --seed N            seed for faults, latencies and answers (default 1)\n"
  "  --time-scale X      multiplies every simulated delay (default 1)\n"
  "  --log-limit N       log entries kept (default 1000000)\n";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

uint64_t parse_unsigned(const std::string& flag, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw usage_error(flag + ": expected a non-negative integer, got '" + text
                      + "'");
  errno = 0;
  auto v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE)
    throw usage_error(flag + ": number out of range: '" + text + "'");
  return v;
}

void parse_listen(const std::string& text, pgw::sim::options& opts) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw usage_error("--listen: expected HOST:PORT, got '" + text + "'");
  auto host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto port = parse_unsigned("--listen", text.substr(colon + 1));
  if (port > 65535)
    throw usage_error("--listen: port out of range: " + text.substr(colon + 1));
  opts.host = host;
  opts.port = static_cast<uint16_t>(port);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw usage_error("--scenario " + path + ": cannot read: "
                      + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

int main(int argc, char** argv) {
  pgw::sim::options opts;
  std::string scenario_path;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::fputs(usage_text, stdout);
        return 0;
      }
      std::string value;
      bool inline_value = false;
      if (auto eq = arg.find('='); arg.rfind("--", 0) == 0
                                   && eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
      if (arg != "--listen" && arg != "--scenario" && arg != "--seed"
          && arg != "--time-scale" && arg != "--log-limit")
        throw usage_error("unknown argument '" + arg + "'");
      if (!inline_value) {
        if (i + 1 >= argc)
          throw usage_error(arg + ": missing value");
        value = argv[++i];
      }
      if (arg == "--listen") {
        parse_listen(value, opts);
      } else if (arg == "--scenario") {
        scenario_path = value;
      } else if (arg == "--seed") {
        opts.seed = parse_unsigned(arg, value);
      } else if (arg == "--log-limit") {
        opts.log_limit = static_cast<size_t>(parse_unsigned(arg, value));
      } else if (arg == "--time-scale") {
        char* end = nullptr;
        double x = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !std::isfinite(x) || x < 0)
          throw usage_error("--time-scale: expected a number >= 0, got '"
                            + value + "'");
        opts.time_scale = x;
      }
    }
    if (!scenario_path.empty()) {
      opts.scenario_json = read_file(scenario_path);
      try {
        pgw::sim::check_scenario(opts.scenario_json);
      } catch (const std::invalid_argument& e) {
        throw usage_error("--scenario " + scenario_path + ": " + e.what());
      }
    }
  } catch (const usage_error& e) {
    std::fprintf(stderr, "pgw-upstream-sim: %s\n%s", e.what(), usage_text);
    return 2;
  }

  // Every thread inherits this mask; the main thread takes the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    pgw::sim::server srv(opts);
    auto host = opts.host.find(':') != std::string::npos
                  ? "[" + opts.host + "]"
                  : opts.host;
    std::printf("listening %s:%u\n", host.c_str(),
                static_cast<unsigned>(srv.port()));
    std::fflush(stdout);
    int sig = 0;
    while (sigwait(&signals, &sig) != 0) {
    }
    srv.stop();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "pgw-upstream-sim: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pgw-upstream-sim: %s\n", e.what());
    return 1;
  }
  return 0;
}
