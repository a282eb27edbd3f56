// `pgw-actor bench serve`: what `pgw-actor serve` adds to a call. A
// zero-delay simulator runs in this process; `pgw-actor serve` (this
// executable) runs as a child process with one scope on it. The same chat
// completion goes straight to the simulator (the request body the gateway
// would send) and through serve (`POST /v1/chat/completions`, model
// "BENCH"), both non-streaming over keep-alive connections from this
// process' own HTTP client: first one at a time in pairs (each call timed
// both ways; the added latency is the per-call difference), then from C
// callers for S seconds each (throughput), all in one run.

#include "apps/harness/bench.hpp"
#include "apps/harness/bench_options.hpp"
#include "apps/cli/cli.hpp"

#include "apps/harness/process.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace pgw::cli {

namespace {

constexpr const char* serve_bench_usage = R"(usage: pgw-actor bench serve [options]

  --calls N        sequential paired calls (default 2000; after 200 warm-up)
  --seconds S      measured seconds of each throughput mode (default 3;
                   each also warms up for 0.5 s)
  --concurrency C  callers of the throughput modes (default 16)

Starts `pgw-actor serve` (this executable) as a child process on a free
loopback port, in front of a zero-delay simulator in this process.
)";

/// User + system CPU time of process `pid` so far (/proc/PID/stat), in
/// microseconds; -1 when unreadable.
double process_cpu_us(pid_t pid) {
  std::ifstream in{fmt::format("/proc/{}/stat", pid)};
  std::string text{std::istreambuf_iterator<char>(in), {}};
  // Fields after the command name (which may hold spaces) in parentheses.
  auto close = text.rfind(')');
  if (close == std::string::npos)
    return -1;
  std::istringstream rest{text.substr(close + 2)};
  std::string field;
  double utime = -1, stime = -1;
  // state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14)
      utime = std::atof(field.c_str());
    else if (i == 15)
      stime = std::atof(field.c_str());
  }
  if (utime < 0 || stime < 0)
    return -1;
  return (utime + stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

} // namespace

