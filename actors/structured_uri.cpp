// The `format` values of draft 7 that name references: uri,
// uri-reference, iri, iri-reference (RFC 3986 / RFC 3987), uri-template
// (RFC 6570), json-pointer and relative-json-pointer (RFC 6901 and its
// draft), and regex (ECMA-262, as far as RE2 can tell). Each reads the
// string once; actors/structured_formats.cpp lists them with their words.

#include "actors/structured_checks.hpp"

#include "actors/structured_check_kit.hpp"

#include <re2/re2.h>

namespace pgw {

namespace {

bool alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool digit(char c) {
  return c >= '0' && c <= '9';
}

/// RFC 3986 §2.3 unreserved, §2.2 sub-delims.
bool unreserved(char c) {
  return alpha(c) || digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

bool sub_delim(char c) {
  return std::string_view("!$&'()*+,;=").find(c) != std::string_view::npos;
}

/// Whether `text` holds "%" and two hex digits at `i` (RFC 3986's
/// pct-encoded).
bool pct_encoded(std::string_view text, size_t i) {
  return i + 2 < text.size() && text[i] == '%' && is_hex_digit(text[i + 1])
         && is_hex_digit(text[i + 2]);
}

/// Every byte of `text` is unreserved, a sub-delim, one of `extra`, part
/// of a percent-encoded octet (`%` and two hex digits) or, for an IRI, a
/// byte of a non-ASCII character (RFC 3987's ucschar and iprivate; the
/// string is UTF-8, as JSON's).
bool made_of(std::string_view text, std::string_view extra, bool iri) {
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (!pct_encoded(text, i))
        return false;
      i += 2;
    } else if (!(unreserved(c) || sub_delim(c)
                 || extra.find(c) != std::string_view::npos
                 || (iri && static_cast<unsigned char>(c) >= 0x80))) {
      return false;
    }
  }
  return true;
}

/// The path's, query's and fragment's extra characters: pchar's ":" and
/// "@", the segment separator, and "?" (query and fragment only).
constexpr std::string_view path_extra = ":@/";
constexpr std::string_view query_extra = ":@/?";

/// RFC 3986 §3.2.2's IP-literal contents: an IPv6 address, one with a
/// zone (RFC 6874: "%25" then unreserved or percent-encoded characters,
/// fe80::1%25eth0), or IPvFuture ("v" hex digits "." then unreserved,
/// sub-delims or ":").
bool ip_literal(std::string_view text) {
  if (!text.empty() && (text[0] == 'v' || text[0] == 'V')) {
    auto dot = text.find('.');
    if (dot == std::string_view::npos || dot == 1 || dot + 1 == text.size())
      return false;
    for (size_t i = 1; i < dot; ++i)
      if (!is_hex_digit(text[i]))
        return false;
    for (char c : text.substr(dot + 1))
      if (!(unreserved(c) || sub_delim(c) || c == ':'))
        return false;
    return true;
  }
  auto zone = text.find("%25");
  if (zone != std::string_view::npos) {
    auto id = text.substr(zone + 3);
    if (id.empty() || !made_of(id, "", false))
      return false;
    for (char c : id)
      if (sub_delim(c))
        return false;
    text = text.substr(0, zone);
  }
  return ipv6(text);
}

/// RFC 3986 §3.2: [ userinfo "@" ] host [ ":" port ].
bool authority(std::string_view text, bool iri) {
  auto at = text.rfind('@');
  if (at != std::string_view::npos) {
    if (!made_of(text.substr(0, at), ":", iri))
      return false;
    text.remove_prefix(at + 1);
  }
  std::string_view port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || !ip_literal(text.substr(1, close - 1)))
      return false;
    port = text.substr(close + 1);
    if (!port.empty() && port[0] != ':')
      return false;
  } else {
    auto colon = text.find(':');
    if (colon != std::string_view::npos)
      port = text.substr(colon);
    // reg-name (IPv4address is one too): no ":" or "@" in it.
    if (!made_of(text.substr(0, colon), "", iri))
      return false;
  }
  for (size_t i = 1; i < port.size(); ++i)
    if (!digit(port[i]))
      return false;
  return true;
}

/// RFC 3986 §4.1's URI-reference (or, with `need_scheme`, its URI): an
/// optional scheme, then "//" authority and a path, or a path (whose
/// first segment, without a scheme, holds no ":"), then "?" query and "#"
/// fragment. With `iri`, RFC 3987's IRI forms: non-ASCII characters too.
bool uri_reference(std::string_view text, bool need_scheme, bool iri) {
  auto hash = text.find('#');
  if (hash != std::string_view::npos) {
    if (!made_of(text.substr(hash + 1), query_extra, iri))
      return false;
    text = text.substr(0, hash);
  }
  auto question = text.find('?');
  if (question != std::string_view::npos) {
    if (!made_of(text.substr(question + 1), query_extra, iri))
      return false;
    text = text.substr(0, question);
  }
  // A ":" before any "/" ends a scheme; a relative reference cannot have
  // one there (RFC 3986 §4.2: "this:that" is a URI with scheme "this").
  auto colon = text.find(':');
  if (colon != std::string_view::npos && colon < text.find('/')) {
    auto scheme = text.substr(0, colon);
    if (scheme.empty() || !alpha(scheme[0]))
      return false;
    for (char c : scheme)
      if (!(alpha(c) || digit(c) || c == '+' || c == '-' || c == '.'))
        return false;
    text = text.substr(colon + 1);
  } else if (need_scheme) {
    return false;
  }
  if (text.substr(0, 2) == "//") {
    auto slash = text.find('/', 2);
    if (!authority(text.substr(2, slash == std::string_view::npos
                                    ? std::string_view::npos
                                    : slash - 2),
                   iri))
      return false;
    text = slash == std::string_view::npos ? std::string_view()
                                           : text.substr(slash);
  }
  return made_of(text, path_extra, iri);
}

