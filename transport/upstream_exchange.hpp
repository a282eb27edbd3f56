#pragma once

/// What every HTTP transport does the same way, whatever client library
/// moves the bytes (httplib_transport, beast_transport): where a source's
/// requests go and with which headers, the bounded header phase, the answer
/// caps, SSE parsing and accumulation, and the classification of how the
/// exchange ended (SPEC §4, §10, §12).

#include "transport/chat_codec.hpp"
#include "transport/stream_relay.hpp"
#include "transport/sse_parser.hpp"
#include "transport/transport.hpp"

#include <caf/actor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pgw {

/// ASCII case-insensitive equality: HTTP header names (and tokens such as
/// `close`).
bool same_header_name(std::string_view a, std::string_view b);

class inflater;

/// Header phase bounds (SPEC §12): more is `malformed_response`.
constexpr size_t max_header_lines = 100;
constexpr size_t max_header_bytes = 64 * 1024;

/// How long a stream may go on after `[DONE]` (the chunked terminator is
/// expected at once) and after a `finish_reason` (waiting for usage).
constexpr double drain_after_done_s = 0.05;
constexpr double wait_after_finish_s = 2.0;

/// Where a source's requests go: taken apart once by the project's URL
/// parser (config/url.hpp), so host and port reach the HTTP client as they
/// are (IPv6 literals included) and never a URL string it parses again.
struct upstream_target {
  bool tls = false;
  std::string host; ///< IPv6 without brackets
  int port = 80;
  std::string host_header; ///< `host[:port]`, IPv6 in brackets
  std::string prefix;      ///< the path before /chat/completions, no '/' last
};

upstream_target target_of(const std::string& base_url);

/// The request target for `kind`: `{prefix}/chat/completions`, ...
std::string request_path(const upstream_target& target, upstream_kind kind);

/// True when the source's HEADERS set `name` (any case): then the answer
/// may be encoded (the source asked for it) and is decompressed.
bool source_sets_header(const source_config& src, std::string_view name);

/// The request's headers but Content-Length, in order: Host, Content-Type,
/// Accept, User-Agent, Accept-Encoding identity (unless the source's
/// HEADERS name one), Authorization, then the source's HEADERS.
std::vector<std::pair<std::string, std::string>>
request_headers(const upstream_call& call, const upstream_target& target);

/// True when this process cannot create a socket right now (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM): a connect that failed was our failure.
bool local_resources_exhausted();

/// True for the errno values of a process out of descriptors or memory.
bool is_local_exhaustion_errno(int err);

/// Why a transport stopped a call itself; `drain` and `after_finish` end a
/// stream that is already complete (or cut), not a timeout.
enum class timeout_kind : int {
  none = 0,
  total,
  ttft,
  idle,
  drain,
  after_finish,
  head,
  connect,
  /// CONNECT_TIMEOUT_S passed in the TLS handshake, the TCP connect done:
  /// `tls_handshake`, as a handshake that failed otherwise.
  handshake,
};

/// "total_timeout", "ttft_timeout", ...
const char* reason_of(timeout_kind k);

/// The message of a TLS handshake that did not finish within the source's
/// CONNECT_TIMEOUT_S.
std::string handshake_timeout_message(const source_config& src);

/// The warnings a transport logs about its sources: once per source, or at
/// most every 10 s for local exhaustion (it comes in bursts).
class transport_warnings {
public:
  void non_finite(const source_config& src);
  void capped(const source_config& src, double seconds);
  void local_exhaustion();

private:
  std::mutex mtx_;
  std::set<std::string> non_finite_;
  std::set<std::string> capped_;
  std::optional<std::chrono::steady_clock::time_point> last_local_;
};

/// Fills `res` for a process out of sockets (`source_rejected`, reason
/// `local_resource_exhausted`: no breaker, settles 0) and warns.
void fail_local_exhaustion(attempt_result& res, transport_warnings& warn);

/// Fills `res` for a connection that died after the request started and
/// before a status line: `write_error` while writing the request, else
/// `reset` (the upstream reset or closed it). Either may have reached it.
void fail_before_status(attempt_result& res, bool while_writing);

