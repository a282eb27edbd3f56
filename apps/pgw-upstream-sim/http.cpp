#include "apps/pgw-upstream-sim/http.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

namespace pgw::sim::detail {

namespace {

// The simulator plays the upstream and links none of the runtime it tests:
// its header-name compare and JSON escaping (append_json_string, below)
// repeat transport/upstream_exchange's and backends/cache_key's on purpose
// (duplicates pairs them), so that one bug cannot hide on both sides.
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i]))
        != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

/// True when the comma-separated header value contains `token`.
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    auto comma = value.find(',');
    auto item = trim(value.substr(0, comma));
    if (iequals(item, token))
      return true;
    if (comma == std::string_view::npos)
      break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

} // namespace

std::string parse_request_head(std::string_view head, request_head& out) {
  out = request_head{};
  auto eol = head.find("\r\n");
  auto line = head.substr(0, eol);
  auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0)
    return "malformed request line";
  auto sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1)
    return "malformed request line";
  out.method = std::string(line.substr(0, sp1));
  auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  auto version = line.substr(sp2 + 1);
  if (version == "HTTP/1.1")
    out.minor_version = 1;
  else if (version == "HTTP/1.0")
    out.minor_version = 0;
  else
    return "unsupported HTTP version";
  out.path = std::string(target.substr(0, target.find('?')));
  bool conn_close = false, conn_keep_alive = false;
  auto rest = eol == std::string_view::npos ? std::string_view{}
                                            : head.substr(eol + 2);
  while (!rest.empty()) {
    auto end = rest.find("\r\n");
    auto h = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{}
                                         : rest.substr(end + 2);
    if (h.empty())
      continue;
    auto colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return "malformed header line";
    auto name = h.substr(0, colon);
    auto value = trim(h.substr(colon + 1));
    if (iequals(name, "content-length")) {
      if (value.empty() || value.size() > 18)
        return "bad Content-Length";
      size_t n = 0;
      for (char c : value) {
        if (c < '0' || c > '9')
          return "bad Content-Length";
        n = n * 10 + static_cast<size_t>(c - '0');
      }
      if (out.content_length && *out.content_length != n)
        return "conflicting Content-Length headers";
      out.content_length = n;
    } else if (iequals(name, "transfer-encoding")) {
      out.has_transfer_encoding = true;
    } else if (iequals(name, "connection")) {
      conn_close = conn_close || has_token(value, "close");
      conn_keep_alive = conn_keep_alive || has_token(value, "keep-alive");
    } else if (iequals(name, "expect")) {
      out.expect_continue = iequals(value, "100-continue");
    } else if (iequals(name, "authorization")) {
      out.authorization = std::string(value);
      auto scheme_end = value.find(' ');
      if (scheme_end != std::string_view::npos
          && iequals(value.substr(0, scheme_end), "bearer")
          && !trim(value.substr(scheme_end + 1)).empty())
        out.has_bearer = true;
    }
  }
  out.keep_alive = out.minor_version == 1 ? !conn_close : conn_keep_alive;
  return {};
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 529: return "Site Overloaded";
    default: return "Unknown";
  }
}

std::string response_head(int status, std::string_view content_type,
                          std::optional<size_t> content_length, bool close,
                          std::string_view extra) {
  std::string out;
  out.reserve(160 + extra.size());
  fmt::format_to(std::back_inserter(out), "HTTP/1.1 {} {}\r\n", status,
                 reason_phrase(status));
  if (!content_type.empty()) {
    out += "Content-Type: ";
    out += content_type;
    out += "\r\n";
  }
  if (content_length)
    fmt::format_to(std::back_inserter(out), "Content-Length: {}\r\n",
                   *content_length);
  else
    out += "Transfer-Encoding: chunked\r\n";
  if (close)
    out += "Connection: close\r\n";
  out += extra;
  out += "\r\n";
  return out;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        else
          out += ch;
    }
  }
  out += '"';
}

void append_chunk(std::string& out, std::string_view payload) {
  fmt::format_to(std::back_inserter(out), "{:x}\r\n", payload.size());
  out += payload;
  out += "\r\n";
}

} // namespace pgw::sim::detail
