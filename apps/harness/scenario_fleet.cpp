// A fleet scenario: Redis (ours, or --redis URL), the simulator in this
// process, and "fleet.nodes" `pgw-actor soak` processes (this executable)
// with the scenario's env and nothing else, sharing every limit through
// Redis. The simulator's log then shows whether the limits held across the
// processes. Limits are per real minute, so a fleet scenario that reaches
// its RPM takes a little over a minute.

#include "apps/harness/scenario_checks.hpp"

#include "config/json_text.hpp"

#include "apps/harness/process.hpp"
#include "apps/harness/redis_server.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pgw::cli {

namespace json = boost::json;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

struct node {
  pid_t pid = -1;
  int exit_code = -1;
  std::string out_path;
  std::string report_path;
};

} // namespace

int run_fleet(const scenario_file& f, const scenario_overrides& ov) {
  // The configuration is validated before anything starts.
  {
    env_map env;
    for (auto& [k, v] : f.env)
      env[k] = replace_all(replace_all(v, "${SIM}", "http://127.0.0.1:1/v1"),
                           "${REDIS}", "redis://127.0.0.1:6379/0");
    for (auto& [k, v] : ov.set)
      env[k] = v;
    if (auto cfg = load_settings(env); !cfg) {
      std::fprintf(stderr, "pgw-actor soak: scenario %s: %s\n",
                   f.path.c_str(), describe(cfg.error()).c_str());
      return exit_usage;
    }
  }
  std::unique_ptr<harness::redis_server> own;
  std::string redis_url;
  if (ov.redis_url) {
    redis_url = *ov.redis_url;
  } else {
    own = harness::redis_server::try_start("pgw-actor soak");
    if (!own) {
      std::fprintf(stderr, "pgw-actor soak: fleet scenario %s: cannot start "
                           "redis-server (install it, or pass --redis URL)\n",
                   f.name.c_str());
      return exit_other;
    }
    redis_url = own->url();
  }
  auto upstream = start_scenario_sim(f);
  if (!upstream)
    return exit_other;
  auto base = fmt::format("http://127.0.0.1:{}/v1", upstream->port());
  auto expand = [&](const std::string& v) {
    return replace_all(replace_all(v, "${SIM}", base), "${REDIS}", redis_url);
  };
  env_map env;
  for (auto& [k, v] : f.env)
    env[k] = expand(v);
  std::string prices_path;
  if (!f.prices_json.empty() && !env.count("PGW_PRICING_PATH")) {
    prices_path = fmt::format("/tmp/pgw-fleet-prices-{}.json", ::getpid());
    std::ofstream{prices_path} << f.prices_json;
    env["PGW_PRICING_PATH"] = prices_path;
  }
  if (f.deadline_s)
    env[f.scope + "__CALL_DEADLINE_S"] = fmt::format("{}", *f.deadline_s);
  for (auto& [k, v] : ov.set)
    env[k] = expand(v);
  auto cfg = load_settings(env);
  if (!cfg) {
    std::fprintf(stderr, "pgw-actor soak: scenario %s: %s\n", f.path.c_str(),
                 describe(cfg.error()).c_str());
    return exit_usage;
  }
  auto* scope = cfg->find(f.scope);
  if (!scope) {
    std::fprintf(stderr, "pgw-actor soak: scenario %s: no scope %s in its "
                         "env\n",
                 f.path.c_str(), f.scope.c_str());
    return exit_usage;
  }
  std::printf("scenario %s (%s)\n", f.name.c_str(), f.path.c_str());
  if (!f.description.empty())
    std::printf("  %s\n", f.description.c_str());
  std::printf("  fleet of %d `pgw-actor soak` processes, each %lld calls "
              "with concurrency %d; Redis at %s%s; simulator on %s\n"
              "  limits are per real minute: this takes a little over a "
              "minute when the RPM is reached\n\n",
              f.nodes, static_cast<long long>(f.calls), f.concurrency,
              redis_url.c_str(), ov.redis_url ? "" : " (started for the run)",
              base.c_str());
  std::fflush(stdout);

  char exe[4096];
  auto len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) {
    std::fprintf(stderr, "pgw-actor soak: cannot find this executable\n");
    return exit_other;
  }
  exe[len] = '\0';
  upstream->reset();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<node> nodes(static_cast<size_t>(f.nodes));
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& n = nodes[i];
    n.out_path = fmt::format("/tmp/pgw-fleet-{}-node{}.out", ::getpid(), i + 1);
    n.report_path = fmt::format("/tmp/pgw-fleet-{}-node{}.json", ::getpid(),
                                i + 1);
    std::vector<std::string> argv{exe,
                                  "soak",
                                  "--env-file",
                                  "/dev/null",
                                  "--calls",
                                  std::to_string(f.calls),
                                  "--concurrency",
                                  std::to_string(f.concurrency),
                                  "--json-report",
                                  n.report_path};
    if (f.scope != "LLM") {
      argv.push_back("--scope");
      argv.push_back(f.scope);
    }
    if (f.stream)
      argv.push_back(*f.stream ? "--stream" : "--no-stream");
    harness::spawn_options opts;
    opts.mode = harness::env_mode::clean;
    for (auto& [k, v] : env)
      opts.env.push_back(k + "=" + v);
    int fd = ::open(n.out_path.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::fprintf(stderr, "pgw-actor soak: cannot write %s\n",
                   n.out_path.c_str());
      return exit_other;
    }
    opts.stdout_fd = fd;
    opts.stderr_fd = fd;
    try {
      n.pid = harness::spawn_child(argv, opts);
    } catch (const std::exception&) {
      ::close(fd);
      std::fprintf(stderr, "pgw-actor soak: fork failed\n");
      return exit_other;
    }
    ::close(fd);
  }
  // Wait, with a line every 5 s so a minute-long run shows it is alive.
  size_t running = nodes.size();
  auto last = t0;
  while (running > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (auto& n : nodes) {
      if (n.pid <= 0)
        continue;
      int status = 0;
      if (::waitpid(n.pid, &status, WNOHANG) == n.pid) {
        n.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                        : 128 + WTERMSIG(status);
        n.pid = -1;
        --running;
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (now - last >= std::chrono::seconds(5) || running == 0) {
      last = now;
      auto log = parse_sim_log(upstream->log_json());
      std::printf("fleet: %.0f s, %zu upstream requests so far, %zu of %zu "
                  "nodes done\n",
                  std::chrono::duration<double>(now - t0).count(), log.size(),
                  nodes.size() - running, nodes.size());
      std::fflush(stdout);
    }
  }
  auto log = parse_sim_log(upstream->log_json());
  upstream->stop();
  if (!prices_path.empty())
    std::remove(prices_path.c_str());

  soak_result total;
  total.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                               - t0)
                   .count();
  json::array node_reports;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& n = nodes[i];
    auto out = slurp(n.out_path);
    auto at = out.find("pgw soak report");
    std::printf("\nnode %zu: exit %d\n%s", i + 1, n.exit_code,
                at == std::string::npos ? out.c_str() : out.substr(at).c_str());
    total.invariants[fmt::format("node {} exit 0 (its invariants hold)", i + 1)]
      = n.exit_code == 0;
    auto text = slurp(n.report_path);
    if (!text.empty()) {
      try {
        auto doc = json::parse(text).as_object();
        total.calls += doc.at("calls").to_number<int64_t>();
        total.ok += doc.at("ok").to_number<int64_t>();
        total.attempts += doc.at("attempts").to_number<int64_t>();
        total.rate_limited += doc.at("rate_limited").to_number<int64_t>();
        node_reports.push_back(std::move(doc));
      } catch (const std::exception&) {
        total.invariants[fmt::format("node {} report readable", i + 1)] = false;
      }
    } else {
      total.calls += f.calls; // unanswered: counted as failed
      total.invariants[fmt::format("node {} report written", i + 1)] = false;
    }
    std::remove(n.out_path.c_str());
    std::remove(n.report_path.c_str());
  }
  std::printf("\nfleet: %lld of %lld calls ok across %d nodes in %.1f s\n",
              static_cast<long long>(total.ok),
              static_cast<long long>(total.calls), f.nodes, total.wall_s);
  std::vector<std::string> no_examples;
  check_context ctx{f, *scope, total, log, 0, 0, no_examples, true};
  auto checks = evaluate(ctx);
  bool all = print_checks(f, ctx, checks);
  if (ov.json_path) {
    json::object doc{
      {"calls", total.calls},
      {"ok", total.ok},
      {"success_rate",
       total.calls ? static_cast<double>(total.ok) / total.calls : 0.0},
      {"attempts", total.attempts},
      {"rate_limited", total.rate_limited},
      {"wall_s", total.wall_s},
      {"nodes", std::move(node_reports)},
      {"scenario", checks_json(f, ctx, checks, all)},
    };
    if (write_json_report(*ov.json_path, doc) != exit_ok)
      return exit_other;
  }
  return all ? exit_ok : exit_other;
}

} // namespace pgw::cli
