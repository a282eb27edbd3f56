// `pgw-actor bench admission`: what one admission costs (acquire + settle +
// release of a limiter permit) with the memory backend and with the Redis
// backend, the Redis governance pair's admission (breaker and limiter in one
// script, issue 17), next to a plain Redis PING round trip, all in one run. Without
// --redis URL it starts a throwaway redis-server on a free loopback port.

#include "apps/harness/bench.hpp"
#include "apps/harness/bench_options.hpp"
#include "apps/cli/cli.hpp"

#include "apps/harness/redis_server.hpp"
#include "backends/redis/client.hpp"
#include "backends/redis/governance.hpp"
#include "backends/redis/limiter.hpp"

#include <fmt/format.h>

#include <mutex>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <cstdio>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pgw::cli {

namespace {

constexpr const char* admission_usage = R"(usage: pgw-actor bench admission [options]

  --ops N          admissions per measurement (default 20000)
  --threads T      callers for the throughput run (default 8)
  --redis URL      an existing Redis (default: start redis-server on a free
                   loopback port for the run)
)";

struct figures {
  sample_set sequential;
  sample_set parallel;
};

void print(const char* label, figures& f) {
  std::printf("%-24s p50 %8.1f us  p99 %8.1f us  %8.0f /s sequential  "
              "%8.0f /s with threads  errors %d\n",
              label, f.sequential.pct(0.5), f.sequential.pct(0.99),
              f.sequential.rate(), f.parallel.rate(),
              f.sequential.errors + f.parallel.errors);
}

/// acquire + settle + release on `backend`, `ops` times from `threads`.
/// `serialize`: one caller at a time (the memory backend lives inside one
/// actor and is not thread-safe; Redis serializes on the server).
figures measure(std::shared_ptr<limiter_backend> backend, int ops,
                int threads, bool serialize) {
  auto mtx = std::make_shared<std::mutex>();
  auto one = [backend, mtx, serialize] {
    return [backend, mtx, serialize] {
      std::unique_lock<std::mutex> guard{*mtx, std::defer_lock};
      if (serialize)
        guard.lock();
      auto p = backend->try_acquire(100, 0);
      if (!p || !p->granted)
        return false;
      // What an attempt does at its end: one settle-and-release.
      auto done = backend->settle_and_release(p->granted_permit.id, 42, 0);
      return done && done->first && done->second;
    };
  };
  figures out;
  run(std::min(ops, 1000), 1, one); // warm up
  out.sequential = run(ops, 1, one);
  out.parallel = run(ops, threads, one);
  return out;
}

/// The governance pair (issue 17), what a gateway call costs Redis: the
/// admission (breaker enter + limiter acquire, one script) is timed, as the
/// call waits for it; the attempt's end (breaker record + settle + release,
/// one script) runs after it untimed, as the gateway sends it without
/// waiting. The threaded run times both.
figures measure_pair(const governance_pair_ptr& pair, int ops, int threads) {
  auto cycle = [pair](sample_set* admissions) {
    auto start = clock_type::now();
    auto a = pair->enter_and_acquire(100, 0);
    if (!a || !a->first.allowed || !a->second.granted)
      return false;
    if (admissions != nullptr)
      admissions->us.push_back(us_since(start));
    auto done = pair->finish(a->first.epoch, breaker_feed::success,
                             a->second.granted_permit.id, 42, 0);
    return done && done->first && done->second;
  };
  figures out;
  for (int i = 0; i < std::min(ops, 1000); ++i) // warm up
    cycle(nullptr);
  auto t0 = clock_type::now();
  for (int i = 0; i < ops; ++i)
    if (!cycle(&out.sequential))
      ++out.sequential.errors;
  out.sequential.wall_s = us_since(t0) / 1e6;
  out.parallel = run(ops, threads, [cycle] {
    return [cycle] { return cycle(nullptr); };
  });
  return out;
}

} // namespace

int bench_admission(const std::vector<std::string>& args) {
  int ops = 20000;
  int threads = 8;
  std::string url;
  if (auto code = parse_bench_options(
        args, "admission", admission_usage,
        {whole_option("--ops", ops, 100, 1e7),
         whole_option("--threads", threads, 1, 256),
         text_option("--redis", url)}))
    return *code;
  std::unique_ptr<harness::redis_server> own;
  if (url.empty()) {
    own = harness::redis_server::try_start("bench admission");
    if (!own) {
      std::fprintf(stderr, "bench admission: cannot start redis-server\n");
      return exit_other;
    }
    url = own->url();
  }
  auto client = make_redis_client(url, static_cast<size_t>(threads));
  if (!client) {
    std::fprintf(stderr, "bench admission: %s\n",
                 describe(client.error()).c_str());
    return exit_usage;
  }
  // Wait for the server (a fresh one needs a moment).
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = static_cast<bool>((*client)->command({"PING"}));
    if (!up)
      ::usleep(50000);
  }
  if (!up) {
    std::fprintf(stderr, "bench admission: Redis at %s does not answer\n",
                 (*client)->endpoint().c_str());
    return exit_other;
  }
  limiter_limits limits;
  limits.source = "bench";
  limits.rpm = 1000000000;
  limits.tpm = 1000000000;
  limits.max_concurrency = 100000;
  std::printf("pgw bench admission: %d admissions (acquire + settle + "
              "release) per run, %d threads for throughput, Redis at %s\n\n",
              ops, threads, (*client)->endpoint().c_str());
  auto memory = measure(make_memory_limiter(limits), ops, threads, true);
  auto redis = measure(make_redis_limiter(*client,
                                          fmt::format("pgw-bench:{}", ::getpid()),
                                          limits),
                       ops, threads, false);
  auto pair = measure_pair(
    make_redis_governance_pair(*client,
                               fmt::format("pgw-bench-pair:{}", ::getpid()),
                               limits, breaker_settings{}),
    ops, threads);
  auto c = *client;
  auto ping_one = [c] { return [c] { return static_cast<bool>(c->command({"PING"})); }; };
  figures ping;
  ping.sequential = run(ops, 1, ping_one);
  ping.parallel = run(ops, threads, ping_one);
  print("memory admission", memory);
  print("redis admission", redis);
  print("redis pair admission", pair);
  print("redis PING", ping);
  auto ratio = redis.sequential.pct(0.5) / ping.sequential.pct(0.5);
  std::printf("\nredis admission p50 / PING p50 = %.2f\n", ratio);
  // A gateway call with Redis governance waits for one script: the pair's
  // admission (the attempt's end is sent after the answer, not awaited).
  auto pair_ratio = pair.sequential.pct(0.5) / ping.sequential.pct(0.5);
  std::printf("redis pair admission p50 / PING p50 = %.2f (goal <= 3): %s\n",
              pair_ratio, pair_ratio <= 3 ? "met" : "NOT met");
  std::printf("redis admissions per second per node = %.0f (goal >= 5000): "
              "%s\n",
              redis.parallel.rate(),
              redis.parallel.rate() >= 5000 ? "met" : "NOT met");
  return memory.sequential.errors + redis.sequential.errors
               + pair.sequential.errors + pair.parallel.errors
             == 0
           ? exit_ok
           : exit_other;
}

} // namespace pgw::cli
