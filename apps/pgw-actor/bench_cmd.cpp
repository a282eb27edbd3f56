// `pgw-actor bench KIND`: picks the benchmark; each lives in the harness
// (apps/harness/bench_*.cpp).

#include "apps/harness/bench.hpp"
#include "commands.hpp"

#include <cstdio>

namespace pgw::cli {

int bench_main(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "hedge")
    return bench_hedge(args);
  if (!args.empty() && args[0] == "admission")
    return bench_admission(args);
  if (!args.empty() && args[0] == "throughput")
    return bench_throughput(args);
  if (!args.empty() && args[0] == "inflight")
    return bench_inflight(args);
  if (!args.empty() && args[0] == "cache")
    return bench_cache(args);
  if (!args.empty() && args[0] == "serve")
    return bench_serve(args);
  if (!args.empty() && args[0] == "overhead")
    return bench_overhead(args);
  std::fprintf(stderr, "usage: pgw-actor bench "
                       "overhead|throughput|inflight|hedge|admission|cache|serve "
                       "[options] (--help for each)\n");
  return exit_usage;
}

} // namespace pgw::cli
