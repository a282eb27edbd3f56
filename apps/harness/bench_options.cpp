#include "apps/harness/bench_options.hpp"

#include "apps/cli/cli.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

namespace pgw::cli {

bench_option whole_option(std::string name, int& out, double lo, double hi) {
  return {std::move(name), [&out, lo, hi](const std::string& value) {
            auto x = parse_number(value);
            // The range first: casting a value past long long's is
            // undefined behaviour.
            if (!x || *x < lo || *x > hi || *x != std::floor(*x))
              return false;
            out = static_cast<int>(*x);
            return true;
          }};
}

bench_option number_option(std::string name, double& out,
                           std::function<bool(double)> ok) {
  return {std::move(name),
          [&out, ok = std::move(ok)](const std::string& value) {
            auto x = parse_number(value);
            if (!x || !ok(*x))
              return false;
            out = *x;
            return true;
          }};
}

bench_option text_option(std::string name, std::string& out,
                         std::vector<std::string> allowed) {
  return {std::move(name),
          [&out, allowed = std::move(allowed)](const std::string& value) {
            if (!allowed.empty()) {
              bool known = false;
              for (auto& a : allowed)
                known = known || a == value;
              if (!known)
                return false;
            }
            out = value;
            return true;
          }};
}

std::optional<int> parse_bench_options(const std::vector<std::string>& args,
                                       const char* command, const char* usage,
                                       const std::vector<bench_option>& options) {
  for (size_t i = 1; i < args.size(); i += 2) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(usage, stdout);
      return exit_ok;
    }
    const bench_option* match = nullptr;
    for (auto& o : options)
      if (o.name == args[i])
        match = &o;
    std::string why;
    if (match == nullptr)
      why = "unknown option " + args[i];
    else if (i + 1 >= args.size())
      why = args[i] + " needs a value";
    else if (!match->take(args[i + 1]))
      why = "bad value '" + args[i + 1] + "' for " + args[i];
    if (!why.empty()) {
      std::fprintf(stderr, "pgw-actor bench %s: %s\n%s", command, why.c_str(),
                   usage);
      return exit_usage;
    }
  }
  return std::nullopt;
}

} // namespace pgw::cli
