#include "config/settings.hpp"

namespace pgw {

// One switch per enum (duplicates pairs them by shape): a value added to an
// enum and missing here is a compile warning.
const char* to_string(selector_policy x) {
  switch (x) {
    case selector_policy::health_aware:
      return "health_aware";
    case selector_policy::round_robin:
      return "round_robin";
    case selector_policy::priority:
      return "priority";
  }
  return "?";
}

const char* to_string(refusal_policy x) {
  switch (x) {
    case refusal_policy::wait:
      return "wait";
    case refusal_policy::fail:
      return "fail";
  }
  return "?";
}

const char* to_string(state_backend x) {
  switch (x) {
    case state_backend::memory:
      return "memory";
    case state_backend::redis:
      return "redis";
  }
  return "?";
}

const char* to_string(cache_store x) {
  switch (x) {
    case cache_store::none:
      return "none";
    case cache_store::memory:
      return "memory";
    case cache_store::redis:
      return "redis";
  }
  return "?";
}

const char* to_string(transport_kind x) {
  switch (x) {
    case transport_kind::beast:
      return "beast";
    case transport_kind::httplib:
      return "httplib";
  }
  return "?";
}

const char* to_string(source_kind x) {
  switch (x) {
    case source_kind::chat:
      return "chat";
    case source_kind::embedding:
      return "embedding";
    case source_kind::ocr_vision:
      return "ocr_vision";
    case source_kind::ocr_monkey:
      return "ocr_monkey";
  }
  return "?";
}

const source_config* scope_config::find(const std::string& source_name) const {
  for (auto& src : sources)
    if (src.name == source_name)
      return &src;
  return nullptr;
}

std::string scope_config::unknown_source(const std::string& source_name) const {
  std::string known;
  for (auto& src : sources)
    known += (known.empty() ? "" : ", ") + src.name;
  return "source '" + source_name.substr(0, 64) + "' is not in scope " + name
         + " (its sources: " + known + ")";
}

const scope_config* settings::find(const std::string& scope_name) const {
  auto i = scopes.find(scope_name);
  return i != scopes.end() ? &i->second : nullptr;
}

} // namespace pgw
