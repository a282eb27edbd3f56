#pragma once

/// Shared pieces of the `pgw-actor bench` subcommands: callers on threads
/// and latency percentiles.

#include "apps/pgw-upstream-sim/sim.hpp"
#include "config/loader.hpp"
#include "messages/chat.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

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

/// `pgw-actor bench hedge`.
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
};

std::optional<zero_bench> make_zero_bench();

int bench_hedge(const std::vector<std::string>& args);

/// `pgw-actor bench cache`.
int bench_cache(const std::vector<std::string>& args);

/// `pgw-actor bench admission`.
int bench_admission(const std::vector<std::string>& args);

/// `pgw-actor bench throughput`.
int bench_throughput(const std::vector<std::string>& args);

/// `pgw-actor bench inflight`.
int bench_inflight(const std::vector<std::string>& args);

} // namespace pgw::cli
