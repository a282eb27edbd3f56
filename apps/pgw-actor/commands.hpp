#pragma once

/// The `pgw-actor` subcommands, dispatched from main.cpp; their shared
/// pieces are in apps/cli/ (also used by the harness, apps/harness/).

#include "apps/cli/cli.hpp"

#include <string>
#include <vector>

namespace pgw::cli {

int chat_main(const std::vector<std::string>& args);
int embed_main(const std::vector<std::string>& args);
int ocr_main(const std::vector<std::string>& args);
int config_main(const std::vector<std::string>& args);
int demo_main(const std::vector<std::string>& args);
int bench_main(const std::vector<std::string>& args);
int soak_main(const std::vector<std::string>& args);
int telemetry_main(const std::vector<std::string>& args);
int status_main(const std::vector<std::string>& args);
int serve_main(const std::vector<std::string>& args);

} // namespace pgw::cli