/// One upstream response as a client reads it: the status, the header
/// fields one by one, the body in pieces of any size; then `complete`
/// classifies how the exchange ended.
class response_reader {
public:
  /// A non-streamed body or an error body is bounded by the source's
  /// MAX_RESPONSE_BYTES plus 64 KiB of JSON envelope (over it:
  /// `source_rejected` / `response_too_large`). The reader decodes an
  /// encoding the source's HEADERS asked for (gzip, deflate; any other is
  /// `malformed_response` / `unsupported_content_encoding`, a body that
  /// does not decode `malformed_response` / `body_not_decodable`).
  explicit response_reader(const upstream_call& call);

  ~response_reader();

  /// SSE events go through a `stream_relay` to `sink` (the first token
  /// and, with `forward_deltas`, the deltas, in order). Without it the reader
  /// only accumulates; the transport sends the first token itself.
  void relay_to(caf::actor sink, uint64_t tag) {
    sink_ = std::move(sink);
    tag_ = tag;
  }

  /// The status line arrived.
  void on_status(int status);

  /// One header field. False when the header phase went over its bounds
  /// (`bad_head()` says why): the caller stops reading.
  bool on_field(std::string_view name, std::string_view value);

  /// The header is complete. False when the response is refused (an
  /// encoding nobody asked for; `bad_head()`): the caller stops reading.
  bool on_header_end();

  /// What a piece of the body changed; the caller stops reading when
  /// `keep_reading` is false.
  struct step {
    bool keep_reading = true;
    bool first_token = false; ///< the stream's first token came
    bool done = false;        ///< `[DONE]` came
    bool finished = false;    ///< a `finish_reason` came
    /// The answer moved on (`stream_accumulator::progress`): what keeps a
    /// stream from STREAM_IDLE_TIMEOUT_S, not bytes alone.
    bool progress = false;
  };

  step on_body(const char* data, size_t n);

  /// Marks the header phase as refused (e.g. the client's own header bound).
  void refuse_head(std::string why) {
    head().bad_head = std::move(why);
  }

  const std::string& bad_head() const;

  int status() const {
    return status_;
  }

  const upstream_call& call() const {
    return call_;
  }

  bool sse_mode() const {
    return sse_mode_;
  }

  bool done_seen() const {
    return done_seen_;
  }

  /// Completes `res` when the exchange is over. `fired` = why the transport
  /// stopped it itself; `sent` = the response was read to its end (or to
  /// `[DONE]`); `connected` = the connection was open (request bytes may
  /// have gone out). When no status line came and nothing else explains it,
  /// `transport_failure` classifies the client's own error. Adds the
  /// status, Retry-After (capped, warned once per source) and the SSE
  /// malformed count. Returns true when the connection may be reused.
  bool complete(attempt_result& res, timeout_kind fired, bool sent,
                bool connected, transport_warnings& warn,
                const std::function<void(attempt_result&)>& transport_failure);

private:
  /// The stream ended: a pending event without its blank line counts.
  void finish_events();

  /// A piece of the body as it reads after decoding.
  step on_decoded(const char* data, size_t n);

  /// Feeds one SSE event to the accumulator (through `relay_` when a sink
  /// is set).
  stream_accumulator::step on_event(const sse_event& ev);

  const upstream_call& call_;
  size_t answer_cap_;
  bool decompress_;
  std::unique_ptr<inflater> inflater_;
  bool undecodable_ = false;
  int status_ = 0;
  size_t head_lines_ = 0;
  size_t head_bytes_ = 0;
  /// The head's fields that matter (the first of each), and why the head
  /// was refused. On the heap while the head is read, and after it only
  /// when a field the answer needs later came (issue 17: 232 bytes a
  /// stream in flight would otherwise hold).
  struct head_fields {
    std::optional<std::string> content_type;
    std::optional<std::string> encoding;
    std::optional<std::string> location;
    std::optional<std::string> retry_after;
    std::optional<std::string> retry_after_ms;
    std::string bad_head;
  };
  head_fields& head();
  std::unique_ptr<head_fields> head_;
  bool sse_mode_ = false;
  std::string body_;
  bool answer_too_big_ = false;
  sse_parser parser_;
  stream_accumulator acc_;
  std::vector<sse_event> events_;
  bool done_seen_ = false;
  bool error_seen_ = false;
  caf::actor sink_;
  uint64_t tag_ = 0;
  stream_relay relay_;
};

} // namespace pgw
