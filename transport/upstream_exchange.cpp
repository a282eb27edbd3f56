#include "transport/upstream_exchange.hpp"

#include "config/limits.hpp"
#include "config/support/log.hpp"
#include "config/scrub.hpp"
#include "config/url.hpp"
#include "transport/classify.hpp"
#include "transport/inflater.hpp"
#include "transport/retry_after.hpp"
#include "transport/stream_relay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include <sys/socket.h>
#include <unistd.h>

namespace pgw {

namespace {

/// Room for the JSON envelope around a non-streamed answer.
constexpr size_t body_envelope_bytes = 64 * 1024;

std::string key_of(const source_config& src) {
  return src.scope + "/" + src.name;
}

} // namespace

bool same_header_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i]))
        != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

upstream_target target_of(const std::string& base_url) {
  upstream_target t;
  url_parts parts;
  parse_url(base_url, parts); // validated before any source exists
  t.tls = parts.scheme == "https";
  t.host = parts.host;
  t.port = parts.port ? *parts.port : t.tls ? 443 : 80;
  t.host_header = parts.authority();
  t.prefix = parts.path;
  while (!t.prefix.empty() && t.prefix.back() == '/')
    t.prefix.pop_back();
  return t;
}

std::string request_path(const upstream_target& target, upstream_kind kind) {
  switch (kind) {
    case upstream_kind::embeddings:
      return target.prefix + "/embeddings";
    case upstream_kind::ocr_text:
      return target.prefix + "/ocr/text";
    case upstream_kind::ocr_parse:
      return target.prefix + "/parse?return_type=content_list_json";
    default:
      return target.prefix + "/chat/completions";
  }
}

bool source_sets_header(const source_config& src, std::string_view name) {
  for (auto& kv : src.headers)
    if (same_header_name(kv.first, name))
      return true;
  return false;
}

std::vector<std::pair<std::string, std::string>>
request_headers(const upstream_call& call, const upstream_target& target) {
  auto& src = *call.source;
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(6 + src.headers.size());
  out.emplace_back("Host", target.host_header);
  out.emplace_back("Content-Type", call.content_type.empty()
                                     ? "application/json"
                                     : call.content_type);
  out.emplace_back("Accept",
                   call.stream ? "text/event-stream" : "application/json");
  out.emplace_back("User-Agent", "pgw/0.1");
  if (!source_sets_header(src, "Accept-Encoding"))
    out.emplace_back("Accept-Encoding", "identity");
  if (!src.api_key.empty())
    out.emplace_back("Authorization", "Bearer " + src.api_key);
  for (auto& kv : src.headers)
    out.emplace_back(kv.first, kv.second);
  return out;
}

bool is_local_exhaustion_errno(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

bool local_resources_exhausted() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ::close(fd);
    return false;
  }
  return is_local_exhaustion_errno(errno);
}

const char* reason_of(timeout_kind k) {
  switch (k) {
    case timeout_kind::total:
      return "total_timeout";
    case timeout_kind::ttft:
      return "ttft_timeout";
    case timeout_kind::idle:
      return "idle_timeout";
    case timeout_kind::connect:
      return "connect_timeout";
    case timeout_kind::handshake:
      return "tls_handshake";
    default:
      return "timeout";
  }
}

std::string handshake_timeout_message(const source_config& src) {
  return fmt::format("the TLS handshake did not finish within "
                     "CONNECT_TIMEOUT_S ({:g} s)",
                     src.connect_timeout_s);
}

// -- warnings -------------------------------------------------------------------

void transport_warnings::non_finite(const source_config& src) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (non_finite_.insert(key_of(src)).second)
    log::warn("transport",
              "source {}/{} sent a non-finite Retry-After; ignored",
              src.scope, src.name);
}

void transport_warnings::capped(const source_config& src, double seconds) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (capped_.insert(key_of(src)).second)
    log::warn("transport",
              "source {}/{} sent a Retry-After of {:.0f} s; capped at 30 "
              "days (and at BREAKER__MAX_COOLDOWN_S)",
              src.scope, src.name, seconds);
}

void transport_warnings::local_exhaustion() {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> guard{mtx_};
  if (last_local_ && now - *last_local_ < std::chrono::seconds{10})
    return;
  last_local_ = now;
  log::warn("transport", "cannot open sockets: file descriptors or memory "
                         "exhausted in this process (raise ulimit -n or "
                         "lower concurrency); calls fail with "
                         "local_resource_exhausted");
}

void fail_local_exhaustion(attempt_result& res, transport_warnings& warn) {
  // Our process, not the upstream: no breaker, no health sample
  // (source_rejected feeds neither), nothing was sent (settles 0).
  res.kind = outcome::source_rejected;
  res.reason = reason_local_exhausted;
  res.error_message = "this process cannot open a socket (file descriptors "
                      "or memory exhausted)";
  res.upstream_reached = false;
  warn.local_exhaustion();
}

