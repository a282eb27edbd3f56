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

/// `url` with any user information replaced by `***`. Conservative: when the
/// text contains an `@` at all, everything between the scheme and the last
/// `@` is masked, so a malformed URL never leaks a password either.
std::string mask_url(const std::string& url) {
  auto at = url.rfind('@');
  if (at == std::string::npos)
    return url;
  auto scheme_end = url.find("://");
  size_t start = 0;
  if (scheme_end != std::string::npos && scheme_end < at)
    start = scheme_end + 3;
  return url.substr(0, start) + "***" + url.substr(at);
}

} // namespace pgw::detail
