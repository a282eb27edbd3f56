#pragma once

/// Structured output (SPEC §10): JSON Schema compilation and answer
/// validation with valijson (draft 7), behind a small interface so that only
/// actors/structured_schema.cpp instantiates valijson's templates.

#include "messages/structured.hpp"

#include <caf/expected.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

/// At most this many issues are reported per check (then one "… more" line).
constexpr size_t max_schema_issues = 20;

/// The longest schema text compiled, in bytes (`invalid_request` beyond;
/// `chat --schema` reads no more).
constexpr size_t max_schema_bytes = 128 * 1024;

/// Answers nest at most this deep (arrays and objects); a deeper answer is
/// not valid JSON. A recursive schema recurses no deeper than its answer.
constexpr size_t max_answer_depth = 32;

/// Subschema checks that validating one answer value may take, at most
/// (each subschema applied to the value counts 1 plus the names and values
/// it lists in `properties`, `required`, `enum`, ...); a schema beyond is
/// `invalid_request`. Lists alone stay below it within `max_schema_bytes`;
/// subschemas that apply others twice per level (two `$ref`s to the same
/// definition in an `allOf`, ...) reach it.
constexpr uint64_t max_schema_fanout = 100'000;

/// Subschemas nested inside each other (counting `$ref` targets) along one
/// path of an answer, at most: valijson recurses once per level.
constexpr uint64_t max_schema_nesting = 512;

/// An answer whose values times the schema's fan-out (plus the pairs of
/// items `uniqueItems` compares) exceed this is an issue, not validated:
/// validation runs inside the call and must end well before its deadline.
constexpr uint64_t max_validation_work = 20'000'000;

/// The errors of an invalid answer are listed only when its validation
/// work is at most this (valijson collects every error, one or more per
/// check); otherwise one issue says it does not match.
constexpr uint64_t max_listed_work = 250'000;

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

/// The schema `compile_schema` compiled from this text and still keeps;
/// null when there is none (then compiling may take tens of milliseconds).
schema_ptr compiled_schema_of(const std::string& schema_text);

/// Checks an answer: parses it as JSON (after `repair_json` when it does
/// not parse as it is) and validates it against `schema`.
structured_check check_answer(const compiled_schema& schema,
                              const std::string& content);

/// `pointer: message` lines, one per issue ("(root)" for the root pointer).
std::string format_issues(const std::vector<schema_issue>& issues);

/// The issues on one line ("pointer: message; pointer: message"), line
/// breaks inside a message replaced by "; ": for error messages and logs.
std::string format_issues_line(const std::vector<schema_issue>& issues);

/// Schemas compiled so far in this process (the cache's size), for tests.
size_t compiled_schema_count();

/// Answers `check_answer` has checked in this process, for tests (a call
/// validates each answer once).
uint64_t checked_answer_count();

} // namespace pgw