void fail_before_status(attempt_result& res, bool while_writing) {
  res.kind = outcome::transient;
  res.reason = while_writing ? "write_error" : "reset";
  res.upstream_reached = true;
}

// -- response_reader --------------------------------------------------------------

response_reader::response_reader(const upstream_call& call)
  : call_(call),
    answer_cap_(static_cast<size_t>(
      std::max<int64_t>(call.source->max_response_bytes, 1))),
    decompress_(source_sets_header(*call.source, "Accept-Encoding")),
    acc_(answer_cap_) {
  // nop
}

response_reader::~response_reader() = default;

response_reader::head_fields& response_reader::head() {
  if (!head_)
    head_ = std::make_unique<head_fields>();
  return *head_;
}

const std::string& response_reader::bad_head() const {
  static const std::string none;
  return head_ ? head_->bad_head : none;
}

void response_reader::on_status(int status) {
  status_ = status;
}

bool response_reader::on_field(std::string_view name, std::string_view value) {
  head_bytes_ += name.size() + value.size() + 4;
  if (++head_lines_ > max_header_lines || head_bytes_ > max_header_bytes) {
    head().bad_head = "headers_too_large";
    return false;
  }
  auto& h = head();
  // The first of repeated fields counts.
  auto take = [&](std::optional<std::string>& into) {
    if (!into)
      into.emplace(value);
  };
  if (same_header_name(name, "Content-Type"))
    take(h.content_type);
  else if (same_header_name(name, "Content-Encoding"))
    take(h.encoding);
  else if (same_header_name(name, "Location"))
    take(h.location);
  else if (same_header_name(name, "Retry-After"))
    take(h.retry_after);
  else if (same_header_name(name, "retry-after-ms"))
    take(h.retry_after_ms);
  return true;
}

bool response_reader::on_header_end() {
  auto& h = head();
  if (h.encoding && !h.encoding->empty() && *h.encoding != "identity") {
    if (!decompress_) {
      h.bad_head = "unexpected_content_encoding";
      return false;
    }
    inflater_ = std::make_unique<inflater>(*h.encoding);
    if (!inflater_->supported()) {
      h.bad_head = "unsupported_content_encoding";
      return false;
    }
  }
  sse_mode_ = call_.stream && status_ >= 200 && status_ < 300
              && h.content_type
              && h.content_type->find("text/event-stream") != std::string::npos;
  // Only a redirect's Location and the Retry-After fields are read later.
  if (!h.location && !h.retry_after && !h.retry_after_ms)
    head_.reset();
  return true;
}

response_reader::step response_reader::on_body(const char* data, size_t n) {
  if (!inflater_)
    return on_decoded(data, n);
  step all;
  auto fed = inflater_->feed(data, n, [&](const char* piece, size_t k) {
    auto s = on_decoded(piece, k);
    all.first_token = all.first_token || s.first_token;
    all.done = all.done || s.done;
    all.finished = all.finished || s.finished;
    all.progress = all.progress || s.progress;
    return s.keep_reading;
  });
  if (fed == inflater::result::invalid)
    undecodable_ = true;
  all.keep_reading = fed == inflater::result::more;
  return all;
}

response_reader::step response_reader::on_decoded(const char* data,
                                                  size_t n) {
  step out;
  if (!sse_mode_) {
    // The source's MAX_RESPONSE_BYTES is the only bound: a transport cap of
    // its own (32 MiB, as `body_too_large`) cut larger settings short, and
    // as result_invalid the same source was asked again.
    if (body_.size() + n > answer_cap_ + body_envelope_bytes) {
      answer_too_big_ = true;
      out.keep_reading = false;
    } else {
      body_.append(data, n);
    }
    return out;
  }
  // After [DONE] nothing more is read: bytes that follow close the
  // connection (a well-behaved server sends only the chunked terminator).
  if (done_seen_) {
    out.keep_reading = false;
    return out;
  }
  auto progress_before = acc_.progress();
  parser_.feed(data, n, events_);
  size_t handled = 0;
  for (auto& ev : events_) {
    if (done_seen_ || error_seen_)
      break;
    ++handled;
    bool was_finished = acc_.finished();
    switch (on_event(ev)) {
      case stream_accumulator::step::first_token:
        out.first_token = true;
        break;
      case stream_accumulator::step::done:
        done_seen_ = true;
        out.done = true;
        break;
      case stream_accumulator::step::error:
        error_seen_ = true;
        break;
      default:
        break;
    }
    if (!was_finished && acc_.finished())
      out.finished = true;
  }
  out.progress = acc_.progress() != progress_before;
  bool trailing = done_seen_ && handled < events_.size();
  events_.clear();
  // What this piece's events added and is held goes now.
  if (sink_)
    relay_.flush(acc_, call_, sink_, tag_, stream_relay::read_limit);
  out.keep_reading = !(error_seen_ || trailing || parser_.failed());
  return out;
}

