// pgw-actor: the terminal front end of the pgw runtime (SPEC §11).

#include "commands.hpp"

#include "apps/cli/allocator.hpp"

#include <caf/config.hpp>
#include <httplib.h>
#include <openssl/crypto.h>

#include <cstdio>
#include <string>
#include <vector>

#ifndef PGW_VERSION
#define PGW_VERSION "0.1.0"
#endif

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
                    a fault scenario of config/scenarios/ (embed-flap,
                    fleet, half-dead, hang-tail, hang-tail-hedged,
                    ocr-serial, outage-flap, persistent-429, rate-limited,
                    silent-primary, stream-faults, structured):
                    simulator, load and pass criteria
  bench overhead    added latency of the gateway vs direct calls
  bench throughput  calls/s through one node vs direct, memory and Redis
  bench inflight    N streaming calls held open at once: errors, RSS
  bench hedge       the hang-tail workload with and without hedging
  bench admission   limiter admissions: memory vs Redis vs a PING
  bench cache       a response-cache hit vs an uncached call
  bench serve       `pgw-actor serve` vs calls straight to the simulator
  telemetry report  what happened to every call, from the telemetry DB
  serve [--listen HOST:PORT]
                    an OpenAI-compatible HTTP server over every scope
  status --connect HOST:PORT
                    live per-source state of a node that runs with
                    --publish (soak, demo --serve-status)

configuration: environment variables plus ./.env (or --env-file F).
--version prints the version and the CAF, cpp-httplib and OpenSSL versions
and the malloc in use.
)";

/// `--help` of the subcommands that have no usage text of their own.
const char* usage_of(const std::string& cmd) {
  if (cmd == "config")
    return "usage: pgw-actor config check|show [--env-file F] [--json]\n\n"
           "  check   validate the configuration: exit 0, or 2 with the key\n"
           "          and the rule it broke\n"
           "  show    print the effective settings, secrets masked, and where\n"
           "          each value came from (--json: as JSON)\n";
  if (cmd == "demo")
    return "usage: pgw-actor demo [options]\n\n"
           "  the embedded default: starts the simulator in-process with a\n"
           "  healthy, a flaky, a slow and a recovering source and shows\n"
           "  failover, hedging and breaker isolation; no setup needed.\n"
           "  --calls N         calls to send (default 24)\n"
           "  --serve-status    keep running and publish status (--publish)\n"
           "  --publish H:P     where `status --connect` reaches it\n";
  if (cmd == "status")
    return "usage: pgw-actor status --connect HOST:PORT [--timeout S] "
           "[--json]\n\n"
           "  live per-source state (breaker, limiter, EWMA, cooldown) of a\n"
           "  node that runs with --publish (soak, demo --serve-status)\n"
           "  --timeout S       give up when the node has not answered\n"
           "                    (connection and CAF's handshake) within S\n"
           "                    seconds (default 10)\n";
  if (cmd == "bench")
    return "usage: pgw-actor bench "
           "overhead|throughput|inflight|hedge|admission|cache|serve "
           "[options]\n\n"
           "  each benchmark's options: `pgw-actor bench NAME --help`\n";
  return nullptr;
}

bool wants_help(const std::vector<std::string>& args) {
  for (auto& a : args)
    if (a == "--help" || a == "-h")
      return true;
  return false;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    return args.empty() ? pgw::cli::exit_usage : pgw::cli::exit_ok;
  }
  if (args[0] == "--version") {
    std::printf("pgw-actor %s (CAF %d.%d.%d, cpp-httplib %s, %s, malloc %s)\n",
                PGW_VERSION, CAF_MAJOR_VERSION, CAF_MINOR_VERSION,
                CAF_PATCH_VERSION, CPPHTTPLIB_VERSION,
                OpenSSL_version(OPENSSL_VERSION),
                pgw::cli::allocator_name().c_str());
    return pgw::cli::exit_ok;
  }
  auto cmd = args[0];
  args.erase(args.begin());
  // Every subcommand answers --help with its usage and exit 0; bench's
  // named benchmarks have their own.
  bool own_bench_help = cmd == "bench" && !args.empty() && args[0] != "--help"
                        && args[0] != "-h";
  if (wants_help(args) && usage_of(cmd) != nullptr && !own_bench_help) {
    std::fputs(usage_of(cmd), stdout);
    return pgw::cli::exit_ok;
  }
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
  if (cmd == "serve")
    return pgw::cli::serve_main(args);
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