/// RFC 6901: "" or "/"-prefixed reference tokens, "~" only as "~0" or "~1".
bool json_pointer(std::string_view text) {
  if (!text.empty() && text[0] != '/')
    return false;
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '~'
        && (i + 1 == text.size() || (text[i + 1] != '0' && text[i + 1] != '1')))
      return false;
  return true;
}

/// draft-handrews-relative-json-pointer-01: a non-negative integer without
/// leading zeros, then "#" or a JSON pointer.
bool relative_json_pointer(std::string_view text) {
  size_t n = 0;
  while (n < text.size() && digit(text[n]))
    ++n;
  if (n == 0 || (n > 1 && text[0] == '0'))
    return false;
  auto rest = text.substr(n);
  return rest == "#" || json_pointer(rest);
}

/// RFC 6570 §2: literals (no controls, space, quotes, `<>\^`{|}`, a "%"
/// only percent-encoding) and expressions: "{", an optional operator, then
/// comma-separated variables (letters, digits, "_", percent-encoded octets,
/// inner dots) each with an optional prefix ":1".."9999" or explode "*".
bool uri_template(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '{') {
      auto close = text.find('}', i);
      if (close == std::string_view::npos)
        return false;
      auto expr = text.substr(i + 1, close - i - 1);
      if (!expr.empty()
          && std::string_view("+#./;?&=,!@|").find(expr[0])
               != std::string_view::npos)
        expr.remove_prefix(1);
      // varspec *( "," varspec )
      size_t at = 0;
      for (;;) {
        size_t start = at;
        bool after_dot = true;
        while (at < expr.size()) {
          char v = expr[at];
          if (v == '%') {
            if (!pct_encoded(expr, at))
              return false;
            at += 3;
            after_dot = false;
          } else if (alpha(v) || digit(v) || v == '_') {
            ++at;
            after_dot = false;
          } else if (v == '.' && !after_dot) {
            ++at;
            after_dot = true;
          } else {
            break;
          }
        }
        if (at == start || after_dot)
          return false;
        if (at < expr.size() && expr[at] == ':') {
          size_t digits = ++at;
          while (at < expr.size() && digit(expr[at]))
            ++at;
          if (at == digits || at - digits > 4 || expr[digits] == '0')
            return false;
        } else if (at < expr.size() && expr[at] == '*') {
          ++at;
        }
        if (at == expr.size())
          break;
        if (expr[at] != ',')
          return false;
        ++at;
      }
      i = close;
    } else if (c == '%') {
      if (!pct_encoded(text, i))
        return false;
      i += 2;
    } else if (c <= 0x20 || c == 0x7f
               || std::string_view("\"'<>\\^`|}").find(static_cast<char>(c))
                    != std::string_view::npos) {
      return false;
    }
  }
  return true;
}

} // namespace

bool uri_format(std::string_view format, std::string_view text) {
  if (format == "uri")
    return uri_reference(text, true, false);
  if (format == "uri-reference")
    return uri_reference(text, false, false);
  if (format == "iri")
    return uri_reference(text, true, true);
  if (format == "iri-reference")
    return uri_reference(text, false, true);
  if (format == "uri-template")
    return uri_template(text);
  if (format == "json-pointer")
    return json_pointer(text);
  if (format == "relative-json-pointer")
    return relative_json_pointer(text);
  return true;
}

/// The longest string `ecma_regex` reads: RE2's parse tree takes tens of
/// bytes per character of the pattern. A longer string passes unread.
constexpr size_t max_regex_text = 64 * 1024;

bool ecma_regex(std::string_view text) {
  if (text.size() > max_regex_text)
    return true;
  std::string why;
  auto translated = ecma_to_re2(text, &why);
  if (!translated)
    return true; // a lone surrogate: ECMA-262 takes one, RE2 cannot
  RE2::Options opts;
  opts.set_log_errors(false);
  opts.set_never_capture(true);
  opts.set_max_mem(max_pattern_memory);
  RE2 re(*translated, opts);
  // Only what ECMA-262 refuses as RE2 does: RE2 also refuses what
  // ECMA-262 takes (lookaround, backreferences, `\q` as "q", {1001}), and
  // a pattern larger than pgw runs is still a regular expression.
  switch (re.error_code()) {
    case RE2::ErrorMissingBracket:
    case RE2::ErrorMissingParen:
    case RE2::ErrorUnexpectedParen:
    case RE2::ErrorTrailingBackslash:
    case RE2::ErrorRepeatArgument:
    case RE2::ErrorRepeatOp:
      return false;
    case RE2::ErrorBadCharRange:
      // [z-a] is out of order in both; [\w-a] is a literal "-" to ECMA-262
      // (annex B), a bad range to RE2.
      return re.error_arg().find('\\') != std::string::npos;
    default:
      return true;
  }
}

} // namespace pgw
