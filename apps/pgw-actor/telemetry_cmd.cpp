// `pgw-actor telemetry report` — being built (telemetry issue).

#include "cli.hpp"

#include <cstdio>

namespace pgw::cli {

int telemetry_main(const std::vector<std::string>&) {
  std::fprintf(stderr, "pgw-actor telemetry: not available in this build yet\n");
  return exit_usage;
}

} // namespace pgw::cli
