#include "config/scrub.hpp"
#include "config/url.hpp"

#include <algorithm>
#include <memory>
#include <mutex>

namespace pgw {

namespace {

constexpr size_t min_secret_bytes = 4;

/// Shortest remainder of a key, once its vendor prefix is cut, that is
/// redacted on its own: long enough never to be an ordinary word.
constexpr size_t min_distinctive_bytes = 12;

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

bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/// `secret` without its vendor prefix (`sk-`, `sk-proj-`, `sk-ant-`: a run
/// of letters-only segments, each followed by '-'), or empty when it has
/// none or the rest is shorter than `min_distinctive_bytes`. Upstreams echo
/// keys without their prefix ("token=upstreamSECRET…").
std::string_view distinctive_part(std::string_view secret) {
  size_t cut = 0;
  for (;;) {
    auto end = cut;
    while (end < secret.size() && is_letter(secret[end]))
      ++end;
    if (end == cut || end == secret.size() || secret[end] != '-')
      break;
    cut = end + 1;
  }
  if (cut == 0 || secret.size() - cut < min_distinctive_bytes)
    return {};
  return secret.substr(cut);
}

/// Adds `secret` and its distinctive part to `list`, once each.
void add_forms(std::vector<std::string>& list, const std::string& secret) {
  auto add = [&list](std::string_view form) {
    if (form.size() >= min_secret_bytes
        && std::find(list.begin(), list.end(), form) == list.end())
      list.emplace_back(form);
  };
  add(secret);
  add(distinctive_part(secret));
}

/// Replaces each of `secrets` (longest first) in `text` by `mask`.
std::string replace_each(std::string text,
                         const std::vector<std::string>& secrets,
                         std::string_view mask) {
  for (auto& secret : secrets) {
    size_t pos = 0;
    while ((pos = text.find(secret, pos)) != std::string::npos) {
      text.replace(pos, secret.size(), mask);
      pos += mask.size();
    }
  }
  return text;
}

/// Longest first, so a secret containing another (a key and its
/// distinctive part) is replaced whole.
void longest_first(std::vector<std::string>& list) {
  std::sort(list.begin(), list.end(),
            [](auto& a, auto& b) { return a.size() > b.size(); });
}

} // namespace

std::string scrub(std::string_view text) {
  return scrub_patterns(
    replace_each(std::string{text}, *current_secrets(), redacted));
}

std::string redact_secrets(std::string_view text,
                           const std::vector<std::string>& secrets,
                           std::string_view mask) {
  std::vector<std::string> forms;
  for (auto& s : secrets)
    add_forms(forms, s);
  longest_first(forms);
  return replace_each(std::string{text}, forms, mask);
}

void register_secrets(const std::vector<std::string>& secrets) {
  std::lock_guard<std::mutex> guard{secrets_mtx};
  auto next = std::make_shared<std::vector<std::string>>(*secrets_list);
  for (auto& s : secrets)
    add_forms(*next, s);
  longest_first(*next);
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
  // And as Redis is told it (percent-decoded).
  if (auto decoded = percent_decode(url_password(s.global.redis_url)))
    add(*decoded);
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
