#include "apps/cli/request_frame.hpp"

#include "transport/upstream_exchange.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace pgw::cli {

namespace {

constexpr auto npos = std::string_view::npos;

/// The longest chunk-size line (size and extensions) accepted.
constexpr size_t max_chunk_line = 1024;

bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    return true;
  for (char t : std::string_view{"!#$%&'*+-.^_`|~"})
    if (c == static_cast<unsigned char>(t))
      return true;
  return false;
}

bool is_token(std::string_view s) {
  if (s.empty())
    return false;
  for (unsigned char c : s)
    if (!is_tchar(c))
      return false;
  return true;
}

unsigned char lower(unsigned char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<unsigned char>(c + 32) : c;
}

std::string_view trim(std::string_view s) {
  auto first = s.find_first_not_of(" \t");
  if (first == npos)
    return {};
  return s.substr(first, s.find_last_not_of(" \t") + 1 - first);
}

/// A Host field's value is `uri-host [":" port]` (RFC 3986 §3.2.2): the
/// characters of a name, an address (IPv6 in brackets) and a port; empty
/// is allowed (RFC 9110 §7.2).
bool is_host(std::string_view value) {
  for (unsigned char c : value) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                 || (c >= '0' && c <= '9');
    if (!alnum
        && std::string_view{"-._~!$&'()*+,;=:[]%"}.find(static_cast<char>(c))
             == npos)
      return false;
  }
  return true;
}

