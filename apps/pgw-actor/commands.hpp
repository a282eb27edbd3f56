#pragma once

/// The `pgw-actor` subcommands, dispatched from main.cpp; their shared
/// pieces are in apps/cli/ (also used by the harness, apps/harness/).

#include "apps/cli/cli.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace pgw::cli {

/// The most `chat -` and `embed -` read from stdin: serve's default
/// PGW_SERVE_MAX_BODY_BYTES, 8 MiB.
constexpr size_t max_stdin_bytes = 8 * 1024 * 1024;

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
