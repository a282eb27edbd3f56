// `pgw-actor soak`: the options, then the soak runner (apps/harness/soak.*)
// or, with `--scenario NAME`, the scenario runner
// (apps/harness/scenario_runner.*): simulator, configuration, load and
// expectations in one file.

#include "commands.hpp"

#include "apps/harness/scenario_runner.hpp"
#include "apps/harness/soak.hpp"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace pgw::cli {

namespace {

constexpr const char* soak_usage = R"(usage: pgw-actor soak --calls N --concurrency C [options]
       pgw-actor soak --scenario NAME [--calls N] [--concurrency C]
                      [--set KEY=VALUE]... [--json-report P] [--redis URL]

  --calls N          logical calls to make (default 1000)
  --concurrency C    callers in parallel (default 16)
  --seconds S        start no call after S seconds: the calls in flight
                     finish and the report covers the calls made (default:
                     every call; nothing is kept per call, so any --calls
                     runs in the same memory)
  --scope S          scope to use (default LLM)
  --env-file F       read configuration from F (default ./.env when present)
  --stream           ask sources for streamed answers (default: the scope's)
  --no-stream        ask for single JSON answers
  --json-report P    also write the report as JSON to P (checked before the
                     run: exit 2 when P cannot be written)
  --progress S       seconds between progress lines (default 0.2 on a
                     terminal, else 1)
  --publish H:P      serve this node's live status on H:P (P 0 = any free
                     port) for `pgw-actor status --connect`

  --scenario NAME    run a scenario: NAME is a file path, or
                     config/scenarios/NAME.json under the current directory,
                     else under this program's source tree. The simulator
                     starts in-process with the file's behaviours, the
                     configuration comes from the file's "env" only (never
                     from the environment or a .env), the file's load runs
                     (--calls/--concurrency override it) and its "expect"
                     criteria are checked; see config/scenarios/README.md.
  --set KEY=VALUE    with --scenario: add or replace one key of the file's env
  --redis URL        with a fleet scenario: use this Redis instead of starting
                     a redis-server of our own
exit: 0 when every invariant (and every scenario expectation) holds, 1 when
one is broken, 2 usage/config.
)";
} // namespace

int soak_main(const std::vector<std::string>& args) {
  soak_params params;
  std::optional<std::string> env_file;
  std::optional<std::string> json_path;
  std::optional<std::string> scenario;
  scenario_overrides ov;
  bool plain_only = false; // an option that means nothing with --scenario
  bool calls_set = false, concurrency_set = false;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size())
        return std::nullopt;
      return args[++i];
    };
    auto bad = [&](const std::string& msg) {
      std::fprintf(stderr, "pgw-actor soak: %s\n", msg.c_str());
      return exit_usage;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(soak_usage, stdout);
      return exit_ok;
    } else if (a == "--calls" || a == "--concurrency") {
      auto v = value();
      auto n = v ? parse_number(*v) : std::nullopt;
      if (!n || *n < 1 || *n > 1e9 || *n != static_cast<int64_t>(*n))
        return bad(a + " must be an integer >= 1");
      if (a == "--calls") {
        params.calls = static_cast<int64_t>(*n);
        calls_set = true;
      } else if (*n > 10000) {
        return bad("--concurrency must be <= 10000");
      } else {
        params.concurrency = static_cast<int>(*n);
        concurrency_set = true;
      }
    } else if (a == "--progress") {
      auto v = value();
      auto x = v ? parse_number(*v) : std::nullopt;
      if (!x || !(*x >= 0.01 && *x <= 3600))
        return bad("--progress must be seconds in [0.01, 3600]");
      params.progress_s = *x;
    } else if (a == "--seconds") {
      auto v = value();
      auto x = v ? parse_number(*v) : std::nullopt;
      if (!x || !(*x > 0 && *x <= 30 * 86400))
        return bad("--seconds must be seconds in (0, 2592000] (30 days)");
      params.seconds = *x;
      plain_only = true;
    } else if (a == "--scope" || a == "--env-file" || a == "--json-report"
               || a == "--publish" || a == "--scenario" || a == "--set"
               || a == "--redis") {
      auto v = value();
      if (!v)
        return bad(a + " needs a value");
      if (a == "--scope") {
        params.scope = *v;
        plain_only = true;
      } else if (a == "--env-file") {
        env_file = *v;
        plain_only = true;
      } else if (a == "--publish") {
        params.publish = *v;
      } else if (a == "--scenario") {
        scenario = *v;
      } else if (a == "--set") {
        auto eq = v->find('=');
        if (eq == std::string::npos || eq == 0)
          return bad("--set needs KEY=VALUE");
        ov.set.emplace_back(v->substr(0, eq), v->substr(eq + 1));
      } else if (a == "--redis") {
        ov.redis_url = *v;
      } else {
        json_path = *v;
      }
    } else if (a == "--stream") {
      params.stream = true;
      plain_only = true;
    } else if (a == "--no-stream") {
      params.stream = false;
      plain_only = true;
    } else {
      return bad("unknown option " + a + "\n" + soak_usage);
    }
  }
  if (json_path) {
    auto problem = report_path_problem(*json_path);
    if (!problem.empty()) {
      std::fprintf(stderr, "pgw-actor soak: --json-report %s cannot be "
                           "written: %s\n",
                   json_path->c_str(), problem.c_str());
      return exit_usage;
    }
  }
  if (scenario) {
    if (plain_only) {
      std::fprintf(stderr, "pgw-actor soak: --scope, --env-file, --stream "
                           "and --no-stream come from the scenario file "
                           "(use --set KEY=VALUE to change its env), and "
                           "--seconds is for a plain soak only (a "
                           "scenario's expectations are written for its "
                           "calls)\n");
      return exit_usage;
    }
    if (calls_set)
      ov.calls = params.calls;
    if (concurrency_set)
      ov.concurrency = params.concurrency;
    ov.json_path = json_path;
    ov.publish = params.publish;
    return scenario_main(*scenario, ov);
  }
  if (!ov.set.empty() || ov.redis_url) {
    std::fprintf(stderr,
                 "pgw-actor soak: --set and --redis need --scenario\n");
    return exit_usage;
  }
  auto cfg = load(env_file);
  if (!cfg)
    return exit_usage;
  soak_result result;
  auto rc = run_soak(*cfg, params, &result);
  if (json_path && (rc == exit_ok || rc == exit_other)) {
    if (write_json_report(*json_path, result.report) != exit_ok)
      return exit_other;
  }
  return rc;
}

} // namespace pgw::cli
