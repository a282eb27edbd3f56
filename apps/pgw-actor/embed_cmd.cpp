// `pgw-actor embed`: one logical embedding call, vectors on stdout.

#include "serve_app.hpp"
#include "side_cmd.hpp"

#include "config/file.hpp"
#include "config/json_text.hpp"

#include <boost/json.hpp>

#include <cstdio>
#include <sstream>

#include <unistd.h>

namespace pgw::cli {

namespace {

namespace json = boost::json;

constexpr const char* embed_usage = R"(usage: pgw-actor embed [TEXT...|-] [options]

  TEXT...           the inputs, one vector each; `-` reads one input per
                    line from stdin (empty lines are skipped)
  --scope S         scope to use (default EMBED; its sources KIND=embedding);
                    S/NAME pins source NAME of the scope
  --source NAME     pin the call to source NAME (every sub-batch runs there)
  --env-file F      read configuration from F (default ./.env when present)
  --deadline S      bound the whole call to S seconds (finite, > 0)
  --json            print OpenAI's embeddings response plus call_stats
                    (or the error) as JSON; otherwise one vector per line
exit codes: 0 ok, 2 usage/config, 3 rejected, 4 gateway unavailable,
            5 deadline exceeded, 6 governance backend unavailable, 1 other
)";

} // namespace

int embed_main(const std::vector<std::string>& args) {
  auto embed_usage_error = [json = wants_json(args)](const std::string& msg) {
    return usage_failure(msg, json);
  };
  std::vector<std::string> inputs;
  bool from_stdin = false;
  side_options opts;
  opts.scope = "EMBED";
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    std::string error;
    auto shared = read_side_option(args, i, opts, error);
    if (shared == side_option::help) {
      std::fputs(embed_usage, stdout);
      return exit_ok;
    } else if (!error.empty()) {
      return embed_usage_error(error);
    } else if (shared == side_option::taken) {
      continue;
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
    auto text = read_bounded(STDIN_FILENO, "the inputs on stdin",
                             max_stdin_bytes);
    if (!text)
      return embed_usage_error(words_of(text.error()));
    std::istringstream lines{*text};
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (!line.empty())
        inputs.push_back(std::move(line));
    }
  }
  for (auto& in : inputs)
    if (in.empty())
      return embed_usage_error("an input is empty");
  auto cfg = load(opts.env_file, opts.json_out);
  if (!cfg)
    return exit_usage;
  // Ctrl-C or SIGTERM cancels the call: running sub-batches are stopped and
  // settled before the program answers and exits.
  embed_request req;
  req.inputs = std::move(inputs);
  return run_side_command(
    *cfg, opts, std::move(req), "cli-embed-",
    [](client& cl, embed_request r) { return cl.embed_async(std::move(r)); },
    [&opts](const embed_response& result) {
      if (opts.json_out) {
        std::puts(serve::embeddings_json(result, result.model, false).c_str());
        return;
      }
      for (auto& vec : result.vectors) {
        json::array row;
        for (auto x : vec)
          row.emplace_back(static_cast<double>(x));
        std::puts(json_text(row).c_str());
      }
    });
}

} // namespace pgw::cli
