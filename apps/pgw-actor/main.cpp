// pgw-actor: the terminal front end of the pgw runtime (SPEC §11).

#include "cli.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr const char* usage = R"(usage: pgw-actor <command> [options]

commands:
  chat [PROMPT|-]   send one chat call (see `pgw-actor chat --help`)
  embed [TEXT...|-] embed texts (see `pgw-actor embed --help`)
  ocr text|layout FILE
                    read an image (see `pgw-actor ocr --help`)
  config check      validate the configuration (exit 0, or 2 with the reason)
  config show       print the effective settings, secrets masked
  demo              the embedded default: an in-process simulator, no setup
  soak              many calls through one gateway, with a report and
                    invariant checks (see `pgw-actor soak --help`)
  soak --scenario NAME
                    a fault scenario of config/scenarios/ (half-dead,
                    hang-tail, hang-tail-hedged, outage-flap, stream-faults,
                    rate-limited, fleet): simulator, load and pass criteria
  bench overhead    added latency of the gateway vs direct calls
  bench throughput  calls/s through one node vs direct, memory and Redis
  bench inflight    N streaming calls held open at once: errors, RSS
  bench hedge       the hang-tail workload with and without hedging
  bench admission   limiter admissions: memory vs Redis vs a PING
  telemetry report  what happened to every call, from the telemetry DB
  status --connect HOST:PORT
                    live per-source state of a node that runs with
                    --publish (soak, demo --serve-status)

configuration: environment variables plus ./.env (or --env-file F).
)";

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    return args.empty() ? pgw::cli::exit_usage : pgw::cli::exit_ok;
  }
  auto cmd = args[0];
  args.erase(args.begin());
  if (cmd == "chat")
    return pgw::cli::chat_main(args);
  if (cmd == "embed")
    return pgw::cli::embed_main(args);
  if (cmd == "ocr")
    return pgw::cli::ocr_main(args);
  if (cmd == "config")
    return pgw::cli::config_main(args);
  if (cmd == "demo")
    return pgw::cli::demo_main(args);
  if (cmd == "status")
    return pgw::cli::status_main(args);
  if (cmd == "telemetry")
    return pgw::cli::telemetry_main(args);
  if (cmd == "soak")
    return pgw::cli::soak_main(args);
  if (cmd == "bench")
    return pgw::cli::bench_main(args);
  std::fprintf(stderr, "pgw-actor: unknown command '%s'\n\n%s", cmd.c_str(),
               usage);
  return pgw::cli::exit_usage;
}
