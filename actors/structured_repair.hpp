#pragma once

/// Structured output: the deterministic, cheap repair tried before a
/// re-ask (SPEC §12).

#include <string>
#include <string_view>

namespace pgw {

struct repaired_json {
  std::string text;
  /// True when `text` differs from the input (something was repaired).
  bool changed = false;
};

/// Repairs the usual wrapping of a JSON answer, in this order: strips a
/// Markdown code fence (```json … ```; a fence starts a line, so a ``` in
/// the JSON's strings is not one), takes the outermost balanced JSON
/// object or array (dropping text before and after it; strings and escapes
/// are respected), and drops trailing commas (a run of them) before `}` or
/// `]` outside strings. Never invents content (its text is a subsequence of
/// the answer) and repairs once (its text repairs to itself): an answer
/// without a balanced value is returned trimmed, and whether the result
/// parses is the caller's check.
repaired_json repair_json(std::string_view answer);

} // namespace pgw
