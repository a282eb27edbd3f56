#pragma once

/// The upstream transport interface. An attempt actor starts one call and
/// receives its progress as messages; the call itself runs off CAF's
/// scheduler threads. Implementations: `httplib_transport` (real HTTP) and
/// the scriptable fake in tests/fakes.

#include "config/settings.hpp"
#include "messages/outcome.hpp"
#include "messages/type_ids.hpp"

#include <caf/actor.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace pgw {

/// What an upstream request is for.
enum class upstream_kind : uint8_t {
  /// POST {BASE_URL}/chat/completions; a 2xx body is decoded as a chat
  /// completion.
  chat,
  /// POST {BASE_URL}/embeddings; a 2xx body is returned verbatim in
  /// `attempt_result::content` (transport/embed_codec decodes it).
  embeddings,
  /// POST {BASE_URL}/ocr/text (multipart); the 2xx body verbatim.
  ocr_text,
  /// POST {BASE_URL}/parse?return_type=content_list_json (multipart); the
  /// 2xx body verbatim.
  ocr_parse,
};

/// Whether a call's request has left, decided once between the transport
/// and whoever stops the call. A call stopped before its request left
/// certainly generated nothing upstream and settles 0 (SPEC §8); one
/// stopped after may have and settles its estimate. Without a gate (null)
/// a stopped call counts as sent. Safe from any thread.
class send_gate {
public:
  /// The transport, right before the request's first byte is written:
  /// true = send (the request counts as sent from now on, also on a
  /// retried connection); false = the call was stopped first: do not.
  bool pass() {
    auto expected = open;
    return state_.compare_exchange_strong(expected, sent,
                                          std::memory_order_acq_rel)
           || expected == sent;
  }

  /// Whoever stops the call: true when its request has not left, and now
  /// never will; false when it has.
  bool withhold() {
    auto expected = open;
    return state_.compare_exchange_strong(expected, withheld,
                                          std::memory_order_acq_rel)
           || expected == withheld;
  }

private:
  static constexpr uint8_t open = 0;
  static constexpr uint8_t sent = 1;
  static constexpr uint8_t withheld = 2;
  std::atomic<uint8_t> state_{open};
};

/// One upstream request as the attempt asks for it.
struct upstream_call {
  std::shared_ptr<const source_config> source;
  std::string body; ///< JSON body (chat_codec's build_chat_body)
  bool stream = false;
  upstream_kind kind = upstream_kind::chat;
  /// The body's Content-Type; empty = application/json.
  std::string content_type;
  /// Live streaming (issue 13): send the sink each streamed delta as it
  /// arrives (see `transport::start`). Transports get this for free by
  /// feeding events through a `stream_relay` (transport/stream_relay.hpp).
  bool forward_deltas = false;
  /// Decides whether a stopped call's request left (see `send_gate`);
  /// null: a stopped call counts as sent.
  std::shared_ptr<send_gate> gate;
};

/// How long a pooled keep-alive connection may stay idle (both transports'
/// `options::idle_timeout`): longer than most calls' gaps under load, and
/// an upstream that keeps connections for less (5 s is common) is noticed
/// when it closes them, not only at the next call.
constexpr std::chrono::milliseconds default_idle_timeout{30000};

/// Cancels one running call.
class call_handle {
public:
  virtual ~call_handle();

  /// Stops the call: its connection is closed within milliseconds, whatever
  /// it is doing (connecting, waiting for headers, streaming). Safe to call
  /// from any thread, any number of times, also after the call ended.
  /// Never blocks on I/O. After `cancel`, the sink may still receive
  /// messages that were already on their way.
  virtual void cancel() = 0;
};

/// Starts upstream calls.
class transport {
public:
  virtual ~transport();

  /// Starts `call` and returns at once. The transport sends `sink`:
  /// - `(atom::first_token, tag)` at most once, when the first non-empty
  ///   delta arrives (streaming only);
  /// - with `call.forward_deltas`, after the first token, each event's
  ///   addition to the answer as `(atom::delta, tag, stream_delta)`, in
  ///   order (several joined in one while the sink is behind:
  ///   transport/stream_relay.hpp), normalised as the final answer is (tool-call indices, string
  ///   arguments), none after the `finish_reason`;
  /// - then exactly one `(atom::done, tag, attempt_result)` — unless the call
  ///   was cancelled first, in which case nothing more is promised.
  virtual std::shared_ptr<call_handle>
  start(upstream_call call, caf::actor sink, uint64_t tag) = 0;
};

using transport_ptr = std::shared_ptr<transport>;

} // namespace pgw
