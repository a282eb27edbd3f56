// `pgw-actor embed`: one logical embedding call, vectors on stdout.

#include "cli.hpp"
#include "serve_app.hpp"

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "config/json_text.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <boost/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace pgw::cli {

namespace {

namespace json = boost::json;

constexpr const char* embed_usage = R"(usage: pgw-actor embed [TEXT...|-] [options]

  TEXT...           the inputs, one vector each; `-` reads one input per
                    line from stdin (empty lines are skipped)
  --scope S         scope to use (default EMBED; its sources KIND=embedding)
  --env-file F      read configuration from F (default ./.env when present)
  --deadline S      bound the whole call to S seconds (finite, > 0)
  --json            print OpenAI's embeddings response plus call_stats
                    (or the error) as JSON; otherwise one vector per line
exit codes: 0 ok, 2 usage/config, 3 rejected, 4 gateway unavailable,
            5 deadline exceeded, 6 governance backend unavailable, 1 other
)";

int embed_usage_error(const std::string& msg) {
  std::fprintf(stderr, "pgw-actor embed: %s\n", msg.c_str());
  return exit_usage;
}

} // namespace

int embed_main(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  bool from_stdin = false;
  std::optional<std::string> env_file;
  std::string scope = "EMBED";
  bool json_out = false;
  embed_request req;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(embed_usage, stdout);
      return exit_ok;
    } else if (a == "--json") {
      json_out = true;
    } else if (a == "--scope" || a == "--env-file" || a == "--deadline") {
      if (i + 1 >= args.size())
        return embed_usage_error(a + " needs a value");
      auto& v = args[++i];
      if (a == "--scope") {
        scope = v;
      } else if (a == "--env-file") {
        env_file = v;
      } else {
        auto x = parse_number(v);
        if (!x || *x <= 0)
          return embed_usage_error("--deadline " + v
                                   + ": must be a finite number of seconds "
                                     "> 0");
        req.deadline_s = *x;
      }
    } else if (a == "-") {
      from_stdin = true;
    } else if (a.size() > 1 && a[0] == '-') {
      return embed_usage_error("unknown option " + a);
    } else {
      inputs.push_back(a);
    }
  }
  if (from_stdin) {
    if (!inputs.empty())
      return embed_usage_error("give the inputs as arguments or `-`, not "
                               "both");
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (!line.empty())
        inputs.push_back(std::move(line));
    }
  }
  for (auto& in : inputs)
    if (in.empty())
      return embed_usage_error("an input is empty");
  auto cfg = load(env_file);
  if (!cfg)
    return exit_usage;
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = command_gateway(sys, *cfg, scope, json_out);
  if (!gw)
    return exit_usage;
  client cl{sys, *gw};
  // Ctrl-C or SIGTERM cancels the call: running sub-batches are stopped and
  // settled before the program answers and exits.
  req.call_id = "cli-embed-" + std::to_string(::getpid());
  req.inputs = std::move(inputs);
  auto call_id = req.call_id;
  auto pending = cl.embed_async(std::move(req));
  auto result = await_cancellable(pending, [&] { cl.cancel(call_id); });
  int rc = exit_ok;
  if (result) {
    if (json_out) {
      std::puts(serve::embeddings_json(*result, result->model, false).c_str());
    } else {
      for (auto& vec : result->vectors) {
        json::array row;
        for (auto x : vec)
          row.emplace_back(static_cast<double>(x));
        std::puts(json_text(row).c_str());
      }
    }
  } else {
    rc = report_call_error(result.error(), json_out);
  }
  std::fflush(stdout);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace pgw::cli
