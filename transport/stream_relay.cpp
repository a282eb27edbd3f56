#include "transport/stream_relay.hpp"

#include "messages/stream.hpp"

#include <caf/send.hpp>

namespace pgw {

stream_accumulator::step stream_relay::on_event(stream_accumulator& acc,
                                                const sse_event& ev,
                                                const upstream_call& call,
                                                const caf::actor& sink,
                                                uint64_t tag) {
  if (call.forward_deltas)
    acc.capture_deltas();
  auto step = acc.on_event(ev);
  if (step == stream_accumulator::step::first_token)
    caf::anon_send(sink, atom::first_token_v, tag);
  flush(acc, call, sink, tag, event_limit);
  return step;
}

void stream_relay::flush(stream_accumulator& acc, const upstream_call& call,
                         const caf::actor& sink, uint64_t tag, long limit) {
  if (!call.forward_deltas || !acc.got_first_token())
    return;
  if (!ticket_)
    ticket_ = std::make_shared<const char>('d');
  // use_count is read relaxed: a delta released on another thread just now
  // may still count, which only holds this one until the next flush.
  if (limit != no_limit && ticket_.use_count() - 1 >= limit)
    return;
  auto delta = acc.take_delta();
  if (delta.empty())
    return;
  delta.hold = ticket_;
  caf::anon_send(sink, atom::delta_v, tag, std::move(delta));
}

} // namespace pgw
