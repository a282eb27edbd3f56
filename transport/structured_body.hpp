#pragma once

/// Structured output in the request body (SPEC §12): the response format of
/// each ladder rung and the schema instructions in the prompt.

#include "messages/structured.hpp"

#include <boost/json/fwd.hpp>
#include <caf/error.hpp>

#include <string>

namespace pgw {

/// The system-prompt text of the `json_object` and `prompt` rungs, ending
/// with the schema (serialized compactly).
std::string schema_instructions(const std::string& schema_json);

/// True when `schema` fits OpenAI's strict structured-output subset, so
/// `strict: true` may be sent: the root and every object schema have
/// `type: object`, `additionalProperties: false` and every property in
/// `required`; the root is not an `anyOf`; only these keywords appear:
/// type, properties, required, additionalProperties, items, enum, const,
/// anyOf, description, title, $defs, definitions, $ref, $schema; nesting is
/// at most 10 levels deep.
bool fits_strict_subset(const boost::json::value& schema);

/// Adds the parts of `rung` to a chat `body` (its `messages` already set):
/// `json_schema` (and `auto_select`) → `response_format: {type:
/// json_schema, json_schema: {name: "response", schema, strict}}`;
/// `json_object` → `response_format: {type: json_object}` plus the
/// instructions; `prompt` → the instructions only (and no
/// `response_format`, even one from OVERLAY or extra_body). The instructions are
/// appended to a leading system message with text content, or inserted as
/// a new first system message. A schema that is not JSON is an
/// `invalid_request` error naming `schema`.
caf::error apply_structured(boost::json::object& body,
                            const std::string& schema_text,
                            schema_strategy rung);

} // namespace pgw
