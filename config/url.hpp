#pragma once

/// The one URL parser of the project (SPEC 12): BASE_URL and REDIS_URL are
/// validated with it (config/validate.cpp), the transport takes host, port
/// and path from it, the Redis client its endpoint. No URL string is ever
/// handed to a library to parse again.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pgw {

/// `scheme://[userinfo@]host[:port][path]`, taken apart.
struct url_parts {
  std::string scheme; ///< lower case
  bool has_userinfo = false;
  std::string user;     ///< before the first ':' of the userinfo
  std::string password; ///< after it (empty without one)
  std::string host;     ///< lower case; an IPv6 literal without brackets
  bool ipv6 = false;
  std::optional<uint16_t> port;
  std::string path; ///< from the first '/' on (query and fragment included)

  /// `host[:port]`, brackets around an IPv6 literal (a Host header).
  std::string authority() const;
};

/// Parses `text`. Scheme and host are case-normalised; an IPv6 literal must
/// be in brackets and parse as an IPv6 address; a port is 1-65535. Returns
/// the problem in words ("has an invalid port (1-65535)") or an empty
/// string when `out` was filled. Never echoes the userinfo.
std::string parse_url(std::string_view text, url_parts& out);

/// REDIS_URL, `redis://[:password@]host[:port][/db]`, taken apart.
struct redis_url_parts {
  std::string host;
  std::optional<uint16_t> port;
  std::string user;     ///< an ACL user (`user:password@`); empty: none
  std::string password; ///< empty: none given (percent-decoded)
  int64_t db = 0;
};

/// `text` with each `%XX` replaced by its byte; nothing when a `%` is not
/// followed by two hex digits.
std::optional<std::string> percent_decode(std::string_view text);

/// The one REDIS_URL grammar: validation (`need_port`: the key must name a
/// port) and the Redis client (which defaults it) both parse with this.
/// Returns the problem in words or an empty string when `out` was filled.
std::string split_redis_url(std::string_view text, redis_url_parts& out,
                            bool need_port);

/// `url` with scheme and host in lower case (unchanged when it does not
/// parse: validation reports it).
std::string normalise_url(const std::string& url);

} // namespace pgw
