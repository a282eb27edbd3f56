// `pgw-actor bench inflight`: N streaming calls held open at once. The
// simulator answers each after --hold seconds (its first token), so every
// call is in flight together; the callers are `client::chat_async` futures,
// not threads, so the load generator stays small. Reports the peak number of
// calls in flight (gateway) and of requests open at the simulator, errors,
// this process's RSS before the load and at the peak, and RSS per in-flight
// call. By default the simulator runs as a separate `pgw-upstream-sim`
// process (found beside this executable), so its memory (a thread per
// connection) is measured apart and each process needs one descriptor per
// call instead of two. Also reports threads, RSS and kernel socket memory
// (TCP buffers, slab) per call, and projects them to 100,000 calls.
// The load generator's own memory (a future, its promise and the client's
// pending request per call) is measured first against a stand-in gateway
// that holds the calls unanswered, and subtracted to give the gateway's.

#include "apps/harness/bench.hpp"
#include "apps/harness/bench_options.hpp"
#include "apps/cli/cli.hpp"

#include "actors/client.hpp"
#include "apps/harness/process.hpp"
#include "apps/node/node_builder.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <boost/json.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pgw::cli {

namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

constexpr const char* inflight_usage = R"(usage: pgw-actor bench inflight [options]

  --calls N        streaming calls held open at once (default 10000)
  --hold S         seconds the simulator waits before the first token
                   (default 10; the calls must all start within it)
  --sim MODE       process: run pgw-upstream-sim (beside this executable)
                   as a child, measured apart (default when it exists);
                   in-process: run the simulator in this process (its
                   threads and sockets then count in this process' RSS and
                   descriptors)
)";

/// A field of /proc/PID/status in kB ("VmRSS", "VmHWM"), or a count
/// ("Threads"); -1 when unreadable.
int64_t proc_status(pid_t pid, const char* field) {
  std::ifstream in{pid > 0 ? fmt::format("/proc/{}/status", pid)
                           : std::string("/proc/self/status")};
  std::string line;
  std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0)
      return std::strtoll(line.c_str() + key.size(), nullptr, 10);
  return -1;
}

