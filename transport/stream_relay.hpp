#pragma once

/// The live side of one streamed chat answer, run by every transport the
/// same way: the first-token signal and live deltas (issue 13) to the sink.

#include "transport/chat_codec.hpp"
#include "transport/transport.hpp"

#include <caf/actor.hpp>

#include <cstdint>
#include <memory>

namespace pgw {

/// Relays one streamed answer's events to `sink`.
///
/// Each event's addition to the answer goes out as one delta, as long as
/// fewer than `event_limit` deltas sent are alive (queued in a mailbox, or
/// in the caller's hands); past that it is held and joins later ones. At
/// the end of each piece of the body read, what is held goes out as one
/// delta unless `read_limit` are alive; at the answer's end it goes out in
/// any case, before the transport's `done`. So a caller that keeps up gets
/// a delta per event, held content never waits past its read unless the
/// caller is `read_limit` deltas behind, and a caller slower than a
/// flooding upstream gets fewer, larger deltas: the messages queued for it
/// stay bounded (before: one per event, some 300 bytes each beyond the
/// content) and a cancel does not wait behind them. What is held is part of
/// the answer, bounded by MAX_RESPONSE_BYTES.
class stream_relay {
public:
  static constexpr long event_limit = 32;
  static constexpr long read_limit = 1024;
  static constexpr long no_limit = -1;

  /// Feeds `ev` to `acc` and returns its step. When the event carried the
  /// first token, sends `(atom::first_token, tag)` to `sink` at once; then
  /// (with `call.forward_deltas`) `flush(..., event_limit)`.
  stream_accumulator::step on_event(stream_accumulator& acc,
                                    const sse_event& ev,
                                    const upstream_call& call,
                                    const caf::actor& sink, uint64_t tag);

  /// With `call.forward_deltas`: sends what the answer gained since the
  /// last delta as one `(atom::delta, tag, stream_delta)` (nothing when it
  /// gained nothing) — unless `limit` deltas sent are alive (`no_limit`:
  /// sends in any case).
  void flush(stream_accumulator& acc, const upstream_call& call,
             const caf::actor& sink, uint64_t tag, long limit);

private:
  /// Every delta sent holds a copy: use_count() - 1 of them are alive.
  std::shared_ptr<const char> ticket_;
};

} // namespace pgw
