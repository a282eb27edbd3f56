#pragma once

/// The step every transport runs for one SSE event of a streamed chat
/// answer, so the first-token signal and live deltas (issue 13) reach the
/// sink the same way whatever the HTTP client.

#include "transport/chat_codec.hpp"
#include "transport/transport.hpp"

#include <caf/actor.hpp>

#include <cstdint>

namespace pgw {

/// Feeds `ev` to `acc` and returns its step. When the event carried the
/// first token, sends `(atom::first_token, tag)` to `sink`; then, when
/// `call.forward_deltas`, sends what the event added to the answer as
/// `(atom::delta, tag, stream_delta)` (nothing when it added nothing).
/// Messages go out in the order of the events.
stream_accumulator::step relay_event(stream_accumulator& acc,
                                     const sse_event& ev,
                                     const upstream_call& call,
                                     const caf::actor& sink, uint64_t tag);

} // namespace pgw
