// `pgw-actor config check|show`.

#include "commands.hpp"
#include "serve_auth.hpp"

#include "config/json_text.hpp"
#include "config/pricing.hpp"

#include <boost/json.hpp>

#include <cstdio>

namespace pgw::cli {

int config_main(const std::vector<std::string>& args) {
  std::optional<std::string> env_file;
  std::string action;
  // Errors found before `--json` is read are JSON too.
  bool json_out = wants_json(args);
  const std::string usage =
    "usage: pgw-actor config check|show [--env-file F] [--json]";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--env-file" && i + 1 < args.size())
      env_file = args[++i];
    else if (args[i] == "--json")
      json_out = true;
    else if (action.empty() && (args[i] == "check" || args[i] == "show"))
      action = args[i];
    else
      return usage_failure(usage, json_out);
  }
  if (action.empty())
    return usage_failure(usage, json_out);
  auto cfg = load(env_file, json_out);
  if (!cfg)
    return exit_usage;
  if (action == "check") {
    auto failed = [json_out](const std::string& msg) {
      return report_call_error(make_error(error_code::invalid_config, msg),
                               json_out);
    };
    if (cfg->scopes.empty())
      return failed("no scope configured: set at least "
                    "{SCOPE}__{PROVIDER}__{NAME}__BASE_URL and __MODEL (e.g. "
                    "LLM__OPENAI__PRIMARY__BASE_URL) in the environment or "
                    "./.env; config/.env.example lists every key");
    // The files serve and chat read when they start: the price table, and
    // serve's keys file when one is set.
    auto prices = price_table::load(cfg->global.pricing_path);
    if (!prices)
      return report_call_error(prices.error(), json_out);
    if (auto& keys_file = cfg->global.serve.keys_file; !keys_file.empty()) {
      serve::key_set keys;
      if (auto problem = serve::key_set::load(keys_file, keys))
        return failed(*problem);
    }
    size_t sources = 0;
    for (auto& [name, scope] : cfg->scopes)
      sources += scope.sources.size();
    if (json_out) {
      boost::json::array warnings;
      for (auto& w : cfg->warnings)
        warnings.emplace_back(w);
      std::puts(json_text(boost::json::object{
                            {"ok", true},
                            {"scopes", cfg->scopes.size()},
                            {"sources", sources},
                            {"warnings", std::move(warnings)}})
                  .c_str());
    } else {
      std::printf("configuration ok: %zu scope(s), %zu source(s), %zu "
                  "warning(s)\n",
                  cfg->scopes.size(), sources, cfg->warnings.size());
    }
    return exit_ok;
  }
  auto text = json_out ? show_settings_json(*cfg) : show_settings(*cfg);
  std::fputs(text.c_str(), stdout);
  if (!text.empty() && text.back() != '\n')
    std::fputc('\n', stdout);
  return exit_ok;
}

} // namespace pgw::cli
