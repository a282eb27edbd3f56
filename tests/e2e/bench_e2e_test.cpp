// Smoke tests of `pgw-actor bench overhead`, `bench inflight` and `bench
// serve` with tiny counts: each runs to the end without errors and prints
// every figure it promises in a form that parses (a number, then its unit).

#include "fixtures/process.hpp"

#include <doctest/doctest.h>

#include <regex>
#include <string>

using namespace pgw::test;

namespace {

/// The numbers of each line of `out` matching `pattern` (one capture group
/// each); fails the test when none matches.
std::vector<double> figures(const std::string& out, const std::string& pattern) {
  std::vector<double> xs;
  std::regex re{pattern};
  for (std::sregex_iterator it{out.begin(), out.end(), re}, end; it != end;
       ++it)
    xs.push_back(std::stod((*it)[1].str()));
  CAPTURE(pattern);
  CHECK_FALSE(xs.empty());
  return xs;
}

const std::string num = R"((-?[0-9]+(?:\.[0-9]+)?))";

} // namespace

TEST_CASE("bench overhead (tiny): paired added latency, CPU per call, "
          "unpinned and pinned") {
  auto r = run_program({PGW_ACTOR_BIN, "bench", "overhead", "--calls", "40",
                        "--concurrency", "4"});
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("\nunpinned\n") != std::string::npos);
  CHECK(r.out.find("\npinned: all ") != std::string::npos);
  // Both placements: a paired difference and the CPU time of both kinds.
  CHECK(figures(r.out, "added +p50 +" + num + " us +p99 +" + num
                         + R"( us +\(per-call difference)")
          .size()
        == 2);
  auto cpu = figures(r.out, "CPU +direct +" + num + " us/call");
  REQUIRE(cpu.size() == 2);
  for (auto x : cpu)
    CHECK(x > 0);
  CHECK(figures(r.out, "gateway +p50 .* CPU +" + num + " us/call").size()
        == 2);
  CHECK(figures(r.out, "goal added p50, pinned to one vCPU <= 50 us: " + num)
          .size()
        == 1);
  CHECK(r.out.find("errors 1") == std::string::npos);
}

TEST_CASE("bench overhead --pin none runs the unpinned placement only") {
  auto r = run_program({PGW_ACTOR_BIN, "bench", "overhead", "--calls", "20",
                        "--concurrency", "2", "--pin", "none"});
  CAPTURE(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("\nunpinned\n") != std::string::npos);
  CHECK(r.out.find("pinned: all") == std::string::npos);
  auto bad = run_program({PGW_ACTOR_BIN, "bench", "overhead", "--pin", "x"});
  CHECK(bad.exit_code == 2);
}

TEST_CASE("bench inflight (tiny): threads, RSS and kernel memory per call, "
          "projected to 100k") {
  auto r = run_program({PGW_ACTOR_BIN, "bench", "inflight", "--calls", "40",
                        "--hold", "1"});
  CAPTURE(r.out);
  CAPTURE(r.err);
  // 40 < 10,000: the count goal is "NOT met (fewer calls asked)", exit 0.
  REQUIRE(r.exit_code == 0);
  auto threads = figures(r.out, "per call: +" + num + " threads");
  REQUIRE(threads.size() == 1);
  CHECK(threads[0] >= 0);
  figures(r.out, "threads, " + num + " kB RSS");
  figures(r.out, "kB RSS \\(this process\\), " + num
                   + " kB kernel TCP buffers, " + "-?[0-9.]+ kB kernel slab");
  auto projected = figures(r.out, "projected to 100000 in flight: " + num
                                    + " threads");
  REQUIRE(projected.size() == 1);
  CHECK(projected[0] > 0);
  figures(r.out, "RSS " + num + " GB, kernel memory");
  // The load generator measured apart (a stand-in gateway) and subtracted.
  auto load = figures(r.out, "load generator: +-?[0-9.]+ kB RSS per call, "
                               + num + " kB of it in use");
  REQUIRE(load.size() == 1);
  figures(r.out, "gateway alone: +" + num + "-");
}

TEST_CASE("bench serve (tiny): serve vs direct, paired latency and "
          "throughput ratio in one run") {
  auto r = run_program({PGW_ACTOR_BIN, "bench", "serve", "--calls", "30",
                        "--seconds", "0.3", "--concurrency", "2"});
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  auto serve_p50 = figures(r.out, "serve +p50 +" + num + " us");
  REQUIRE(serve_p50.size() == 1);
  CHECK(serve_p50[0] > 0);
  figures(r.out, "added +p50 +" + num + " us .*serve - direct");
  auto rates = figures(r.out, "(?:direct|serve) +" + num + " calls/s");
  REQUIRE(rates.size() == 2);
  CHECK(rates[0] > 0);
  CHECK(rates[1] > 0);
  auto ratio = figures(r.out, "ratio serve/direct " + num);
  REQUIRE(ratio.size() == 1);
  CHECK(ratio[0] > 0);
  figures(r.out, "goal added p50 <= 150 us: " + num + " us: ");
  figures(r.out, "goal serve/direct throughput >= 0.4: " + num + ": ");
  CHECK(r.out.find("errors 1") == std::string::npos);
}
