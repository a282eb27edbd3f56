#pragma once

/// What `pgw-actor embed` and `pgw-actor ocr` share: their common options
/// and the run of one call.

#include "commands.hpp"

#include "actors/client.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace pgw::cli {

/// The options both commands take.
struct side_options {
  std::optional<std::string> env_file;
  std::string scope;
  /// A pinned source (`--source NAME` or `--scope SCOPE/NAME`); empty = any.
  std::string source;
  bool json_out = false;
  caf::optional<double> deadline_s;
};

enum class side_option { not_shared, taken, help };

/// Reads `args[i]` when it is a shared option (`--help`, `--json`,
/// `--scope S` or `--scope S/NAME`, `--source NAME`, `--env-file F`,
/// `--deadline S`; `i` moves past a value). A missing or bad value, or two
/// different pinned sources, sets `error`.
side_option read_side_option(const std::vector<std::string>& args, size_t& i,
                             side_options& opts, std::string& error);

/// Runs one call: the gateway of `opts.scope`, `start(client, req)` with
/// the call id `id_prefix` + pid and the deadline, Ctrl-C / SIGTERM
/// cancelling it, then `print(result)` or the error; returns the exit code.
template <class Request, class Start, class Print>
int run_side_command(const settings& cfg, const side_options& opts,
                     Request req, const std::string& id_prefix, Start start,
                     Print print) {
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = command_gateway(sys, cfg, opts.scope, opts.json_out);
  if (!gw)
    return exit_usage;
  client cl{sys, *gw};
  req.call_id = id_prefix + std::to_string(::getpid());
  req.deadline_s = opts.deadline_s;
  req.source = opts.source;
  auto call_id = req.call_id;
  auto pending = start(cl, std::move(req));
  auto result = await_cancellable(pending, [&] { cl.cancel(call_id); });
  int rc = exit_ok;
  if (result)
    print(*result);
  else
    rc = report_call_error(result.error(), opts.json_out);
  std::fflush(stdout);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace pgw::cli
