#include "actors/structured_repair.hpp"

namespace pgw {

namespace {

std::string_view trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && ws(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && ws(s.back()))
    s.remove_suffix(1);
  return s;
}

/// Where a ``` that starts a line (after white space only) is in `s`, or
/// npos. A fence starts a line (CommonMark); one inside a JSON string
/// cannot, since a JSON string holds no raw line break.
size_t fence_at(std::string_view s) {
  // One pass: each line's first byte that is not white space, checked once
  // (a search per ``` back to its line's start was quadratic on a long
  // line of them).
  for (size_t line = 0; line < s.size();) {
    auto first = s.find_first_not_of(" \t\r", line);
    if (first == std::string_view::npos)
      break;
    if (s.compare(first, 3, "```") == 0)
      return first;
    auto eol = s.find('\n', first);
    if (eol == std::string_view::npos)
      break;
    line = eol + 1;
  }
  return std::string_view::npos;
}

/// The body of the first ``` fence (its info string such as `json` dropped),
/// or `s` when there is none. An unclosed fence runs to the end. Only
/// fences that start a line count, so a ``` inside the JSON's strings (a
/// Markdown field) neither opens nor closes one.
std::string_view strip_fence(std::string_view s) {
  auto open = fence_at(s);
  if (open == std::string_view::npos)
    return s;
  auto body_start = s.find('\n', open + 3);
  if (body_start == std::string_view::npos)
    return s;
  auto body = s.substr(body_start + 1);
  auto close = fence_at(body);
  return close == std::string_view::npos ? body : body.substr(0, close);
}

/// Where a left-to-right scan of JSON text is: inside a string literal or
/// not (escapes honoured).
struct string_tracker {
  bool in_string = false;
  bool escaped = false;

  /// Feeds the next character; true when it belongs to a string literal
  /// (its quotes included).
  bool in_literal(char c) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      return true;
    }
    in_string = c == '"';
    return in_string;
  }
};

/// The outermost balanced object or array starting at the first `{` or `[`,
/// or `s` when none closes.
std::string_view outermost_value(std::string_view s) {
  auto start = s.find_first_of("{[");
  if (start == std::string_view::npos)
    return s;
  int depth = 0;
  string_tracker text;
  for (size_t i = start; i < s.size(); ++i) {
    char c = s[i];
    if (text.in_literal(c))
      continue;
    if (c == '{' || c == '[')
      ++depth;
    else if ((c == '}' || c == ']') && --depth == 0)
      return s.substr(start, i - start + 1);
  }
  return s;
}

/// Drops each `,` that is followed (after whitespace and other commas) by
/// `}` or `]`: a run of them goes at once (`[1,,]` is `[1]`).
std::string drop_trailing_commas(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  string_tracker text;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (!text.in_literal(c) && c == ',') {
      // The whole run of commas and white space is judged at once (one
      // look per comma would be quadratic in a long run): its commas go
      // when a `}` or `]` ends it, its white space stays.
      auto next = s.find_first_not_of(" \t\r\n,", i + 1);
      auto end = next == std::string_view::npos ? s.size() : next;
      bool drop = next != std::string_view::npos
                  && (s[next] == '}' || s[next] == ']');
      for (; i < end; ++i)
        if (!drop || s[i] != ',')
          out += s[i];
      --i;
      continue;
    }
    out += c;
  }
  return out;
}

} // namespace

repaired_json repair_json(std::string_view answer) {
  auto value = outermost_value(trim(strip_fence(trim(answer))));
  repaired_json out;
  // Trimmed after the commas go: a dropped leading one may uncover space.
  out.text = std::string(trim(drop_trailing_commas(value)));
  out.changed = out.text != answer;
  return out;
}

} // namespace pgw