int bench_serve(const std::vector<std::string>& args) {
  int calls = 2000;
  double seconds = 3;
  int concurrency = 16;
  if (auto code = parse_bench_options(
        args, "serve", serve_bench_usage,
        {whole_option("--calls", calls, 1, 1e7),
         number_option("--seconds", seconds,
                       [](double x) { return x > 0 && x <= 3600; }),
         whole_option("--concurrency", concurrency, 1, 1024)}))
    return *code;
  auto zero = make_zero_bench();
  if (!zero)
    return exit_other;

  // -- serve, in a child process, with a clean environment --
  std::error_code ec;
  auto self_exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::fprintf(stderr, "bench serve: cannot find this executable: %s\n",
                 ec.message().c_str());
    return exit_other;
  }
  // An empty env file, so that a ./.env in the working directory stays out.
  auto env_file = fmt::format("/tmp/pgw-bench-serve-{}.env", ::getpid());
  std::ofstream{env_file} << "# pgw-actor bench serve\n";
  std::vector<std::string> env{"PATH=/usr/local/bin:/usr/bin:/bin",
                               "PGW_TELEMETRY_DB=off", "PGW_LOG=warn",
                               fmt::format("PGW_SERVE_MAX_INFLIGHT={}",
                                           concurrency + 64)};
  for (auto& [k, v] : zero->env)
    env.push_back(k + "=" + v);
  // What a sanitizer or a library-path build needs to run the child too.
  // The thread settings too, so that their effect on serve can be measured.
  for (const char* name : {"LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                           "LSAN_OPTIONS", "TSAN_OPTIONS", "PGW_TRANSPORT",
                           "PGW_TRANSPORT_THREADS", "PGW_SCHEDULER_THREADS"})
    if (const char* value = std::getenv(name))
      env.push_back(std::string(name) + "=" + value);
  std::unique_ptr<harness::listening_process> serve;
  try {
    serve = std::make_unique<harness::listening_process>(
      std::vector<std::string>{self_exe.string(), "serve", "--listen",
                               "127.0.0.1:0", "--env-file", env_file},
      env, harness::env_mode::replace, std::chrono::seconds(10));
    serve->process().close_output(); // nobody reads its output
  } catch (const std::exception&) {
  }
  std::remove(env_file.c_str());
  if (!serve) {
    std::fprintf(stderr, "bench serve: `%s serve` did not start\n",
                 self_exe.c_str());
    return exit_other;
  }
  auto serve_origin = fmt::format("http://127.0.0.1:{}", serve->port());
  const std::string serve_body =
    R"({"model": "BENCH", "messages": [{"role": "user", "content": "How far is the moon?"}]})";

  auto caller = [](const std::string& origin, const std::string& path,
                   const std::string& body) {
    return [origin, path, body] {
      auto cli = std::make_shared<httplib::Client>(origin);
      cli->set_keep_alive(true);
      cli->set_tcp_nodelay(true);
      return [cli, path, body] {
        auto res = cli->Post(path, body, "application/json");
        return res && res->status == 200
               && res->body.find("\"choices\"") != std::string::npos;
      };
    };
  };
  auto direct_caller = caller(zero->origin, "/v1/chat/completions",
                              zero->body);
  auto serve_caller = caller(serve_origin, "/v1/chat/completions",
                             serve_body);

  std::printf("pgw bench serve: %d paired sequential calls, then %g s per "
              "throughput mode with %d callers; serve in a child process "
              "(pid %d), the simulator and the callers in this one; %u "
              "hardware threads shared by all\n",
              calls, seconds, concurrency, static_cast<int>(serve->pid()),
              std::thread::hardware_concurrency());
  print_allocator();
  std::fflush(stdout);

  // -- sequential, paired --
  run(std::min(calls, 200), 1, direct_caller);
  run(std::min(calls, 200), 1, serve_caller);
  sample_set d, g, diff;
  {
    auto direct = direct_caller();
    auto via = serve_caller();
    run_paired(calls, direct, via, d, g, diff);
  }
  std::printf("sequential (1 caller), %d paired calls\n", calls);
  print_paired(2, "serve", d, g, diff);

  // -- throughput --
  run_for(0.5, concurrency, direct_caller);
  auto direct_rate = run_for(seconds, concurrency, direct_caller);
  run_for(0.5, concurrency, serve_caller);
  auto cpu_self0 = usage_now().cpu_us;
  auto cpu_serve0 = process_cpu_us(serve->pid());
  auto serve_rate = run_for(seconds, concurrency, serve_caller);
  auto cpu_self1 = usage_now().cpu_us;
  auto cpu_serve1 = process_cpu_us(serve->pid());
  auto ratio = direct_rate.rate() > 0 ? serve_rate.rate() / direct_rate.rate()
                                      : 0.0;
  std::printf("throughput (%d callers, %g s each)\n", concurrency, seconds);
  std::printf("  direct   %9.0f calls/s  %8lld calls  errors %lld\n",
              direct_rate.rate(), static_cast<long long>(direct_rate.calls),
              static_cast<long long>(direct_rate.errors));
  std::printf("  serve    %9.0f calls/s  %8lld calls  errors %lld\n",
              serve_rate.rate(), static_cast<long long>(serve_rate.calls),
              static_cast<long long>(serve_rate.errors));
  std::printf("  ratio serve/direct %.2f\n", ratio);
  if (serve_rate.calls > 0 && cpu_serve0 >= 0 && cpu_serve1 >= 0)
    std::printf("  CPU per call through serve: serve process %.1f us, this "
                "process (callers + simulator) %.1f us\n",
                (cpu_serve1 - cpu_serve0) / serve_rate.calls,
                (cpu_self1 - cpu_self0) / serve_rate.calls);

  auto added = diff.pct(0.5);
  std::printf("\ngoal added p50 <= 150 us: %.1f us: %s\n", added,
              added <= 150 ? "met" : "NOT met");
  std::printf("goal serve/direct throughput >= 0.4: %.2f: %s\n", ratio,
              ratio >= 0.4 ? "met" : "NOT met");
  auto errors = d.errors + g.errors + direct_rate.errors + serve_rate.errors;
  return errors == 0 ? exit_ok : exit_other;
}

} // namespace pgw::cli