int64_t open_fds() {
  std::error_code ec;
  int64_t n = 0;
  for (auto it = fs::directory_iterator("/proc/self/fd", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

/// This network namespace's kernel socket figures: TCP buffer memory
/// (/proc/net/sockstat "TCP: ... mem", pages) and slab memory (/proc/meminfo
/// "Slab", where each socket's kernel structures live), both in kB, -1 when
/// unreadable. Machine-wide: both ends of a loopback connection count.
struct kernel_memory {
  int64_t tcp_buffers_kb = -1;
  int64_t slab_kb = -1;
  int64_t sockets = -1; ///< "sockets: used"
};

int64_t field_after(const std::string& text, const std::string& key) {
  auto at = text.find(key);
  return at == std::string::npos
           ? -1
           : std::strtoll(text.c_str() + at + key.size(), nullptr, 10);
}

kernel_memory kernel_now() {
  kernel_memory out;
  std::stringstream sock, mem;
  sock << std::ifstream{"/proc/net/sockstat"}.rdbuf();
  mem << std::ifstream{"/proc/meminfo"}.rdbuf();
  auto s = sock.str();
  auto tcp = s.find("TCP:");
  if (tcp != std::string::npos) {
    auto pages = field_after(s.substr(tcp, s.find('\n', tcp) - tcp), " mem ");
    if (pages >= 0)
      out.tcp_buffers_kb = pages * ::sysconf(_SC_PAGESIZE) / 1024;
  }
  out.sockets = field_after(s, "sockets: used ");
  out.slab_kb = field_after(mem.str(), "Slab:");
  return out;
}

int64_t read_int(const char* path) {
  std::ifstream in{path};
  int64_t x = -1;
  in >> x;
  return in ? x : -1;
}

/// kB of the heap handed out and not freed (tcmalloc's or glibc's figure).
int64_t heap_in_use_kb() {
  return cli::heap_in_use_bytes() / 1024;
}

/// Starts `calls` calls through a client whose gateway is a stand-in that
/// holds every call unanswered, and returns this process' RSS growth per
/// call in kB: what the load generator (a future and its promise per call,
/// the client's requester and its pending request) costs apart from the
/// gateway, and the malloc'd bytes still in use per call once the stand-in
/// holds them all (`heap_kb`: without the burst of queued requests that the
/// RSS figure includes). Everything is released and trimmed before it
/// returns.
// Starts `calls` chat calls that the upstream (or stand-in) holds open;
// the load generator's and the gateway's measurements start the same calls.
std::vector<std::future<caf::expected<chat_response>>>
start_held_calls(client& cl, int calls) {
  std::vector<std::future<caf::expected<chat_response>>> futures;
  futures.reserve(static_cast<size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    chat_request req;
    req.messages.push_back({"user", fmt::format("held call {}", i), {}});
    futures.push_back(cl.chat_async(std::move(req)));
  }
  return futures;
}

double load_generator_kb_per_call(caf::actor_system& sys, int calls,
                                  double& heap_kb) {
  auto held = std::make_shared<
    std::vector<caf::typed_response_promise<chat_response>>>();
  auto stand_in = sys.spawn([held](caf::event_based_actor* self)
                              -> caf::behavior {
    return {
      [self, held](atom::chat, chat_request&) -> caf::result<chat_response> {
        held->push_back(self->make_response_promise<chat_response>());
        return held->back();
      },
      [held](atom::status) { return static_cast<int64_t>(held->size()); },
      [held](atom::cancel) {
        for (auto& p : *held)
          p.deliver(caf::make_error(caf::sec::request_receiver_down));
        held->clear();
      },
    };
  });
  double per_call = -1;
  {
    client cl{sys, caf::actor_cast<gateway_actor>(stand_in)};
    cli::release_free_memory();
    auto before = proc_status(0, "VmRSS");
    auto heap_before = heap_in_use_kb();
    auto futures = start_held_calls(cl, calls);
    // Every call has reached the stand-in once its status answers.
    caf::scoped_actor probe{sys};
    for (int spin = 0; spin < 600; ++spin) {
      int64_t n = 0;
      probe->request(stand_in, caf::infinite, atom::status_v)
        .receive([&](int64_t x) { n = x; }, [](caf::error&) {});
      if (n >= calls)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto at_peak = proc_status(0, "VmRSS");
    per_call = static_cast<double>(at_peak - before) / calls;
    heap_kb = static_cast<double>(heap_in_use_kb() - heap_before) / calls;
    caf::anon_send(stand_in, atom::cancel_v);
    for (auto& f : futures)
      f.wait();
  }
  caf::anon_send_exit(stand_in, caf::exit_reason::user_shutdown);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  cli::release_free_memory();
  return per_call;
}

std::string mb(int64_t kb) {
  return kb < 0 ? std::string("?") : fmt::format("{:.1f} MB", kb / 1024.0);
}

} // namespace

int bench_inflight(const std::vector<std::string>& args) {
  int calls = 10000;
  double hold = 10;
  std::string mode = "auto";
  if (auto code = parse_bench_options(
        args, "inflight", inflight_usage,
        {whole_option("--calls", calls, 1, 1e6),
         number_option("--hold", hold,
                       [](double x) { return x > 0 && x <= 600; }),
         text_option("--sim", mode, {"process", "in-process"})}))
    return *code;
  // -- descriptors: one socket per call on each side --
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  auto soft_before = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ::getrlimit(RLIMIT_NOFILE, &lim);
  std::error_code ec;
  auto sim_binary = fs::read_symlink("/proc/self/exe", ec).parent_path()
                    / "pgw-upstream-sim";
  bool have_binary = !ec && ::access(sim_binary.c_str(), X_OK) == 0;
  if (mode == "auto")
    mode = have_binary ? "process" : "in-process";
  if (mode == "process" && !have_binary) {
    std::fprintf(stderr, "bench inflight: no %s (use --sim in-process)\n",
                 sim_binary.c_str());
    return exit_usage;
  }
  const rlim_t spare = 256;
  rlim_t need = static_cast<rlim_t>(calls) * (mode == "process" ? 1 : 2)
                + spare;
  std::printf("pgw bench inflight: %d streaming calls held open, first token "
              "after %g s; simulator %s; RLIMIT_NOFILE raised from %llu to "
              "the hard limit %llu (need about %llu here)\n",
              calls, hold,
              mode == "process" ? "in a child process (pgw-upstream-sim)"
                                : "in this process",
              static_cast<unsigned long long>(soft_before),
              static_cast<unsigned long long>(lim.rlim_cur),
              static_cast<unsigned long long>(need));
  print_allocator();
  if (lim.rlim_cur != RLIM_INFINITY && need > lim.rlim_cur) {
    auto fit = (lim.rlim_cur - spare) / (mode == "process" ? 1 : 2);
    std::printf("N does not fit: %d calls need about %llu descriptors in "
                "this process, the hard limit is %llu: at most about %llu "
                "calls%s\n",
                calls, static_cast<unsigned long long>(need),
                static_cast<unsigned long long>(lim.rlim_cur),
                static_cast<unsigned long long>(fit),
                mode == "in-process" ? " (the child-process simulator halves "
                                       "the need: --sim process)"
                                     : "");
    return exit_other;
  }
  std::fflush(stdout);

  // -- the simulator --
  auto ttft_ms = hold * 1000;
  auto scenario = fmt::format(
    R"({{"models": {{"held": {{"tokens": 8, "ttft_ms": {}, "token_ms": 1}}}}}})",
    ttft_ms);
  std::unique_ptr<sim::server> in_process;
  std::unique_ptr<harness::sim_process> child;
  std::string scenario_path;
  int port = 0;
  if (mode == "process") {
    scenario_path = fmt::format("/tmp/pgw-inflight-{}.json", ::getpid());
    std::ofstream{scenario_path} << scenario;
    try {
      child = std::make_unique<harness::sim_process>(
        sim_binary.string(),
        std::vector<std::string>{"--scenario", scenario_path},
        std::chrono::seconds(10));
      child->process().close_output(); // nobody reads its output
    } catch (const std::exception&) {
    }
    std::remove(scenario_path.c_str());
    if (!child) {
      std::fprintf(stderr, "bench inflight: %s did not start\n",
                   sim_binary.c_str());
      return exit_other;
    }
    port = child->port();
  } else {
    sim::options opts;
    opts.scenario_json = scenario;
    in_process = std::make_unique<sim::server>(opts);
    port = in_process->port();
  }
  auto base = fmt::format("http://127.0.0.1:{}/v1", port);
  env_map env{
    {"BENCH__GENERIC__HELD__BASE_URL", base},
    {"BENCH__GENERIC__HELD__MODEL", "held"},
    {"BENCH__GENERIC__HELD__TIMEOUT_S", fmt::format("{}", hold + 120)},
    {"BENCH__GENERIC__HELD__CONNECT_TIMEOUT_S", "60"},
    {"BENCH__STREAM", "true"},
    // One failure is one error here: no retries to hide it.
    {"BENCH__MAX_ATTEMPTS", "1"},
  };
  // The transport under test comes from the environment (PGW_TRANSPORT).
  for (auto key : {"PGW_TRANSPORT", "PGW_TRANSPORT_THREADS"})
    if (auto* value = std::getenv(key))
      env[key] = value;
  auto cfg = load_settings(env);
  if (!cfg) {
    std::fprintf(stderr, "bench: %s\n", describe(cfg.error()).c_str());
    return exit_other;
  }
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = spawn_gateway(sys, *cfg, "BENCH");
  if (!gw) {
    std::fprintf(stderr, "bench: %s\n", describe(gw.error()).c_str());
    return exit_other;
  }
  // The load generator alone, against a stand-in gateway (then trimmed).
  double load_heap_kb = 0;
  auto load_kb = load_generator_kb_per_call(sys, calls, load_heap_kb);
  client cl{sys, *gw};
  // The baseline: everything up, nothing in flight.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cli::release_free_memory();
  auto heap_before = heap_in_use_kb();
  auto rss_before = proc_status(0, "VmRSS");
  auto sim_rss_before = mode == "process" ? proc_status(child->pid(), "VmRSS")
                                          : -1;
  auto threads_before = proc_status(0, "Threads");
  auto kernel_before = kernel_now();

  // -- the monitor: the gateway's count of live calls, RSS, threads --
  struct peak_figures {
    int64_t calls_active = 0;
    int64_t attempts_in_flight = 0;
    int64_t rss_kb = 0;       ///< this process at the peak
    int64_t heap_kb = 0;      ///< of it, handed out by malloc
    int64_t sim_rss_kb = -1;  ///< the simulator's at the peak
    int64_t threads = 0;
    int64_t fds = 0;
    kernel_memory kernel;
    double at_s = 0;
  };
  peak_figures peak;
  int64_t max_rss = 0, max_sim_rss = -1;
  std::atomic<bool> done{false};
  auto t0 = clock_type::now();
  std::thread monitor([&] {
    while (!done) {
      auto st = cl.status();
      auto rss = proc_status(0, "VmRSS");
      auto sim_rss = mode == "process" ? proc_status(child->pid(), "VmRSS") : -1;
      max_rss = std::max(max_rss, rss);
      max_sim_rss = std::max(max_sim_rss, sim_rss);
      if (st) {
        int64_t attempts = 0;
        for (auto& s : st->sources)
          attempts += s.in_flight;
        if (attempts > peak.attempts_in_flight
            || (attempts == peak.attempts_in_flight && rss > peak.rss_kb)) {
          peak.calls_active = st->calls_active;
          peak.attempts_in_flight = attempts;
          peak.rss_kb = rss;
          peak.heap_kb = heap_in_use_kb();
          peak.sim_rss_kb = sim_rss;
          peak.threads = proc_status(0, "Threads");
          peak.fds = open_fds();
          peak.kernel = kernel_now();
          peak.at_s = std::chrono::duration<double>(clock_type::now() - t0)
                        .count();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  // -- the load: N futures, started as fast as the gateway takes them --
  auto futures = start_held_calls(cl, calls);
  auto submitted_s = std::chrono::duration<double>(clock_type::now() - t0)
                       .count();
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;
  for (auto& f : futures) {
    auto res = f.get();
    if (res) {
      ++ok;
    } else {
      auto code = code_of(res.error());
      ++errors[code ? to_string(*code) : "internal"];
    }
  }
  auto total_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  done = true;
  monitor.join();
  futures.clear();

  // -- what the simulator saw: requests open at once --
  int64_t sim_peak = -1;
  {
    std::string log_text;
    if (in_process) {
      log_text = in_process->log_json();
    } else {
      httplib::Client http{"127.0.0.1", port};
      http.set_read_timeout(std::chrono::seconds(30));
      if (auto r = http.Get("/_sim/log"); r && r->status == 200)
        log_text = r->body;
    }
    boost::system::error_code ec;
    auto log_doc = log_text.empty() ? json::value{} : json::parse(log_text, ec);
    if (!log_text.empty() && (ec || !log_doc.is_object()
                              || !log_doc.as_object().contains("requests"))) {
      std::fprintf(stderr, "bench: the simulator's log is not readable (%zu "
                           "bytes: %.80s)\n",
                   log_text.size(), log_text.c_str());
    } else if (!log_text.empty()) {
      std::vector<std::pair<double, int>> events;
      for (auto& e : log_doc.at("requests").as_array()) {
        auto& o = e.as_object();
        events.emplace_back(o.at("arrived_ms").to_number<double>(), +1);
        if (!o.at("ended_ms").is_null())
          events.emplace_back(o.at("ended_ms").to_number<double>(), -1);
      }
      std::sort(events.begin(), events.end());
      int64_t live = 0;
      sim_peak = 0;
      for (auto& [at, d] : events)
        sim_peak = std::max(sim_peak, live += d);
    }
  }
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);

  int64_t failed = calls - ok;
  auto per_call_kb = peak.attempts_in_flight > 0
                       ? static_cast<double>(peak.rss_kb - rss_before)
                           / calls
                       : 0.0;
  std::printf("started %d calls in %.2f s; all answered after %.2f s\n",
              calls, submitted_s, total_s);
  std::printf("peak in flight:   %lld calls active in the gateway, %lld "
              "upstream attempts open (at %.1f s); %lld requests open at "
              "once at the simulator\n",
              static_cast<long long>(peak.calls_active),
              static_cast<long long>(peak.attempts_in_flight), peak.at_s,
              static_cast<long long>(sim_peak));
  std::printf("errors:           %lld", static_cast<long long>(failed));
  for (auto& [code, n] : errors)
    std::printf("  %s=%lld", code.c_str(), static_cast<long long>(n));
  std::printf("\n");
  std::printf("this process:     RSS %s before the load, %s at the peak "
              "(max seen %s); %lld threads at the peak (%lld before), %lld "
              "descriptors\n",
              mb(rss_before).c_str(), mb(peak.rss_kb).c_str(),
              mb(max_rss).c_str(), static_cast<long long>(peak.threads),
              static_cast<long long>(threads_before),
              static_cast<long long>(peak.fds));
  std::printf("RSS per call:     %.1f kB ((RSS at the peak - RSS before) / "
              "%d)%s\n",
              per_call_kb, calls,
              mode == "in-process" ? ", the simulator's threads included"
                                   : ", gateway and load generator only");
  auto heap_per_call = static_cast<double>(peak.heap_kb - heap_before) / calls;
  std::printf("malloc'd per call: %.1f kB in use at the peak (the rest of "
              "the RSS per call is the allocator's free space)\n",
              heap_per_call);
  std::printf("load generator:   %.1f kB RSS per call, %.1f kB of it in use "
              "(a future, its promise and the client's pending request; "
              "measured first against a stand-in gateway that holds the "
              "calls; the RSS includes the burst of queued requests)\n",
              load_kb, load_heap_kb);
  std::printf("gateway alone:    %.1f-%.1f kB RSS per call (this process's "
              "minus the load generator's RSS or in-use figure), %.1f kB "
              "malloc'd in use\n",
              per_call_kb - load_kb, per_call_kb - load_heap_kb,
              heap_per_call - load_heap_kb);
  if (mode == "process")
    std::printf("the simulator:    RSS %s before, %s at the peak (max seen "
                "%s): %.1f kB per connection, in its own process\n",
                mb(sim_rss_before).c_str(), mb(peak.sim_rss_kb).c_str(),
                mb(max_sim_rss).c_str(),
                peak.sim_rss_kb > 0
                  ? static_cast<double>(peak.sim_rss_kb - sim_rss_before)
                      / calls
                  : 0.0);
  // -- per call, and what 100,000 calls in flight would take --
  auto per_call = [&](int64_t at_peak, int64_t before) {
    return at_peak >= 0 && before >= 0
             ? static_cast<double>(at_peak - before) / calls
             : -1.0;
  };
  auto threads_per_call = per_call(peak.threads, threads_before);
  auto tcp_per_call = per_call(peak.kernel.tcp_buffers_kb,
                               kernel_before.tcp_buffers_kb);
  auto slab_per_call = per_call(peak.kernel.slab_kb, kernel_before.slab_kb);
  std::printf("per call:         %.3f threads, %.1f kB RSS (this process), "
              "%.2f kB kernel TCP buffers, %.2f kB kernel slab (sockets, "
              "files, thread structures; machine-wide, both ends of each "
              "loopback connection, %lld sockets more at the peak)\n",
              threads_per_call, per_call_kb, tcp_per_call, slab_per_call,
              static_cast<long long>(peak.kernel.sockets
                                     - kernel_before.sockets));
  const double big = 100000;
  auto pid_max = read_int("/proc/sys/kernel/pid_max");
  auto map_max = read_int("/proc/sys/vm/max_map_count");
  auto threads_100k = static_cast<double>(threads_before)
                      + threads_per_call * big;
  std::printf("projected to %.0f in flight: %.0f threads (pid_max %lld, "
              "vm.max_map_count %lld: %s), RSS %.2f GB, kernel memory "
              "%.2f GB (TCP buffers + slab), %.0f descriptors in the "
              "gateway process (hard limit here %llu)\n",
              big, threads_100k, static_cast<long long>(pid_max),
              static_cast<long long>(map_max),
              threads_100k < static_cast<double>(pid_max)
                  && 2 * threads_100k < static_cast<double>(map_max)
                ? "fits"
                : "does NOT fit: a thread per call cannot reach it",
              (static_cast<double>(rss_before) + per_call_kb * big) / 1048576,
              (std::max(0.0, tcp_per_call) + std::max(0.0, slab_per_call))
                * big / 1048576,
              big + spare, static_cast<unsigned long long>(lim.rlim_max));

  bool all_in = peak.attempts_in_flight >= calls;
  std::printf("\ngoal %d calls in flight at once: %lld: %s\n", 10000,
              static_cast<long long>(peak.attempts_in_flight),
              all_in && calls >= 10000 ? "met"
              : all_in ? "NOT met (fewer calls asked)"
                       : "NOT met");
  std::printf("goal zero errors: %lld: %s\n", static_cast<long long>(failed),
              failed == 0 ? "met" : "NOT met");
  std::printf("goal RSS <= 1 GB at the peak: %s: %s\n",
              mb(peak.rss_kb).c_str(),
              peak.rss_kb <= 1024 * 1024 ? "met" : "NOT met");
  // Issue 17: at most 16 gateway threads, and at most 10 kB of gateway RSS
  // per call, judged on the higher of the two estimates above.
  std::printf("goal <= 16 threads in this process at the peak: %lld: %s\n",
              static_cast<long long>(peak.threads),
              peak.threads <= 16 ? "met" : "NOT met");
  auto gateway_kb = per_call_kb - std::min(load_kb, load_heap_kb);
  std::printf("goal gateway RSS per call <= 10 kB (the higher estimate): "
              "%.1f kB: %s\n",
              gateway_kb, gateway_kb <= 10.0 ? "met" : "NOT met");
  return failed == 0 && all_in ? exit_ok : exit_other;
}

} // namespace pgw::cli
