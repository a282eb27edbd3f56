// `pgw-actor chat`: one logical call, answer on stdout, SPEC §11 exit codes.

#include "commands.hpp"

#include "actors/client.hpp"
#include "actors/structured_schema.hpp"
#include "apps/node/node_builder.hpp"
#include "config/file.hpp"
#include "config/keys.hpp"
#include "config/limits.hpp"

#include <caf/actor_system.hpp>

#include <unistd.h>
#include <caf/send.hpp>

#include <chrono>
#include <cstdio>

namespace pgw::cli {

namespace {

constexpr const char* chat_usage = R"(usage: pgw-actor chat [PROMPT|-] [options]

  PROMPT            the user message; `-` reads it from stdin
  --scope S[/NAME]  scope to use (default LLM); /NAME pins source NAME
  --env-file F      read configuration from F (default ./.env when present)
  --system T        a system message
  --stream          stream: print the answer as it arrives (live; with
                    --json or --schema it is printed once complete)
  --no-stream       ask for a single JSON answer
  --deadline S      bound the whole call to S seconds (finite, > 0)
  --effort E        reasoning effort: none, low, medium or high
  --max-tokens N    answer length limit (integer >= 1)
  --schema F        structured output: the answer must match the JSON Schema
                    in file F; prints the validated JSON
  --json            print the answer or the error as JSON
exit codes: 0 ok, 2 usage/config, 3 rejected, 4 gateway unavailable,
            5 deadline exceeded, 6 governance backend unavailable, 1 other
)";

} // namespace

int chat_main(const std::vector<std::string>& args) {
  // Errors found before `--json` is read are JSON too.
  auto usage_error = [json = wants_json(args)](const std::string& msg) {
    return usage_failure(msg, json);
  };
  std::optional<std::string> prompt;
  std::optional<std::string> env_file;
  std::string scope = "LLM";
  std::string system_text;
  bool json_out = false;
  std::optional<std::string> schema_path;
  chat_request req;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    auto value = [&](const char* flag) -> std::optional<std::string> {
      if (i + 1 >= args.size())
        return std::nullopt;
      (void) flag;
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(chat_usage, stdout);
      return exit_ok;
    } else if (a == "--json") {
      json_out = true;
    } else if (a == "--stream") {
      req.stream = true;
    } else if (a == "--no-stream") {
      req.stream = false;
    } else if (a == "--scope" || a == "--env-file" || a == "--system"
               || a == "--deadline" || a == "--effort"
               || a == "--max-tokens" || a == "--schema") {
      auto v = value(a.c_str());
      if (!v)
        return usage_error(a + " needs a value");
      if (a == "--scope") {
        // `S/NAME` pins the call to source NAME of scope S, as serve's
        // model "SCOPE/source" and embed/ocr's --scope do.
        auto slash = v->find('/');
        scope = v->substr(0, slash);
        if (slash != std::string::npos)
          req.source = detail::to_lower(v->substr(slash + 1));
        if (slash != std::string::npos && req.source.empty())
          return usage_error("--scope " + *v + ": no source after the /");
      } else if (a == "--env-file") {
        env_file = *v;
      } else if (a == "--system") {
        system_text = *v;
      } else if (a == "--deadline") {
        auto x = parse_number(*v);
        if (!x || *x <= 0)
          return usage_error("--deadline " + *v
                             + ": must be a finite decimal number of "
                             "seconds > 0");
        if (*x > max_duration_s)
          return usage_error("--deadline " + *v
                             + ": must be at most 2592000 seconds (30 days)");
        req.deadline_s = *x;
      } else if (a == "--effort") {
        if (*v != "none" && *v != "low" && *v != "medium" && *v != "high")
          return usage_error("--effort " + *v
                             + ": must be none, low, medium or high");
        req.reasoning_effort = *v;
      } else if (a == "--max-tokens") {
        auto x = parse_number(*v);
        if (!x || *x < 1 || *x != static_cast<double>(static_cast<int64_t>(*x)))
          return usage_error("--max-tokens " + *v
                             + ": must be a decimal integer >= 1");
        req.max_tokens = static_cast<int64_t>(*x);
      } else {
        // Bounded like the env file: a regular file, at most the largest
        // schema compiled (never /dev/zero, never a FIFO that blocks).
        auto text = read_config_file(*v, "--schema " + *v, max_schema_bytes);
        if (!text) // the caller's file, not configuration
          return usage_error(words_of(text.error()));
        req.schema = std::move(*text);
        schema_path = *v;
      }
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      return usage_error("unknown option " + a);
    } else if (!prompt) {
      prompt = a;
    } else {
      return usage_error("more than one prompt given (quote it)");
    }
  }
  // An empty schema means "no schema" to the gateway: an empty file would
  // silently give unvalidated text. Refused as a whitespace-only file is.
  if (schema_path && req.schema.empty())
    return report_call_error(
      make_error(error_code::invalid_request,
                 "--schema " + *schema_path
                   + ": not valid JSON (the file is empty)"),
      json_out);
  if (!prompt)
    return usage_error("no prompt given (pass it as an argument, or - for "
                       "stdin)");
  if (*prompt == "-") {
    auto text = read_bounded(STDIN_FILENO, "the prompt on stdin",
                             max_stdin_bytes);
    if (!text)
      return usage_error(words_of(text.error()));
    prompt = std::move(*text);
  }
  if (prompt->find_first_not_of(" \t\r\n") == std::string::npos)
    return usage_error("the prompt is empty");
  auto cfg = load(env_file, json_out);
  if (!cfg)
    return exit_usage;
  if (!system_text.empty())
    req.messages.push_back({"system", system_text, {}});
  req.messages.push_back({"user", *prompt, {}});

  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = command_gateway(sys, *cfg, scope, json_out);
  if (!gw)
    return exit_usage;
  client cl{sys, *gw};
  // Ctrl-C or SIGTERM cancels the call like a deadline: its attempts are
  // stopped and settled before the program answers and exits.
  req.call_id = "cli-" + std::to_string(::getpid());
  auto call_id = req.call_id;
  bool req_has_schema = !req.schema.empty();
  bool live = req.stream && *req.stream && !json_out && !req_has_schema;
  caf::expected<chat_response> result{caf::error{}};
  // Live (--stream): tokens go to stdout as they arrive; the answer printed
  // so far stays, and a stream that breaks later ends with the error.
  bool printed_newline = true;
  if (live) {
    auto call = cl.chat_stream(std::move(req), [&](const stream_delta& d) {
      if (d.content.empty())
        return;
      std::fwrite(d.content.data(), 1, d.content.size(), stdout);
      std::fflush(stdout);
      printed_newline = d.content.back() == '\n';
    });
    result = await_cancellable(call.result(), [&] { call.cancel(); });
  } else {
    auto pending = cl.chat_async(std::move(req));
    result = await_cancellable(pending, [&] { cl.cancel(call_id); });
  }
  int rc = exit_ok;
  if (live) {
    if (!printed_newline)
      std::fputc('\n', stdout);
    if (!result)
      rc = report_call_error(result.error(), json_out);
  } else if (result) {
    if (json_out) {
      std::puts(response_json(*result).c_str());
    } else {
      // A structured call prints the validated JSON, not the raw answer.
      auto& text = req_has_schema ? result->parsed : result->content;
      std::fwrite(text.data(), 1, text.size(), stdout);
      if (text.empty() || text.back() != '\n')
        std::fputc('\n', stdout);
    }
  } else {
    rc = report_call_error(result.error(), json_out);
  }
  std::fflush(stdout);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace pgw::cli
