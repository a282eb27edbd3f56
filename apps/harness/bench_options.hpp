#pragma once

/// The `--name value` options of the `pgw-actor bench` subcommands: one
/// parser, so that every bench answers --help, a missing value and an
/// out-of-range value the same way.

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pgw::cli {

/// One option: `take` stores its value and returns false when the value is
/// not one the option accepts.
struct bench_option {
  std::string name; ///< "--calls"
  std::function<bool(const std::string& value)> take;
};

/// A whole number in [lo, hi].
bench_option whole_option(std::string name, int& out, double lo, double hi);

/// A number for which `ok` holds.
bench_option number_option(std::string name, double& out,
                           std::function<bool(double)> ok);

/// Any text, or one of `allowed` when that is not empty.
bench_option text_option(std::string name, std::string& out,
                         std::vector<std::string> allowed = {});

/// Reads args[1..] as `--name value` pairs. Nothing when they all parsed;
/// else the exit code: exit_ok after --help printed `usage` on stdout,
/// exit_usage after an unknown option, a missing value or a value out of
/// range (which, on stderr: "pgw-actor bench <command>: bad value 'x' for
/// --calls", then `usage`).
std::optional<int> parse_bench_options(const std::vector<std::string>& args,
                                       const char* command, const char* usage,
                                       const std::vector<bench_option>& options);

} // namespace pgw::cli
