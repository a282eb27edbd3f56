#include "config/keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace pgw::detail {

std::string to_upper(std::string text) {
  for (auto& ch : text)
    ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return text;
}

std::string to_lower(std::string text) {
  for (auto& ch : text)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

/// Second segments of scope keys, current and planned. None of them can be a
/// provider name (SPEC §3).
const std::vector<std::string>& reserved_segments() {
  static const std::vector<std::string> names = {
    "BACKOFF_BASE_S", "BACKOFF_MAX_S",  "BREAKER",         "CACHE",
    "CALL_DEADLINE_S", "HEDGE",         "LIMITER",         "MAX_ATTEMPTS",
    "ON_CIRCUIT_OPEN", "ON_QUOTA_FULL", "SELECTOR",        "STALL_WINDOW_S",
    "STREAM",          "STRUCTURED",    "TELEMETRY",
  };
  return names;
}

/// True when `segment` (any case) is a reserved scope-key segment.
bool is_reserved_segment(const std::string& segment) {
  auto upper = to_upper(segment);
  auto& names = reserved_segments();
  return std::find(names.begin(), names.end(), upper) != names.end();
}

bool is_name_segment(const std::string& name) {
  if (name.empty())
    return false;
  for (char ch : name) {
    auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && c != '_' && c != '-')
      return false;
  }
  return std::isalnum(static_cast<unsigned char>(name.front()))
         && std::isalnum(static_cast<unsigned char>(name.back()));
}

std::string own_source_key(const std::string& scope,
                           const source_config& src,
                           const std::string& field) {
  return scope + "__" + to_upper(src.provider) + "__" + to_upper(src.name)
         + "__" + field;
}

std::string source_key(const std::string& scope, const source_config& src,
                       const std::string& field) {
  auto o = src.origin.find(field);
  if (o != src.origin.end() && o->second == "scope")
    return scope_key(scope, field);
  return own_source_key(scope, src, field);
}

/// `{SCOPE}__{SUFFIX}` for a scope key.
std::string scope_key(const std::string& scope, const std::string& suffix) {
  return scope + "__" + suffix;
}

/// Shortest text that reads back as `x` ("120", "0.5", "nan").
std::string format_number(double x) {
  return fmt::format("{}", x);
}

/// `url` with any user information, every query value and the fragment
/// replaced by `***` (a key may ride in `?key=…`). Conservative: when the
/// text contains an `@` at all, everything between the scheme and the last
/// `@` is masked, so a malformed URL never leaks a password either.
std::string mask_url(const std::string& url) {
  auto out = url;
  if (auto at = out.rfind('@'); at != std::string::npos) {
    auto scheme_end = out.find("://");
    size_t start = 0;
    if (scheme_end != std::string::npos && scheme_end < at)
      start = scheme_end + 3;
    out = out.substr(0, start) + "***" + out.substr(at);
  }
  auto query = out.find_first_of("?#");
  if (query == std::string::npos)
    return out;
  auto fragment = out.find('#', query);
  std::string masked = out.substr(0, query);
  if (out[query] == '?') {
    // Names stay (they say which parameter was there); values go, and so
    // does a parameter without '=', which may be a bare token.
    masked += '?';
    auto params = out.substr(query + 1, fragment == std::string::npos
                                          ? std::string::npos
                                          : fragment - query - 1);
    size_t start = 0;
    for (;;) {
      auto end = std::min(params.find('&', start), params.size());
      auto param = params.substr(start, end - start);
      auto eq = param.find('=');
      if (eq != std::string::npos)
        masked += param.substr(0, eq + 1) + "***";
      else if (!param.empty())
        masked += "***";
      if (end == params.size())
        break;
      masked += '&';
      start = end + 1;
    }
  }
  if (fragment != std::string::npos)
    masked += "#***";
  return masked;
}

namespace {

/// Edits turning `a` into `b` (optimal string alignment distance).
size_t spelling_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= m; ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

} // namespace

std::string closest_spelling(const std::string& word,
                             const std::vector<std::string>& candidates) {
  // Keys are short; a long word is no key's misspelling.
  if (word.empty() || word.size() > 64)
    return {};
  const size_t allowed = word.size() <= 5 ? 1 : word.size() <= 12 ? 2 : 3;
  std::string best;
  size_t best_distance = allowed + 1;
  for (auto& candidate : candidates) {
    if (candidate == word)
      continue;
    auto distance = spelling_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

} // namespace pgw::detail
