// `pgw-actor telemetry report [--db PATH] [--since WHEN] [--json]
// [--svg PATH]`: what happened to every call, from the telemetry database.
// The numbers come from backends/sqlite/report; this file only parses
// arguments and writes files.

#include "commands.hpp"

#include "apps/pgw-actor/report/report.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace pgw::cli {

namespace {

constexpr const char* usage_text =
  "usage: pgw-actor telemetry report [--db PATH] [--since WHEN] [--json] "
  "[--svg PATH]\n"
  "  --db PATH     telemetry database (default ./pgw-telemetry.sqlite)\n"
  "  --since WHEN  only rows from WHEN on: an ISO-8601 time such as "
  "2026-11-29T10:00:00Z,\n"
  "                or a duration back from now: 90s, 15m, 2h, 1d, 1w\n"
  "  --json        print the report as one JSON object\n"
  "  --svg PATH    also write a latency CDF per source as an SVG file\n";

/// A usage error in chat's form ("pgw-actor: invalid_request: PROBLEM",
/// then the usage text), or with `json_out` the error object on stdout.
int usage_error(const std::string& problem, bool json_out) {
  auto rc = usage_failure(problem, json_out);
  if (!json_out)
    std::fputs(usage_text, stderr);
  return rc;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(system_clock::now().time_since_epoch())
    .count();
}

} // namespace

int telemetry_main(const std::vector<std::string>& args) {
  // --json anywhere: an error found before it is the error object too.
  bool json_out = wants_json(args);
  auto usage = [json_out](const std::string& problem) {
    return usage_error(problem, json_out);
  };
  if (args.empty())
    return usage("missing subcommand (report)");
  if (args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage_text, stdout);
    return exit_ok;
  }
  if (args[0] != "report")
    return usage("unknown subcommand '" + args[0] + "'");
  std::string db_path = "./pgw-telemetry.sqlite";
  std::optional<double> since_ms;
  std::optional<std::string> svg_path;
  for (size_t i = 1; i < args.size(); ++i) {
    auto& arg = args[i];
    auto value = [&]() -> const std::string* {
      return i + 1 < args.size() ? &args[++i] : nullptr;
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      return exit_ok;
    } else if (arg == "--json") {
      continue; // read above
    } else if (arg == "--db") {
      auto v = value();
      if (v == nullptr || v->empty())
        return usage("--db needs a path");
      db_path = *v;
    } else if (arg == "--since") {
      auto v = value();
      if (v == nullptr)
        return usage("--since needs a time or a duration");
      since_ms = report::parse_since(*v, now_ms());
      if (!since_ms)
        return usage("--since " + *v
                     + ": not an ISO-8601 time or a duration like 15m");
      // No row is older than 1970; a longer way back (99999999999d) is all
      // of them, said as 1970 rather than as a year gmtime cannot print.
      since_ms = std::max(*since_ms, 0.0);
    } else if (arg == "--svg") {
      auto v = value();
      if (v == nullptr || v->empty())
        return usage("--svg needs a path");
      svg_path = *v;
    } else {
      return usage("unknown option '" + arg + "'");
    }
  }
  auto rep = report::build(db_path, since_ms);
  if (!rep) // as chat, embed and ocr print an error (invalid_config, exit 2)
    return report_call_error(rep.error(), json_out);
  if (svg_path) {
    errno = 0;
    std::ofstream out{*svg_path, std::ios::binary | std::ios::trunc};
    out << report::render_latency_cdf_svg(*rep);
    out.close();
    if (!out) {
      auto why = errno != 0 ? std::string{": "} + std::strerror(errno) : "";
      return report_call_error(make_error(error_code::internal,
                                          "cannot write the latency CDF to "
                                            + *svg_path + why),
                               json_out);
    }
  }
  auto text = json_out ? report::render_json(*rep) : report::render_text(*rep);
  std::fputs(text.c_str(), stdout);
  if (svg_path && !json_out)
    std::printf("latency CDF written to %s\n", svg_path->c_str());
  return exit_ok;
}

} // namespace pgw::cli
