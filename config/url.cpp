#include "config/url.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace pgw {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return ch >= '0' && ch <= '9';
  });
}

} // namespace

std::string url_parts::authority() const {
  auto h = ipv6 ? "[" + host + "]" : host;
  return port ? h + ":" + std::to_string(*port) : h;
}

std::string parse_url(std::string_view text, url_parts& out) {
  out = url_parts{};
  auto sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0)
    return "has no scheme (scheme://host)";
  auto scheme = text.substr(0, sep);
  if (!std::all_of(scheme.begin(), scheme.end(), [](char ch) {
        return std::isalpha(static_cast<unsigned char>(ch)) != 0;
      }))
    return "has an invalid scheme";
  out.scheme = lower(scheme);
  auto rest = text.substr(sep + 3);
  auto path_at = rest.find_first_of("/?#");
  auto authority = rest.substr(0, path_at);
  if (path_at != std::string_view::npos)
    out.path = std::string(rest.substr(path_at));
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    out.has_userinfo = true;
    auto userinfo = authority.substr(0, at);
    auto colon = userinfo.find(':');
    out.user = std::string(userinfo.substr(0, colon));
    if (colon != std::string_view::npos)
      out.password = std::string(userinfo.substr(colon + 1));
    authority.remove_prefix(at + 1);
  }
  std::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos)
      return "has an unterminated IPv6 address";
    auto host = std::string(authority.substr(1, close - 1));
    in6_addr addr{};
    if (host.empty() || ::inet_pton(AF_INET6, host.c_str(), &addr) != 1)
      return "has an invalid IPv6 address";
    out.host = lower(host);
    out.ipv6 = true;
    auto tail = authority.substr(close + 1);
    if (!tail.empty()) {
      if (tail.front() != ':')
        return "has text after the IPv6 address";
      has_port = true;
      port = tail.substr(1);
    }
  } else {
    auto colon = authority.find(':');
    auto host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port = authority.substr(colon + 1);
    }
    if (host.empty())
      return "has no host";
    if (!std::all_of(host.begin(), host.end(), [](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-'
                 || ch == '.' || ch == '_';
        }))
      return "has an invalid host";
    out.host = lower(host);
  }
  if (has_port) {
    if (!digits(port) || port.size() > 5)
      return "has an invalid port (1-65535)";
    auto n = std::stol(std::string(port));
    if (n < 1 || n > 65535)
      return "has an invalid port (1-65535)";
    out.port = static_cast<uint16_t>(n);
  }
  return {};
}

std::optional<std::string> percent_decode(std::string_view text) {
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9')
      return ch - '0';
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size() || hex(text[i + 1]) < 0 || hex(text[i + 2]) < 0)
      return std::nullopt;
    out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
    i += 2;
  }
  return out;
}

std::string split_redis_url(std::string_view text, redis_url_parts& out,
                            bool need_port) {
  url_parts parts;
  auto problem = parse_url(text, parts);
  if (parts.scheme != "redis")
    return "must start with redis://";
  // A '/', '?' or '#' in a password ends the host part early.
  auto rest = text.substr(std::min(text.size(), text.find("://") + 3));
  auto cut = rest.find_first_of("/?#");
  bool cut_credentials = cut != std::string_view::npos
                         && rest.find('@', cut) != std::string_view::npos
                         && rest.substr(0, cut).find('@')
                              == std::string_view::npos;
  if (cut_credentials && (!problem.empty() || !parts.path.empty()))
    return "has a '/', '?' or '#' before its '@': a password holding one "
           "must be percent-encoded (%2F, %3F, %23)";
  if (!problem.empty())
    return problem;
  if (parts.has_userinfo && parts.password.empty())
    return "credentials must be :password@ or user:password@";
  if (parts.has_userinfo) {
    auto user = percent_decode(parts.user);
    auto password = percent_decode(parts.password);
    if (!user || !password)
      return "has an invalid percent-encoding in its credentials (%XX, two "
             "hex digits)";
    out.user = std::move(*user);
    parts.password = std::move(*password);
  }
  if (need_port && !parts.port)
    return "has no port";
  if (!parts.path.empty()) {
    auto db = parts.path.substr(1);
    auto digits = std::all_of(db.begin(), db.end(), [](char ch) {
      return ch >= '0' && ch <= '9';
    });
    if (parts.path[0] != '/' || db.empty() || !digits || db.size() > 9)
      return "has an invalid database number (a non-negative integer)";
    out.db = std::stoll(db);
  }
  out.host = parts.host;
  out.port = parts.port;
  out.password = parts.password;
  return {};
}

std::string normalise_url(const std::string& url) {
  url_parts parts;
  if (!parse_url(url, parts).empty())
    return url;
  // Rebuilt from the original text: only scheme and host change case.
  auto sep = url.find("://");
  auto out = parts.scheme + url.substr(sep);
  auto host_at = sep + 3;
  if (parts.has_userinfo)
    host_at = url.rfind('@', url.find_first_of("/?#", host_at)) + 1;
  if (parts.ipv6)
    ++host_at;
  for (size_t i = 0; i < parts.host.size(); ++i)
    out[host_at + i] = parts.host[i];
  return out;
}

} // namespace pgw
