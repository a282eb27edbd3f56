#include "transport/classify.hpp"

#include "config/json_text.hpp"
#include "config/scrub.hpp"

#include <boost/json.hpp>
#include <openssl/x509_vfy.h>

#include <cstdint>
#include <optional>
#include <string_view>

namespace pgw {

namespace {

namespace json = boost::json;

constexpr size_t max_message_bytes = 500;
constexpr size_t max_reason_code_bytes = 64;

// -- text helpers -------------------------------------------------------------

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z')
      c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string_view trim(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  };
  while (!s.empty() && space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && space(s.back()))
    s.remove_suffix(1);
  return s;
}

/// At most `max` bytes of `s`, never cutting a UTF-8 sequence in half.
std::string truncate_utf8(std::string_view s, size_t max) {
  if (s.size() <= max)
    return std::string(s);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;
  return std::string(s.substr(0, cut));
}

/// A code fit for a machine reason: bounded, printable, no spaces.
std::string reason_code(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, max_reason_code_bytes)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out;
}

// -- the error object ---------------------------------------------------------

/// What an upstream error said, whatever its shape.
struct error_fields {
  std::string message;
  std::string code; ///< string code, or a number's decimal text
  std::string type;
  std::optional<int64_t> numeric_status; ///< a numeric `status` or `code`
};

std::optional<int64_t> as_status(const json::value& v) {
  int64_t n = 0;
  if (v.is_int64())
    n = v.get_int64();
  else if (v.is_uint64() && v.get_uint64() < 1000)
    n = static_cast<int64_t>(v.get_uint64());
  else
    return std::nullopt;
  if (n < 100 || n > 599)
    return std::nullopt;
  return n;
}

std::string text_of(const json::value& v) {
  if (v.is_string())
    return std::string(v.get_string());
  if (v.is_null())
    return {};
  return json_text(v);
}

/// Reads `message`, `code`, `type` and a numeric status from an error object
/// (or from a bare string, which is the message).
void read_error_value(const json::value& v, error_fields& f) {
  if (v.is_string()) {
    f.message = std::string(v.get_string());
    return;
  }
  if (!v.is_object()) {
    f.message = text_of(v);
    return;
  }
  auto& obj = v.get_object();
  if (auto m = obj.if_contains("message"))
    f.message = text_of(*m);
  else if (auto d = obj.if_contains("detail"))
    f.message = text_of(*d);
  if (auto t = obj.if_contains("type"); t && t->is_string())
    f.type = std::string(t->get_string());
  if (auto c = obj.if_contains("code")) {
    if (c->is_string())
      f.code = std::string(c->get_string());
    else if (c->is_number())
      f.code = json_text(*c);
    if (auto st = as_status(*c))
      f.numeric_status = st;
  }
  if (auto s = obj.if_contains("status")) {
    if (auto st = as_status(*s))
      f.numeric_status = st;
  }
}

/// The fields of a whole HTTP error body: `{"error": …}`, a bare object with
/// `message`/`code`, or any other text (kept as the message).
error_fields read_error_body(const std::string& body) {
  error_fields f;
  json::error_code ec;
  auto v = json::parse(body, ec);
  if (ec) {
    f.message = std::string(trim(body));
    return f;
  }
  if (v.is_object()) {
    auto& obj = v.get_object();
    auto e = obj.if_contains("error");
    if (e && !e->is_null()) {
      read_error_value(*e, f);
      if (f.message.empty())
        if (auto m = obj.if_contains("message"))
          f.message = text_of(*m);
      return f;
    }
  }
  read_error_value(v, f);
  return f;
}

// -- rules --------------------------------------------------------------------

bool has_code(const error_fields& f, std::string_view name) {
  return f.code == name || f.type == name;
}

/// The named code the upstream gave, or empty.
std::string named_code(const error_fields& f) {
  for (std::string_view name :
       {"content_policy_violation", "context_length_exceeded",
        "insufficient_quota", "model_not_found"})
    if (has_code(f, name))
      return std::string(name);
  return {};
}

bool says_context_exceeded(const error_fields& f) {
  auto m = lowercase(f.message);
  if (contains(m, "context_length_exceeded") || contains(m, "prompt is too long"))
    return true;
  return (contains(m, "context length") || contains(m, "maximum context")
          || contains(m, "context window"))
         && (contains(m, "exceed") || contains(m, "maximum")
             || contains(m, "too long") || contains(m, "too many"));
}

bool says_model_missing(const error_fields& f) {
  auto m = lowercase(f.message);
  if (contains(m, "model_not_found"))
    return true;
  return contains(m, "model")
         && (contains(m, "does not exist") || contains(m, "not found")
             || contains(m, "not exist") || contains(m, "no such model")
             || contains(m, "unknown model"));
}

