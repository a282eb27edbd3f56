#pragma once

/// Shared pieces of the `pgw-actor` subcommands and the harness behind
/// `bench` and `soak` (exit codes, settings loading, error rendering,
/// interrupts).

#include "actors/interfaces.hpp"
#include "config/loader.hpp"
#include "config/settings.hpp"
#include "messages/chat.hpp"
#include "messages/errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
} // namespace boost::asio

namespace pgw::cli {

/// Where `soak`, `demo` and `serve` write telemetry by default.
inline constexpr const char* default_telemetry_db = "./pgw-telemetry.sqlite";

/// Exit codes of SPEC §11.
enum exit_code : int {
  exit_ok = 0,
  exit_other = 1,
  exit_usage = 2,
  exit_rejected = 3,
  exit_unavailable = 4,
  exit_deadline = 5,
  exit_governance = 6,
};

/// The exit code for a call's error.
int exit_code_of(const caf::error& err);

/// The actor system configuration every subcommand uses.
struct system_config : caf::actor_system_config {
  /// `with_io`: load CAF's middleman (publishing or reaching other nodes).
  /// `loop`: the one scheduler thread runs it while idle (serve; see
  /// use_quiet_clock).
  explicit system_config(bool with_io = false,
                         boost::asio::io_context* loop = nullptr);
};

/// Loads and validates settings (env file + process environment); prints
/// warnings to stderr. On error prints it (`json_out`: as an error object
/// on stdout, as a call's error is) and returns nullopt.
std::optional<settings> load(const std::optional<std::string>& env_file,
                             bool json_out = false);

/// `args` ask for JSON output: `--json` anywhere, so that an error found
/// before it was read is JSON too.
bool wants_json(const std::vector<std::string>& args);

/// A command's usage or input error (exit 2): "pgw-actor: invalid_request:
/// MSG" on stderr, or with `json_out` that error object on stdout.
int usage_failure(const std::string& msg, bool json_out);

/// `{content, source, model, usage, call_stats}` (SPEC §11).
std::string response_json(const chat_response& resp);

/// The `call_stats` object of `response_json`, serialised.
std::string call_stats_json(const call_stats& stats);

/// `{error{code, message, retry_after_s, per_source, ...}}` (SPEC §11).
std::string error_json(const caf::error& err);

/// The gateway of `scope` for a one-shot command (chat, embed, ocr), or
/// nullopt after saying why (`--json`: an error object on stdout, else a
/// line on stderr).
std::optional<gateway_actor> command_gateway(caf::actor_system& sys,
                                             const settings& cfg,
                                             const std::string& scope,
                                             bool json_out);

/// Prints a failed call's error (`--json`: an error object on stdout, else
/// `error_text` on stderr) and returns its exit code.
int report_call_error(const caf::error& err, bool json_out);

/// The plain (non --json) text of a call's error: "pgw-actor: code:
/// message", then one line per source with its last reason, status and
/// upstream message.
std::string error_text(const caf::error& err);

/// Makes SIGINT and SIGTERM set a flag (`interrupt_requested`) instead of
/// ending
/// the program.
void install_interrupt_handler();
bool interrupt_requested();

/// Waits for `pending`; a SIGINT or SIGTERM meanwhile calls `cancel` once
/// (the call then stops its upstream requests, settles and answers).
template <class T>
T await_cancellable(std::future<T>& pending,
                    const std::function<void()>& cancel) {
  install_interrupt_handler();
  bool cancel_sent = false;
  while (pending.wait_for(std::chrono::milliseconds(50))
         != std::future_status::ready)
    if (interrupt_requested() && !cancel_sent) {
      cancel();
      cancel_sent = true;
    }
  return pending.get();
}

/// Parses a finite decimal number; nullopt on garbage and on hex ("0x10").
std::optional<double> parse_number(const std::string& text);

} // namespace pgw::cli
