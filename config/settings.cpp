#include "config/settings.hpp"

namespace pgw {

const source_config* scope_config::find(const std::string& source_name) const {
  for (auto& src : sources)
    if (src.name == source_name)
      return &src;
  return nullptr;
}

const scope_config* settings::find(const std::string& scope_name) const {
  auto i = scopes.find(scope_name);
  return i != scopes.end() ? &i->second : nullptr;
}

} // namespace pgw
