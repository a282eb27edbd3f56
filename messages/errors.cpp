#include "messages/errors.hpp"

#include <caf/message.hpp>

#include <algorithm>

namespace pgw {

namespace {

struct code_name {
  error_code code;
  const char* name;
};

constexpr code_name code_names[] = {
  {error_code::request_rejected, "request_rejected"},
  {error_code::retry_exhausted, "retry_exhausted"},
  {error_code::stalled, "stalled"},
  {error_code::circuit_open, "circuit_open"},
  {error_code::quota_exhausted, "quota_exhausted"},
  {error_code::call_deadline_exceeded, "call_deadline_exceeded"},
  {error_code::governance_unavailable, "governance_unavailable"},
  {error_code::cancelled, "cancelled"},
  {error_code::invalid_request, "invalid_request"},
  {error_code::invalid_config, "invalid_config"},
  {error_code::internal, "internal"},
  {error_code::result_invalid, "result_invalid"},
  {error_code::stream_interrupted, "stream_interrupted"},
};

} // namespace

const char* to_string(error_code x) {
  for (auto& entry : code_names)
    if (entry.code == x)
      return entry.name;
  return "unknown";
}

bool from_string(const std::string& name, error_code& x) {
  for (auto& entry : code_names)
    if (name == entry.name) {
      x = entry.code;
      return true;
    }
  return false;
}

bool is_unavailable_family(error_code x) {
  switch (x) {
    case error_code::retry_exhausted:
    case error_code::stalled:
    case error_code::circuit_open:
    case error_code::quota_exhausted:
      return true;
    default:
      return false;
  }
}

std::string one_line(std::string text) {
  for (auto& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\x7f')
      c = ' ';
  return text;
}

caf::error make_error(error_code code, error_detail detail) {
  // Every printer (plain, --json, serve) shows upstream text on one line.
  detail.upstream_code = one_line(std::move(detail.upstream_code));
  detail.upstream_message = one_line(std::move(detail.upstream_message));
  for (auto& [source, e] : detail.sources)
    e.message = one_line(std::move(e.message));
  return caf::error{static_cast<uint8_t>(code), caf::atom("pgw"),
                    caf::make_message(std::move(detail))};
}

caf::error make_error(error_code code, std::string message) {
  error_detail detail;
  detail.message = std::move(message);
  return make_error(code, std::move(detail));
}

caf::error with_spent(const caf::error& err, const spent_by_source& spent) {
  auto* d = detail_of(err);
  auto code = code_of(err);
  if (d == nullptr || !code || spent.empty())
    return err;
  auto detail = *d;
  for (auto& [source, w] : spent)
    add_spent(detail.spent, source, w);
  return make_error(*code, std::move(detail));
}

caf::optional<error_code> code_of(const caf::error& err) {
  if (!err || err.category() != caf::atom("pgw"))
    return caf::none;
  return static_cast<error_code>(err.code());
}

const error_detail* detail_of(const caf::error& err) {
  if (!code_of(err))
    return nullptr;
  auto& ctx = err.context();
  if (ctx.size() != 1 || !ctx.match_element<error_detail>(0))
    return nullptr;
  return &ctx.get_as<error_detail>(0);
}

namespace {

/// A source's line without its name: "unauthorized (401 \"…\")".
std::string line_of(const source_error& x) {
  if (!x.doing.empty())
    return x.doing;
  std::string out = x.reason.empty() ? "unknown" : x.reason;
  if (x.http_status != 0 || !x.message.empty()) {
    out += " (";
    if (x.http_status != 0)
      out += std::to_string(x.http_status);
    if (!x.message.empty()) {
      if (x.http_status != 0)
        out += ' ';
      // One line, bounded: the message came from an upstream.
      out += '"' + one_line(x.message.substr(0, 200)) + '"';
    }
    out += ')';
  }
  return out;
}

} // namespace

std::string describe(const std::string& source, const source_error& x) {
  return source + ": " + line_of(x);
}

source_error after_skip(const source_error& last, const std::string& reason,
                        const std::string& why) {
  source_error e{reason, 0, {}, {}};
  auto words = reason; // "circuit open after ...", "quota full, ..."
  std::replace(words.begin(), words.end(), '_', ' ');
  if (reason == "quota")
    words = "quota full";
  if (!why.empty()) {
    e.doing = words + ", " + why;
  } else if (last.http_status != 0 || !last.message.empty()) {
    e.http_status = last.http_status;
    e.message = last.message;
    // A source skipped again (every admission pass of a wait skips it):
    // what it was skipped after, once — not "cooling after cooling after".
    auto cause = line_of(last);
    bool skipped = last.reason == "cooling" || last.reason == "circuit_open"
                   || last.reason == "quota";
    if (auto at = last.doing.find(" after ");
        skipped && at != std::string::npos)
      cause = last.doing.substr(at + 7);
    e.doing = words + " after " + cause;
  }
  return e;
}

std::string describe(const std::map<std::string, source_error>& sources) {
  std::string out;
  for (auto& [source, e] : sources) {
    if (!out.empty())
      out += "; ";
    out += describe(source, e);
  }
  return out;
}

std::string words_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : describe(err);
}

std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  if (auto code = code_of(err)) {
    std::string out = to_string(*code);
    if (auto detail = detail_of(err); detail && !detail->message.empty()) {
      out += ": ";
      out += detail->message;
    }
    return out;
  }
  return to_string(err);
}

} // namespace pgw
