// The `format` values pgw checks (JSON Schema draft 7 lets a validator
// ignore a format; valijson checks date, time and date-time with
// std::regex and no other): RFC 3339's dates and times read in one pass,
// the formats OpenAI's strict structured output names (email, hostname,
// ipv4, ipv6, uuid, duration), draft 7's references and regex
// (actors/structured_uri.cpp), and its internationalized hostname and
// email (actors/structured_idn.cpp).

#include "actors/structured_checks.hpp"

#include "actors/structured_check_kit.hpp"

#include "config/support/calendar.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <string>

namespace pgw {

// Declared in actors/structured_check_kit.hpp.
bool ipv6(std::string_view text) {
  // inet_pton reads a C string: no byte past a NUL may go unread.
  for (char c : text)
    if (!is_hex_digit(c) && c != ':' && c != '.')
      return false;
  in6_addr out{};
  return text.size() <= 45
         && inet_pton(AF_INET6, std::string(text).c_str(), &out) == 1;
}

namespace {

/// A cursor over the string being read: each reader takes what it names
/// at the cursor and moves past it, or returns false (the cursor then
/// does not matter: the value is refused).
struct reader {
  std::string_view text;
  size_t at = 0;

  bool done() const {
    return at == text.size();
  }

  bool digit() const {
    return at < text.size() && text[at] >= '0' && text[at] <= '9';
  }

  /// Exactly `n` digits, their value in `out`.
  bool digits(int n, int& out) {
    out = 0;
    for (int i = 0; i < n; ++i) {
      if (!digit())
        return false;
      out = out * 10 + (text[at++] - '0');
    }
    return true;
  }

