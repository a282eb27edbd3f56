#include "messages/structured.hpp"

namespace pgw {

const char* to_string(schema_strategy x) {
  switch (x) {
    case schema_strategy::auto_select:
      return "auto";
    case schema_strategy::json_schema:
      return "json_schema";
    case schema_strategy::json_object:
      return "json_object";
    case schema_strategy::prompt:
      return "prompt";
  }
  return "auto";
}

std::optional<schema_strategy> parse_schema_strategy(const std::string& name) {
  for (auto x : {schema_strategy::auto_select, schema_strategy::json_schema,
                 schema_strategy::json_object, schema_strategy::prompt})
    if (name == to_string(x))
      return x;
  return std::nullopt;
}

} // namespace pgw
