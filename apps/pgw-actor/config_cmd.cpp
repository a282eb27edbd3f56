// `pgw-actor config check|show`.

#include "commands.hpp"
#include "serve_auth.hpp"

#include "config/pricing.hpp"

#include <cstdio>

namespace pgw::cli {

int config_main(const std::vector<std::string>& args) {
  std::optional<std::string> env_file;
  std::string action;
  bool json_out = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--env-file" && i + 1 < args.size())
      env_file = args[++i];
    else if (args[i] == "--json")
      json_out = true;
    else if (action.empty() && (args[i] == "check" || args[i] == "show"))
      action = args[i];
    else {
      std::fprintf(stderr, "usage: pgw-actor config check|show "
                           "[--env-file F] [--json]\n");
      return exit_usage;
    }
  }
  if (action.empty()) {
    std::fprintf(stderr,
                 "usage: pgw-actor config check|show [--env-file F] [--json]\n");
    return exit_usage;
  }
  auto cfg = load(env_file);
  if (!cfg)
    return exit_usage;
  if (action == "check") {
    if (cfg->scopes.empty()) {
      std::fprintf(stderr,
                   "pgw-actor: no scope configured: set at least "
                   "{SCOPE}__{PROVIDER}__{NAME}__BASE_URL and __MODEL (e.g. "
                   "LLM__OPENAI__PRIMARY__BASE_URL) in the environment or "
                   "./.env; config/.env.example lists every key\n");
      return exit_usage;
    }
    // The files serve and chat read when they start: the price table, and
    // serve's keys file when one is set.
    auto prices = price_table::load(cfg->global.pricing_path);
    if (!prices) {
      std::fprintf(stderr, "pgw-actor: %s\n",
                   describe(prices.error()).c_str());
      return exit_usage;
    }
    if (auto& keys_file = cfg->global.serve.keys_file; !keys_file.empty()) {
      serve::key_set keys;
      if (auto problem = serve::key_set::load(keys_file, keys)) {
        std::fprintf(stderr, "pgw-actor: %s\n", problem->c_str());
        return exit_usage;
      }
    }
    size_t sources = 0;
    for (auto& [name, scope] : cfg->scopes)
      sources += scope.sources.size();
    std::printf("configuration ok: %zu scope(s), %zu source(s), %zu "
                "warning(s)\n",
                cfg->scopes.size(), sources, cfg->warnings.size());
    return exit_ok;
  }
  auto text = json_out ? show_settings_json(*cfg) : show_settings(*cfg);
  std::fputs(text.c_str(), stdout);
  if (!text.empty() && text.back() != '\n')
    std::fputc('\n', stdout);
  return exit_ok;
}

} // namespace pgw::cli
