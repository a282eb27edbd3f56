#include "transport/stream_relay.hpp"

#include "messages/stream.hpp"

#include <caf/send.hpp>

namespace pgw {

stream_accumulator::step relay_event(stream_accumulator& acc,
                                     const sse_event& ev,
                                     const upstream_call& call,
                                     const caf::actor& sink, uint64_t tag) {
  if (call.forward_deltas)
    acc.capture_deltas();
  auto step = acc.on_event(ev);
  if (step == stream_accumulator::step::first_token)
    caf::anon_send(sink, atom::first_token_v, tag);
  if (call.forward_deltas && acc.got_first_token()) {
    auto delta = acc.take_delta();
    if (!delta.empty())
      caf::anon_send(sink, atom::delta_v, tag, std::move(delta));
  }
  return step;
}

} // namespace pgw