/// A Connection field's value lists `option` (its options are
/// comma-separated tokens, compared in any case).
bool lists_option(std::string_view value, std::string_view option) {
  while (!value.empty()) {
    auto comma = value.find(',');
    if (same_header_name(trim(value.substr(0, comma)), option))
      return true;
    if (comma == std::string_view::npos)
      break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

/// Up to 40 bytes of client text for a message, unprintable bytes as '?'.
std::string shown(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s.substr(0, 40))
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  out += s.size() > 40 ? "...\"" : "\"";
  return out;
}

request_frame refuse(int status, std::string reason) {
  request_frame out;
  out.what = request_frame::state::bad;
  out.status = status;
  out.reason = std::move(reason);
  return out;
}

/// 1*DIGIT (a Content-Length) or 1*HEXDIG (a chunk size), at most
/// `max_digits` digits so that it fits.
std::optional<uint64_t> number(std::string_view s, int base, size_t max_digits) {
  if (s.empty() || s.size() > max_digits)
    return std::nullopt;
  uint64_t n = 0;
  for (unsigned char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (base == 16 && lower(c) >= 'a' && lower(c) <= 'f')
      d = lower(c) - 'a' + 10;
    else
      return std::nullopt;
    n = n * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  return n;
}

std::string too_large(uint64_t bytes, size_t max_body) {
  return "the request body is " + std::to_string(bytes)
         + " bytes, more than PGW_SERVE_MAX_BODY_BYTES ("
         + std::to_string(max_body) + ")";
}

std::string head_too_large(size_t max_head) {
  return "the request head is larger than " + std::to_string(max_head)
         + " bytes";
}

/// The bytes of an unfinished line from `at` on, not counting a CR that
/// ends them (its LF may be in the next read): a line of exactly the limit
/// is not refused when a read happens to end between its CR and LF.
size_t so_far(std::string_view in, size_t at) {
  auto n = in.size() - at;
  return n > 0 && in.back() == '\r' ? n - 1 : n;
}

/// Where a chunked body ends, scanned from `cursor` on (moved past each
/// whole chunk, so that the next call starts at the first one not yet
/// whole): whole (and where), bad, or partial.
request_frame frame_chunks(std::string_view in, chunk_cursor& cursor,
                           size_t max_head, size_t max_body) {
  request_frame out;
  for (;;) {
    auto at = cursor.at;
    auto eol = in.find("\r\n", at);
    if (eol == npos ? so_far(in, at) > max_chunk_line
                    : eol - at > max_chunk_line)
      return refuse(400, "a chunk-size line is longer than "
                           + std::to_string(max_chunk_line) + " bytes");
    if (eol == npos)
      return out;
    auto line = in.substr(at, eol - at);
    // A bare LF ends the line for a parser that takes it as a line end
    // (cpp-httplib does): the chunk's data would start elsewhere for it.
    for (unsigned char c : line)
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return refuse(400, "a chunk-size line holds a control byte (a bare "
                           "CR or LF, say): " + shown(line));
    auto digits = line.substr(0, line.find(';'));
    digits = digits.substr(0, digits.find_last_not_of(" \t") + 1);
    auto size = number(digits, 16, 15);
    if (!size)
      return refuse(400, "the chunk size " + shown(digits)
                           + " is not a hexadecimal number");
    auto data = eol + 2;
    if (*size == 0) {
      // The trailer section: field lines up to a blank line, bounded as a
      // head is.
      for (auto field = data;;) {
        auto end = in.find("\r\n", field);
        if ((end == npos ? so_far(in, data) : end - data) > max_head)
          return refuse(431, "the trailer section is larger than "
                               + std::to_string(max_head) + " bytes");
        if (end == npos)
          return out;
        if (end == field) {
          out.what = request_frame::state::whole;
          out.bytes = end + 2;
          out.trailer_at = data;
          return out;
        }
        field = end + 2;
      }
    }
    if (cursor.total + *size > max_body)
      return refuse(413, too_large(cursor.total + *size, max_body));
    if (in.size() - data < *size + 2)
      return out;
    if (in.substr(data + *size, 2) != "\r\n")
      return refuse(400, "a chunk's data is not followed by CRLF");
    cursor.total += *size;
    cursor.at = data + *size + 2;
  }
}

} // namespace

request_frame frame_request(std::string_view in, size_t max_head,
                            size_t max_body, chunk_cursor* cursor) {
  request_frame out;
  // Each check below judges the bytes a read of any size would have
  // judged first, so that whether and why a request is refused does not
  // depend on where the reads ended: nothing at or past offset `max_head`
  // is looked at in a head that does not end before it (431).
  // The request line, judged as soon as it is complete.
  auto eol = in.find("\r\n");
  if (eol != npos && eol + 1 > max_head)
    eol = npos; // its LF comes after the head's limit
  // A head with bare LF line ends would never complete here (it waited for
  // the read timeout): refused as soon as the LF comes.
  auto head_end = in.find("\r\n\r\n");
  auto head_part = in.substr(0, std::min({head_end, in.size(), max_head + 1}));
  for (auto lf = head_part.find('\n'); lf != npos;
       lf = head_part.find('\n', lf + 1))
    if (lf == 0 || head_part[lf - 1] != '\r') {
      auto from = lf == 0 ? npos : head_part.rfind('\n', lf - 1);
      from = from == npos ? 0 : from + 1;
      return refuse(400, "a line of the request head ends in a bare LF "
                         "(CRLF is required): "
                         + shown(head_part.substr(from, lf - from)));
    }
  if (eol == npos)
    return in.size() > max_head ? refuse(431, head_too_large(max_head)) : out;
  auto line = in.substr(0, eol);
  auto sp1 = line.find(' ');
  auto sp2 = sp1 == npos ? npos : line.find(' ', sp1 + 1);
  bool line_ok = sp2 != npos && line.find(' ', sp2 + 1) == npos
                 && is_token(line.substr(0, sp1)) && sp2 > sp1 + 1;
  if (line_ok)
    for (unsigned char c : line.substr(sp1 + 1, sp2 - sp1 - 1))
      line_ok = line_ok && c > 0x20 && c != 0x7f;
  auto version = line_ok ? line.substr(sp2 + 1) : std::string_view{};
  if (!line_ok || (version != "HTTP/1.1" && version != "HTTP/1.0"))
    return refuse(400, "the request line is not `METHOD target HTTP/1.1`: "
                         + shown(line));
  auto end = in.find("\r\n\r\n", eol);
  if (end == npos ? in.size() > max_head : end + 4 > max_head)
    return refuse(431, head_too_large(max_head));
  if (end == npos)
    return out;
  out.head_bytes = end + 4;

  std::optional<uint64_t> length;
  int codings = 0;
  int authorizations = 0;
  int hosts = 0;
  std::string_view host;
  bool expects_continue = false;
  bool close_option = false;
  bool keep_alive_option = false;
  for (auto at = eol + 2; at < end + 2;) {
    auto next = in.find("\r\n", at);
    auto field = in.substr(at, next - at);
    at = next + 2;
    if (field.front() == ' ' || field.front() == '\t')
      return refuse(400, "a header line starts with white space (obsolete "
                         "line folding): " + shown(field));
    if (field.find_first_of(std::string_view{"\r\n\0", 3}) != npos)
      return refuse(400, "a header line holds a bare CR, LF or NUL: "
                           + shown(field));
    auto colon = field.find(':');
    auto name = field.substr(0, colon);
    if (colon == npos || !is_token(name))
      return refuse(400, "a header line is not `Name: value`: "
                           + shown(field));
    auto value = trim(field.substr(colon + 1));
    if (same_header_name(name, "Content-Length")) {
      auto n = number(value, 10, 19);
      if (!n)
        return refuse(400, "Content-Length " + shown(value)
                             + " is not a number of bytes");
      if (length && *length != *n)
        return refuse(400, "conflicting Content-Length headers ("
                             + std::to_string(*length) + " and "
                             + std::to_string(*n) + ")");
      length = n;
    } else if (same_header_name(name, "Transfer-Encoding")) {
      if (!same_header_name(value, "chunked"))
        return refuse(501, "Transfer-Encoding " + shown(value)
                             + " is not supported (only chunked)");
      ++codings;
    } else if (same_header_name(name, "Authorization")) {
      ++authorizations;
    } else if (same_header_name(name, "Host")) {
      ++hosts;
      host = value;
    } else if (same_header_name(name, "Expect")
               && same_header_name(value, "100-continue")) {
      expects_continue = true;
    } else if (same_header_name(name, "Connection")) {
      close_option = close_option || lists_option(value, "close");
      keep_alive_option = keep_alive_option
                          || lists_option(value, "keep-alive");
    }
  }
  if (codings > 1)
    return refuse(400, "Transfer-Encoding chunked is given more than once");
  if (authorizations > 1)
    return refuse(400, "the Authorization header is given more than once "
                       "(which key counts would be ambiguous)");
  if (codings == 1 && length)
    return refuse(400, "both Content-Length and Transfer-Encoding are given "
                       "(where the body ends would be ambiguous)");
  if (codings == 1 && version == "HTTP/1.0")
    return refuse(400, "Transfer-Encoding in an HTTP/1.0 request");
  // RFC 9112 §3.2: an HTTP/1.1 request names its host once, as a host.
  if (hosts > 1)
    return refuse(400, "the Host header is given more than once (which "
                       "host is meant would be ambiguous)");
  if (hosts == 0 && version == "HTTP/1.1")
    return refuse(400, "the Host header is missing (an HTTP/1.1 request "
                       "must name its host)");
  if (!is_host(host))
    return refuse(400, "the Host header " + shown(host)
                         + " is not a host name or address with an "
                           "optional port");
  out.close = close_option || (version == "HTTP/1.0" && !keep_alive_option);

  if (codings == 1) {
    chunk_cursor fresh;
    auto& scan = cursor != nullptr ? *cursor : fresh;
    if (scan.at < out.head_bytes)
      scan = chunk_cursor{out.head_bytes, 0};
    auto body = frame_chunks(in, scan, max_head, max_body);
    if (body.what == request_frame::state::bad)
      return body;
    out.what = body.what;
    out.bytes = body.bytes;
    out.trailer_at = body.trailer_at;
  } else {
    out.no_length = !length;
    auto n = length.value_or(0);
    if (n > max_body)
      return refuse(413, too_large(n, max_body));
    if (in.size() - out.head_bytes >= n) {
      out.what = request_frame::state::whole;
      out.bytes = out.head_bytes + n;
    }
  }
  // No 1xx answer to an HTTP/1.0 client (RFC 9110 §10.1.1, §15.2).
  out.expects_continue = expects_continue && version == "HTTP/1.1"
                         && out.what == request_frame::state::partial;
  return out;
}

size_t to_origin_form(std::string& in) {
  auto eol = in.find("\r\n");
  auto sp1 = in.find(' ');
  if (sp1 == npos || sp1 >= eol)
    return 0;
  auto line = std::string_view{in}.substr(0, eol);
  auto target = line.substr(sp1 + 1);
  target = target.substr(0, target.find(' '));
  auto sep = target.find("://");
  if (sep == npos)
    return 0;
  auto scheme = target.substr(0, sep);
  if (!same_header_name(scheme, "http") && !same_header_name(scheme, "https"))
    return 0;
  auto path = target.find_first_of("/?", sep + 3);
  auto cut = path == npos ? target.size() : path;
  bool slash = path == npos || target[path] == '?';
  in.replace(sp1 + 1, cut, slash ? "/" : "");
  return slash ? cut - 1 : cut;
}

} // namespace pgw::cli