stream_accumulator::step response_reader::on_event(const sse_event& ev) {
  if (sink_)
    return relay_.on_event(acc_, ev, call_, sink_, tag_);
  return acc_.on_event(ev);
}

void response_reader::finish_events() {
  parser_.finish(events_);
  for (auto& ev : events_) {
    if (done_seen_ || error_seen_)
      break;
    auto s = on_event(ev);
    if (s == stream_accumulator::step::done)
      done_seen_ = true;
    else if (s == stream_accumulator::step::error)
      error_seen_ = true;
  }
  events_.clear();
  // What is still held goes before the transport's done.
  if (sink_)
    relay_.flush(acc_, call_, sink_, tag_, stream_relay::no_limit);
}

bool response_reader::complete(
  attempt_result& res, timeout_kind fired, bool sent, bool connected,
  transport_warnings& warn,
  const std::function<void(attempt_result&)>& transport_failure) {
  auto& src = *call_.source;
  res.stream = call_.stream;
  if (status_ != 0)
    res.upstream_reached = true;
  if (sse_mode_) {
    finish_events();
    res.malformed_events = acc_.malformed();
  }
  bool reusable = false;
  if (fired == timeout_kind::head)
    head().bad_head = "headers_too_large";
  if (!bad_head().empty()) {
    res.kind = outcome::transient;
    res.reason = "malformed_response";
    res.error_message = bad_head();
    // Some bytes came back: the request went out (a status line may not).
    res.upstream_reached = res.upstream_reached || connected;
  } else if (undecodable_) {
    res.kind = outcome::transient;
    res.reason = "malformed_response";
    res.error_message = "body_not_decodable";
  } else if (fired != timeout_kind::none) {
    // A stream that already had its finish_reason is complete (SPEC §10):
    // silence while waiting for usage or [DONE] does not spoil it.
    if (sse_mode_ && (acc_.finished() || done_seen_)) {
      acc_.finish(res);
    } else {
      res.kind = outcome::transient;
      res.reason = reason_of(fired);
      res.timed_out = true;
      if (fired == timeout_kind::handshake)
        res.error_message = handshake_timeout_message(src);
      // Request bytes may have gone out unless the connection never opened.
      res.upstream_reached = res.upstream_reached || connected;
    }
  } else if (sse_mode_ && parser_.failed()) {
    res.kind = outcome::result_invalid;
    res.reason = "sse_line_too_long";
  } else if (sse_mode_) {
    // EOF, [DONE], an error event or a broken connection: the accumulator
    // decides (complete only after a finish_reason).
    acc_.finish(res);
    reusable = sent && done_seen_;
  } else if (!sent && status_ == 0) {
    res.kind = outcome::transient;
    transport_failure(res);
  } else if (answer_too_big_) {
    res.kind = outcome::source_rejected;
    res.reason = reason_response_too_large;
  } else if (!sent) {
    res.kind = outcome::transient;
    res.reason = "body_cut";
  } else if (status_ >= 200 && status_ < 300
             && call_.kind != upstream_kind::chat) {
    res.kind = outcome::ok; // a raw 2xx body, decoded by the caller
    res.reason = "ok";
    res.content = std::move(body_);
    reusable = true;
  } else if (status_ >= 200 && status_ < 300) {
    decode_chat_completion(body_, res);
    if (res.content.size() + res.reasoning_content.size() > answer_cap_) {
      res.content.clear();
      res.reasoning_content.clear();
      res.kind = outcome::source_rejected;
      res.reason = reason_response_too_large;
    }
    reusable = true;
  } else {
    classify_http_error(status_, body_, res);
    if (status_ >= 300 && status_ < 400) // never followed (SPEC §12)
      res.error_message = scrub("redirect to "
                                + (head_ ? head_->location : std::nullopt)
                                    .value_or("")
                                    .substr(0, 500));
    reusable = true;
  }
  if (status_ != 0)
    res.http_status = status_;
  if (head_ && (head_->retry_after || head_->retry_after_ms)) {
    auto& h = *head_;
    auto ra = parse_retry_after(h.retry_after ? &*h.retry_after : nullptr,
                                h.retry_after_ms ? &*h.retry_after_ms : nullptr,
                                std::chrono::system_clock::now());
    if (ra.non_finite)
      warn.non_finite(src);
    if (ra.seconds && *ra.seconds > max_duration_s) {
      // Far future (year 9999, 1e11 s): capped here at 30 days, and at the
      // scope's BREAKER__MAX_COOLDOWN_S by the gateway.
      warn.capped(src, *ra.seconds);
      ra.seconds = max_duration_s;
    }
    if (ra.seconds)
      res.retry_after_s = *ra.seconds;
  }
  return reusable && fired == timeout_kind::none;
}

} // namespace pgw
