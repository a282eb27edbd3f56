// The bench subcommands' one option parser (apps/harness/bench_options).

#include "apps/cli/cli.hpp"
#include "apps/harness/bench_options.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

using namespace pgw::cli;

namespace {

struct parsed {
  int calls = 7;
  double seconds = 1;
  std::string mode = "auto";
  std::optional<int> code;
};

parsed parse(std::vector<std::string> args) {
  parsed p;
  args.insert(args.begin(), "test");
  p.code = parse_bench_options(
    args, "test", "usage: test\n",
    {whole_option("--calls", p.calls, 1, 100),
     number_option("--seconds", p.seconds,
                   [](double x) { return x > 0 && x <= 10; }),
     text_option("--mode", p.mode, {"a", "b"})});
  return p;
}

} // namespace

TEST_CASE("bench options: values in range are stored, nothing to exit") {
  auto p = parse({"--calls", "100", "--seconds", "0.5", "--mode", "b"});
  CHECK(!p.code);
  CHECK(p.calls == 100);
  CHECK(p.seconds == 0.5);
  CHECK(p.mode == "b");
  auto none = parse({});
  CHECK(!none.code);
  CHECK(none.calls == 7);
}

TEST_CASE("bench options: out of range, not whole, not allowed, unknown "
          "or missing values exit with a usage error") {
  for (auto args : std::vector<std::vector<std::string>>{
         {"--calls", "0"},
         {"--calls", "101"},
         {"--calls", "2.5"},
         {"--calls", "1e300"},
         {"--calls", "ten"},
         {"--seconds", "0"},
         {"--mode", "c"},
         {"--bogus", "1"},
         {"--calls"},
         {"--calls", "5", "--mode"}}) {
    CAPTURE(args.front());
    CHECK(parse(args).code == exit_usage);
  }
  CHECK(parse({"--calls", "5", "--help"}).code == exit_ok);
}
