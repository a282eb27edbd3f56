#pragma once

/// The scenario runner (`pgw-actor soak --scenario NAME`;
/// config/scenarios/NAME.json: the simulator's behaviours, the scope
/// configuration, the load and the pass criteria in one file; see
/// config/scenarios/README.md). Not the simulator's scenario model
/// (apps/pgw-upstream-sim/scenario.*), which it feeds.

#include "apps/harness/soak.hpp"
#include "apps/cli/cli.hpp"

#include "messages/embed.hpp"
#include "messages/gateway.hpp"

#include <boost/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pgw::cli {

/// Command-line overrides of a scenario's load.
struct scenario_overrides {
  std::optional<int64_t> calls;
  std::optional<int> concurrency;
  std::optional<std::string> json_path;
  std::optional<std::string> publish;
  std::optional<std::string> redis_url; ///< fleet: use this Redis
  std::vector<std::pair<std::string, std::string>> set; ///< --set K=V
};

/// `pgw-actor soak --scenario NAME`.
int scenario_main(const std::string& name, const scenario_overrides& ov);

/// Where `name` resolves (a path, ./config/scenarios/NAME.json, then the
/// source tree of this executable); empty when nowhere. `tried` receives
/// every path looked at.
std::string resolve_scenario(const std::string& name,
                             std::vector<std::string>* tried = nullptr);

} // namespace pgw::cli
