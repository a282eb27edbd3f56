#pragma once

/// Structured output (SPEC §10, §12): how a call asks a source for JSON.

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace pgw {

/// One validation error of an answer: where (a JSON pointer into the
/// answer, "" for the root) and what.
struct schema_issue {
  std::string pointer;
  std::string message;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, schema_issue& x) {
  return f(caf::meta::type_name("pgw.schema_issue"), x.pointer, x.message);
}

/// The rungs of the structured-output ladder, strongest first, plus `auto`
/// (the strongest rung the source supports and has not rejected).
enum class schema_strategy : uint8_t {
  auto_select, ///< "auto"
  json_schema, ///< response_format json_schema (strict when the schema fits)
  json_object, ///< response_format json_object + the schema in the prompt
  prompt,      ///< the schema in the prompt only
};

/// "auto", "json_schema", "json_object" or "prompt".
const char* to_string(schema_strategy x);

/// Parses one of the names `to_string` gives; nullopt otherwise.
std::optional<schema_strategy> parse_schema_strategy(const std::string& name);

} // namespace pgw
