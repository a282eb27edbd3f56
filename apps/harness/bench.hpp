#pragma once

/// Shared pieces of the `pgw-actor bench` subcommands: callers on threads
/// and latency percentiles.

#include "apps/cli/allocator.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"
#include "config/loader.hpp"
#include "messages/chat.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/types.h>

namespace pgw::cli {

using clock_type = std::chrono::steady_clock;

struct sample_set {
  std::vector<double> us; ///< per-call latency, microseconds
  double wall_s = 0;
  int errors = 0;

  double pct(double q) {
    if (us.empty())
      return 0;
    std::sort(us.begin(), us.end());
    auto i = std::min(us.size() - 1, static_cast<size_t>(q * us.size()));
    return us[i];
  }

  double rate() const {
    return wall_s > 0 ? static_cast<double>(us.size()) / wall_s : 0;
  }
};

inline double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0)
    .count();
}

/// Runs `calls` calls split over `threads` callers; `one(thread)` makes one
/// call and returns false on error.
template <class MakeCaller>
inline sample_set run(int calls, int threads, MakeCaller make_caller) {
  std::vector<sample_set> parts(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  auto t0 = clock_type::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto one = make_caller();
      auto& part = parts[static_cast<size_t>(t)];
      int n = calls / threads + (t < calls % threads ? 1 : 0);
      for (int i = 0; i < n; ++i) {
        auto start = clock_type::now();
        if (one())
          part.us.push_back(us_since(start));
        else
          ++part.errors;
      }
    });
  }
  for (auto& w : workers)
    w.join();
  sample_set all;
  all.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  for (auto& p : parts) {
    all.us.insert(all.us.end(), p.us.begin(), p.us.end());
    all.errors += p.errors;
  }
  return all;
}

/// `calls` sequential pairs: one direct call and one through the gateway,
/// alternating which goes first; `diff` holds gateway - direct per pair.
template <class Direct, class Gateway>
void run_paired(int calls, Direct& direct, Gateway& gateway, sample_set& d,
                sample_set& g, sample_set& diff) {
  for (int i = 0; i < calls; ++i) {
    double dt = 0, gt = 0;
    bool d_ok = false, g_ok = false;
    auto time_direct = [&] {
      auto t0 = clock_type::now();
      d_ok = direct();
      dt = us_since(t0);
    };
    auto time_gateway = [&] {
      auto t0 = clock_type::now();
      g_ok = gateway();
      gt = us_since(t0);
    };
    if (i % 2 == 0) {
      time_direct();
      time_gateway();
    } else {
      time_gateway();
      time_direct();
    }
    d_ok ? d.us.push_back(dt) : void(++d.errors);
    g_ok ? g.us.push_back(gt) : void(++g.errors);
    if (d_ok && g_ok)
      diff.us.push_back(gt - dt);
  }
}

/// Prints a paired run: both kinds' p50/p99 and the per-call difference
/// (`via` − direct), each line indented by `indent` spaces.
inline void print_paired(int indent, const char* via_name, sample_set& d,
                         sample_set& g, sample_set& diff) {
  std::printf("%*sdirect   p50 %8.1f us  p99 %8.1f us  errors %d\n", indent,
              "", d.pct(0.5), d.pct(0.99), d.errors);
  std::printf("%*s%-8s p50 %8.1f us  p99 %8.1f us  errors %d\n", indent, "",
              via_name, g.pct(0.5), g.pct(0.99), g.errors);
  std::printf("%*sadded    p50 %8.1f us  p99 %8.1f us  (per-call "
              "difference, %s - direct)\n",
              indent, "", diff.pct(0.5), diff.pct(0.99), via_name);
}

/// CPU time (user + system) and context switches of this whole process so
/// far (getrusage(RUSAGE_SELF)).
struct process_usage {
  double cpu_us = 0;
  long csw = 0;
};

process_usage usage_now();

struct rate_result {
  int64_t calls = 0;
  int64_t errors = 0;
  double wall_s = 0;
  /// CPU time (user + system) of this whole process over the run, per
  /// call: steadier than the rate on a shared VM.
  double cpu_us_per_call = 0;

  double rate() const {
    return wall_s > 0 ? static_cast<double>(calls) / wall_s : 0;
  }
};

/// `threads` callers call `one()` (made by `make_caller()`, false on error)
/// for `seconds`; returns the calls completed per second of wall time.
template <class MakeCaller>
rate_result run_for(double seconds, int threads, MakeCaller make_caller) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0}, errors{0};
  std::vector<std::thread> workers;
  auto t0 = clock_type::now();
  auto cpu0 = usage_now();
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      auto one = make_caller();
      int64_t ok = 0, bad = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        if (one())
          ++ok;
        else
          ++bad;
      }
      calls += ok;
      errors += bad;
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers)
    w.join();
  rate_result out;
  out.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  out.calls = calls;
  out.errors = errors;
  if (out.calls > 0)
    out.cpu_us_per_call = (usage_now().cpu_us - cpu0.cpu_us) / out.calls;
  return out;
}


/// Sets the CPU affinity of every thread of this process (as `taskset -a
/// -p` does); threads started later inherit it from their creator. Returns
/// how many threads were moved.
int set_affinity_all(const cpu_set_t& cpus);

/// What `bench overhead` and `bench throughput` both compare against: a
/// zero-delay simulator in this process, the BENCH scope with one source on
/// it, and the request (and its body) both the gateway and direct callers
/// send. Nothing (the reason printed) when the settings do not load.
struct zero_bench {
  std::unique_ptr<sim::server> upstream;
  std::string origin; ///< http://127.0.0.1:PORT
  env_map env;
  settings cfg;
  chat_request req;
  std::string body;

  /// A caller for run/run_for/run_paired (made once per calling thread):
  /// posts `body` straight to the simulator over its own keep-alive
  /// connection; false unless the answer is a 200.
  std::function<bool()> direct_caller() const;
};

std::optional<zero_bench> make_zero_bench();

/// `pgw-actor bench overhead`.
int bench_overhead(const std::vector<std::string>& args);

/// `pgw-actor bench hedge`.

int bench_hedge(const std::vector<std::string>& args);

/// `pgw-actor bench cache`.
int bench_cache(const std::vector<std::string>& args);

/// `pgw-actor bench admission`.
int bench_admission(const std::vector<std::string>& args);

/// `pgw-actor bench serve`.
int bench_serve(const std::vector<std::string>& args);

/// `pgw-actor bench throughput`.
int bench_throughput(const std::vector<std::string>& args);

/// `pgw-actor bench inflight`.
int bench_inflight(const std::vector<std::string>& args);

} // namespace pgw::cli