  /// One of `chars` (a letter matching either case when both are listed).
  bool one_of(std::string_view chars) {
    if (at < text.size() && chars.find(text[at]) != std::string_view::npos) {
      ++at;
      return true;
    }
    return false;
  }
};

/// full-date: date-fullyear "-" date-month "-" date-mday.
bool full_date(reader& r) {
  int year = 0, month = 0, day = 0;
  return r.digits(4, year) && r.one_of("-") && r.digits(2, month)
         && month >= 1 && month <= 12 && r.one_of("-") && r.digits(2, day)
         && day >= 1 && day <= days_in_month(year, month);
}

/// full-time: partial-time time-offset. A leap second (second 60) is the
/// last second of a UTC day: 23:59:60 once the offset is taken off.
bool full_time(reader& r) {
  int hour = 0, minute = 0, second = 0;
  if (!(r.digits(2, hour) && hour <= 23 && r.one_of(":")
        && r.digits(2, minute) && minute <= 59 && r.one_of(":")
        && r.digits(2, second) && second <= 60))
    return false;
  if (r.one_of(".")) {
    if (!r.digit())
      return false;
    while (r.digit())
      ++r.at;
  }
  int offset = 0; // minutes east of UTC
  if (!r.one_of("Zz")) {
    bool west = r.at < r.text.size() && r.text[r.at] == '-';
    int oh = 0, om = 0;
    if (!(r.one_of("+-") && r.digits(2, oh) && oh <= 23 && r.one_of(":")
          && r.digits(2, om) && om <= 59))
      return false;
    offset = (west ? -1 : 1) * (oh * 60 + om);
  }
  if (second == 60) {
    int utc = ((hour * 60 + minute - offset) % 1440 + 1440) % 1440;
    if (utc != 23 * 60 + 59)
      return false;
  }
  return true;
}

/// dotted-quad (RFC 2673 §3.2): four decimal octets, no leading zeros.
bool ipv4(std::string_view text) {
  reader r{text};
  for (int i = 0; i < 4; ++i) {
    if (i > 0 && !r.one_of("."))
      return false;
    size_t start = r.at;
    int value = 0;
    while (r.digit() && r.at - start < 3)
      value = value * 10 + (text[r.at++] - '0');
    size_t n = r.at - start;
    if (n == 0 || (n > 1 && text[start] == '0') || value > 255)
      return false;
  }
  return r.done();
}

/// RFC 4122's 8-4-4-4-12 hexadecimal digits (any version).
bool uuid(std::string_view text) {
  if (text.size() != 36)
    return false;
  for (size_t i = 0; i < text.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !is_hex_digit(text[i]))
      return false;
  }
  return true;
}

bool alnum(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

/// RFC 1123 §2.1: dot-separated labels of letters, digits and hyphens,
/// neither starting nor ending with a hyphen, at most 63 bytes each and 253
/// in all.
bool hostname(std::string_view text) {
  if (text.empty() || text.size() > 253)
    return false;
  return each_label(text, [](std::string_view label) {
    if (label.empty() || label.size() > 63 || label.front() == '-'
        || label.back() == '-')
      return false;
    for (char c : label)
      if (!alnum(c) && c != '-')
        return false;
    return true;
  });
}

/// RFC 5321 §4.1.2's Mailbox, ASCII: a dot-atom or quoted local part of at
/// most 64 bytes, "@", a hostname or an address literal ([192.0.2.1],
/// [IPv6:2001:db8::1]).
bool email(std::string_view text) {
  auto at = text.rfind('@');
  if (at == std::string_view::npos || at == 0 || at > 64)
    return false;
  auto local = text.substr(0, at);
  auto domain = text.substr(at + 1);
  if (local.size() >= 2 && local.front() == '"' && local.back() == '"') {
    for (size_t i = 1; i + 1 < local.size(); ++i) {
      auto c = static_cast<unsigned char>(local[i]);
      if (c == '\\' && i + 2 < local.size())
        ++i; // a quoted pair
      else if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
        return false;
    }
  } else {
    static constexpr std::string_view atext = "!#$%&'*+-/=?^_`{|}~";
    bool after_dot = true;
    for (char c : local) {
      if (c == '.') {
        if (after_dot)
          return false;
        after_dot = true;
      } else if (alnum(c) || atext.find(c) != std::string_view::npos) {
        after_dot = false;
      } else {
        return false;
      }
    }
    if (after_dot)
      return false;
  }
  if (domain.size() > 2 && domain.front() == '[' && domain.back() == ']') {
    auto literal = domain.substr(1, domain.size() - 2);
    return literal.rfind("IPv6:", 0) == 0 ? ipv6(literal.substr(5))
                                          : ipv4(literal);
  }
  return hostname(domain);
}

/// ISO 8601's duration (RFC 3339 appendix A): P, then date components in
/// the order Y M D, or W alone, then T and time components in the order
/// H M S; numbers of digits, the last one may have a fraction (PT0.5S).
bool duration(std::string_view text) {
  reader r{text};
  if (!r.one_of("P"))
    return false;
  bool fraction = false; // nothing may follow a fraction
  size_t parts = 0;
  bool week = false;
  // One component whose unit is in `units` at or after `next`: 1 read,
  // 0 none here, -1 malformed.
  auto component = [&](std::string_view units, size_t& next) {
    if (!r.digit())
      return 0;
    if (fraction)
      return -1;
    while (r.digit())
      ++r.at;
    if (r.one_of(".,")) {
      if (!r.digit())
        return -1;
      while (r.digit())
        ++r.at;
      fraction = true;
    }
    auto unit = r.done() ? std::string_view::npos
                         : units.find(text[r.at], next);
    if (unit == std::string_view::npos)
      return -1;
    week = week || units[unit] == 'W';
    ++r.at;
    next = unit + 1;
    ++parts;
    return 1;
  };
  size_t next = 0;
  int got = 0;
  while ((got = component("YMWD", next)) == 1) {
  }
  if (got < 0 || (week && parts > 1))
    return false;
  if (r.one_of("T")) {
    size_t date_parts = parts;
    next = 0;
    while ((got = component("HMS", next)) == 1) {
    }
    if (got < 0 || parts == date_parts || week)
      return false;
  }
  return parts > 0 && r.done();
}

bool is_date(std::string_view text) {
  reader r{text};
  return full_date(r) && r.done();
}

bool is_time(std::string_view text) {
  reader r{text};
  return full_time(r) && r.done();
}

bool is_date_time(std::string_view text) {
  reader r{text};
  return full_date(r) && r.one_of("Tt") && full_time(r) && r.done();
}

/// A format pgw checks: its reader and what it is, in words. Readers of a
/// family of formats (`uri_format`, `idn_format`) are `named`: they are
/// given the format's name too.
struct known_format {
  std::string_view name;
  bool (*valid)(std::string_view);
  const char* words;
  bool (*named)(std::string_view format, std::string_view text) = nullptr;
};

constexpr known_format known_formats[] = {
  {"date", is_date,
   "String should be a valid date (RFC 3339 full-date: YYYY-MM-DD, a day "
   "the month has)"},
  {"time", is_time,
   "String should be a valid time (RFC 3339 full-time: HH:MM:SS, optional "
   ".fraction, then Z or +HH:MM or -HH:MM)"},
  {"date-time", is_date_time,
   "String should be a valid date-time (RFC 3339: YYYY-MM-DDTHH:MM:SS, "
   "optional .fraction, then Z or +HH:MM or -HH:MM)"},
  {"email", email,
   "String should be a valid email address (local-part@domain, RFC 5321, "
   "ASCII: no spaces, one @ outside quotes, a domain of letters, digits "
   "and hyphens)"},
  {"hostname", hostname,
   "String should be a valid hostname (RFC 1123: dot-separated labels of "
   "letters, digits and hyphens, at most 63 bytes each, 253 in all)"},
  {"ipv4", ipv4,
   "String should be a valid IPv4 address (four decimal numbers 0-255 "
   "joined by dots, without leading zeros)"},
  {"ipv6", ipv6,
   "String should be a valid IPv6 address (RFC 4291 text form, no zone "
   "index)"},
  {"uuid", uuid,
   "String should be a valid UUID (8-4-4-4-12 hexadecimal digits)"},
  {"duration", duration,
   "String should be a valid duration (ISO 8601: P1Y2M3D, PT1H30M, PT0.5S "
   "or P2W)"},
  // Draft 7's references (actors/structured_uri.cpp).
  {"uri", nullptr,
   "String should be a valid URI (RFC 3986: a scheme such as https: first, "
   "then only characters a URI may hold, others percent-encoded as %XX)",
   uri_format},
  {"uri-reference", nullptr,
   "String should be a valid URI reference (RFC 3986: a URI, or a relative "
   "reference such as /a/b?c=d; only characters a URI may hold, others "
   "percent-encoded as %XX)",
   uri_format},
  {"iri", nullptr,
   "String should be a valid IRI (RFC 3987: a URI that may also hold "
   "non-ASCII characters, with a scheme such as https: first)",
   uri_format},
  {"iri-reference", nullptr,
   "String should be a valid IRI reference (RFC 3987: an IRI, or a "
   "relative reference that may hold non-ASCII characters)",
   uri_format},
  {"uri-template", nullptr,
   "String should be a valid URI template (RFC 6570: literals and closed "
   "{expressions} naming variables, such as /users/{id}{?page})",
   uri_format},
  {"json-pointer", nullptr,
   "String should be a valid JSON pointer (RFC 6901: empty, or tokens each "
   "after a /, with ~ written ~0 and / written ~1)",
   uri_format},
  {"relative-json-pointer", nullptr,
   "String should be a valid relative JSON pointer (a non-negative integer "
   "without leading zeros, then # or a JSON pointer)",
   uri_format},
  // Internationalized (actors/structured_idn.cpp).
  {"idn-hostname", nullptr,
   "String should be a valid internationalized hostname (RFC 5890: "
   "dot-separated labels of letters, digits and hyphens in any script that "
   "IDNA2008 allows, in Unicode NFC; at most 63 bytes a label and 253 in "
   "all once punycode-encoded)",
   idn_format},
  {"idn-email", nullptr,
   "String should be a valid internationalized email address (RFC 6531: "
   "local-part@domain as in RFC 5321, where the local part may also hold "
   "non-ASCII characters and the domain is an internationalized hostname)",
   idn_format},
  {"regex", ecma_regex,
   "String should be a valid regular expression (ECMA-262: parentheses and "
   "brackets closed, a quantifier after something it repeats, ranges in "
   "order, no trailing backslash)"},
};

} // namespace

std::optional<std::string> format_problem(std::string_view format,
                                          std::string_view text) {
  for (auto& f : known_formats)
    if (format == f.name)
      return (f.named ? f.named(f.name, text) : f.valid(text))
               ? std::nullopt
               : std::optional<std::string>(f.words);
  return std::nullopt;
}

} // namespace pgw
