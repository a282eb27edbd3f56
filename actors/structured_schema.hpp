#pragma once

/// Structured output (SPEC §10): JSON Schema compilation and answer
/// validation with valijson (draft 7), behind a small interface so that only
/// actors/structured_schema.cpp instantiates valijson's templates.

#include <caf/expected.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

/// One validation error: where (a JSON pointer into the answer, "" for the
/// root) and what.
struct schema_issue {
  std::string pointer;
  std::string message;
};

/// At most this many issues are reported per check (then one "… more" line).
constexpr size_t max_schema_issues = 20;

/// A schema compiled once; immutable and shareable between threads.
class compiled_schema;

using schema_ptr = std::shared_ptr<const compiled_schema>;

/// The result of checking one answer.
struct structured_check {
  bool valid = false;
  /// The answer parsed only after `repair_json` changed it.
  bool repaired = false;
  /// The JSON value that was validated (after repair), serialized; empty
  /// when the answer is not JSON even after repair.
  std::string json;
  /// Why it is not valid (empty when valid): at most `max_schema_issues`
  /// entries plus one summary entry when more were found.
  std::vector<schema_issue> issues;
};

/// Compiles `schema_text` (a JSON Schema document, draft 7). The same text
/// is compiled once per process (cached by its SHA-256 digest). An invalid
/// schema is an `invalid_request` error whose message names the JSON
/// pointer of the problem inside the schema ("schema /properties/age/type:
/// …"); the schema is checked against the draft-7 meta-schema first, then
/// compiled (unresolvable `$ref`s, remote documents).
caf::expected<schema_ptr> compile_schema(const std::string& schema_text);

/// Checks an answer: parses it as JSON (after `repair_json` when it does
/// not parse as it is) and validates it against `schema`.
structured_check check_answer(const compiled_schema& schema,
                              const std::string& content);

/// `pointer: message` lines, one per issue ("(root)" for the root pointer).
std::string format_issues(const std::vector<schema_issue>& issues);

/// Schemas compiled so far in this process (the cache's size), for tests.
size_t compiled_schema_count();

} // namespace pgw
