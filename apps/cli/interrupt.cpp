// SIGINT / SIGTERM as a flag, for subcommands that cancel their call.

#include "apps/cli/cli.hpp"

#include <atomic>
#include <csignal>

namespace pgw::cli {

namespace {

std::atomic<bool> interrupt_flag{false};

} // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { interrupt_flag = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() {
  return interrupt_flag.load();
}

} // namespace pgw::cli
