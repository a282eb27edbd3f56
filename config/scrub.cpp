#include "config/scrub.hpp"

#include <algorithm>
#include <memory>
#include <mutex>

namespace pgw {

namespace {

constexpr size_t min_secret_bytes = 4;

std::mutex secrets_mtx;
std::shared_ptr<const std::vector<std::string>> secrets_list
  = std::make_shared<const std::vector<std::string>>();

std::shared_ptr<const std::vector<std::string>> current_secrets() {
  std::lock_guard<std::mutex> guard{secrets_mtx};
  return secrets_list;
}

bool token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'
         || c == '~' || c == '+' || c == '/' || c == '=';
}

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool starts_with_nocase(std::string_view s, size_t at, std::string_view word) {
  if (s.size() - at < word.size())
    return false;
  for (size_t i = 0; i < word.size(); ++i)
    if (lower(s[at + i]) != word[i])
      return false;
  return true;
}

/// Replaces `Bearer <token>` and `sk-<token>` (a token of 6 or more
/// characters) by `[redacted]`.
std::string scrub_patterns(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    bool boundary = i == 0 || !word_char(in[i - 1]);
    if (boundary && starts_with_nocase(in, i, "bearer")) {
      auto j = i + 6;
      while (j < in.size() && (in[j] == ' ' || in[j] == '\t'))
        ++j;
      auto k = j;
      while (k < in.size() && token_char(in[k]))
        ++k;
      if (j > i + 6 && k > j) {
        out.append(in.substr(i, j - i));
        out += redacted;
        i = k;
        continue;
      }
    }
    if (boundary && starts_with_nocase(in, i, "sk-")) {
      auto k = i + 3;
      while (k < in.size() && token_char(in[k]))
        ++k;
      if (k - (i + 3) >= 6) {
        out += redacted;
        i = k;
        continue;
      }
    }
    out += in[i++];
  }
  return out;
}

} // namespace

std::string scrub(std::string_view text) {
  std::string out{text};
  auto secrets = current_secrets();
  for (auto& secret : *secrets) {
    size_t pos = 0;
    while ((pos = out.find(secret, pos)) != std::string::npos) {
      out.replace(pos, secret.size(), redacted);
      pos += std::char_traits<char>::length(redacted);
    }
  }
  return scrub_patterns(out);
}

void register_secrets(const std::vector<std::string>& secrets) {
  std::lock_guard<std::mutex> guard{secrets_mtx};
  auto next = std::make_shared<std::vector<std::string>>(*secrets_list);
  for (auto& s : secrets)
    if (s.size() >= min_secret_bytes
        && std::find(next->begin(), next->end(), s) == next->end())
      next->push_back(s);
  // Longest first, so a secret containing another is replaced whole.
  std::sort(next->begin(), next->end(),
            [](auto& a, auto& b) { return a.size() > b.size(); });
  secrets_list = std::move(next);
}

std::string url_password(std::string_view url) {
  auto scheme = url.find("://");
  if (scheme == std::string_view::npos)
    return {};
  auto rest = url.substr(scheme + 3);
  auto end = rest.find_first_of("/?#");
  auto authority = rest.substr(0, end);
  auto at = authority.rfind('@');
  if (at == std::string_view::npos)
    return {};
  auto userinfo = authority.substr(0, at);
  auto colon = userinfo.find(':');
  if (colon == std::string_view::npos)
    return std::string(userinfo); // a lone user name may be a token too
  return std::string(userinfo.substr(colon + 1));
}

std::vector<std::string> secrets_of(const settings& s) {
  std::vector<std::string> out;
  auto add = [&out](std::string x) {
    if (!x.empty())
      out.push_back(std::move(x));
  };
  add(url_password(s.global.redis_url));
  for (auto& [name, scope] : s.scopes)
    for (auto& src : scope.sources) {
      add(src.api_key);
      add(url_password(src.base_url));
      for (auto& [key, value] : src.headers)
        add(value);
    }
  return out;
}

} // namespace pgw