/// The outcome of an HTTP status with what its body said.
outcome outcome_for_status(int64_t status, const error_fields& f) {
  switch (status) {
    case 400:
      return has_code(f, "context_length_exceeded") || says_context_exceeded(f)
               ? outcome::source_rejected
               : outcome::request_rejected;
    case 404:
      return has_code(f, "model_not_found") || says_model_missing(f)
               ? outcome::source_rejected
               : outcome::request_rejected;
    case 413:
      return outcome::source_rejected;
    case 401:
    case 402:
    case 403:
      return outcome::source_dead;
    case 429:
      return has_code(f, "insufficient_quota") ? outcome::source_dead
                                               : outcome::rate_limited;
    case 408:
    case 409:
    case 425:
      return outcome::transient;
    default:
      if (status >= 300 && status <= 399) // a redirect is never followed
        return outcome::source_rejected;
      return status >= 400 && status <= 499 ? outcome::request_rejected
                                            : outcome::transient;
  }
}

std::string reason_for_status(int64_t status, const error_fields& f) {
  if (status >= 300 && status <= 399)
    return "redirect";
  auto named = named_code(f);
  if (!named.empty())
    return named;
  // A wrong key must not read as an outage (SPEC §12).
  if (status == 401)
    return "unauthorized";
  if (status == 403)
    return "forbidden";
  return "http_" + std::to_string(status);
}

bool is_rate_limit_code(const std::string& code) {
  auto c = lowercase(code);
  return contains(c, "rate_limit") || c == "too_many_requests"
         || c == "rate_limited";
}

/// The outcome a stream error's code or type string names, if it names one.
std::optional<outcome> outcome_for_code(const std::string& code) {
  if (code.empty())
    return std::nullopt;
  if (is_rate_limit_code(code))
    return outcome::rate_limited;
  if (code == "insufficient_quota")
    return outcome::source_dead;
  if (code == "context_length_exceeded")
    return outcome::source_rejected;
  if (code == "content_policy_violation" || code == "invalid_request_error")
    return outcome::request_rejected;
  return std::nullopt;
}

/// Upstream text is scrubbed of secrets before anything keeps it (SPEC §12).
void fill_fields(const error_fields& f, attempt_result& out) {
  out.error_code = truncate_utf8(scrub(f.code.empty() ? f.type : f.code),
                                 max_message_bytes);
  out.error_message = truncate_utf8(scrub(f.message), max_message_bytes);
}

} // namespace

void classify_http_error(int status, const std::string& body,
                         attempt_result& out) {
  auto f = read_error_body(body);
  out.http_status = status;
  out.kind = outcome_for_status(status, f);
  out.reason = reason_for_status(status, f);
  fill_fields(f, out);
}

void classify_stream_error(const std::string& error_json, attempt_result& out) {
  error_fields f;
  json::error_code ec;
  auto v = json::parse(error_json, ec);
  if (ec)
    f.message = std::string(trim(error_json));
  else
    read_error_value(v, f);
  fill_fields(f, out);
  if (f.numeric_status) {
    out.kind = outcome_for_status(*f.numeric_status, f);
    out.reason = "stream_error:" + reason_for_status(*f.numeric_status, f);
    return;
  }
  std::optional<outcome> kind = outcome_for_code(f.code);
  if (!kind)
    kind = outcome_for_code(f.type);
  out.kind = kind ? *kind : outcome::transient;
  const std::string& code = !f.code.empty() ? f.code : f.type;
  out.reason = "stream_error:"
               + (code.empty() ? "unknown" : reason_code(scrub(code)));
}

std::string broken_framing(const std::string& what) {
  return "the upstream's HTTP response has " + what;
}

void classify_tls_failure(bool certificate_rejected, long verify_result,
                          attempt_result& out, const std::string& host) {
  out.upstream_reached = false;
  if (!certificate_rejected) {
    out.kind = outcome::transient;
    out.reason = "tls_handshake";
    return;
  }
  out.kind = outcome::source_dead;
  switch (verify_result) {
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
      out.reason = "tls_expired";
      break;
    case X509_V_OK:
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      out.reason = "tls_hostname_mismatch";
      break;
    default:
      out.reason = "tls_unknown_ca";
      break;
  }
  // A chain that verified (X509_V_OK) was refused by a name check of the
  // client's own (cpp-httplib's): OpenSSL's text for it would be "ok".
  if (out.reason == "tls_hostname_mismatch" && !host.empty())
    out.error_message = "certificate does not match host " + host;
  else if (verify_result == X509_V_OK)
    out.error_message = "certificate does not match the host name";
  else
    out.error_message = X509_verify_cert_error_string(verify_result);
}

} // namespace pgw
