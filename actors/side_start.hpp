#pragma once

/// The gateway's side of embedding and OCR calls: ids, tracking, answers.
/// Internal to the gateway.

#include "actors/admission.hpp"

#include <caf/actor_cast.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <cmath>

namespace pgw::detail {

/// Gives `id` a fresh value when empty; `invalid_request` when a live call
/// already has it.
inline caf::error claim_call_id(gateway_self self, std::string& id) {
  auto& st = self->state;
  if (st.stop_reason)
    return make_error(error_code::cancelled, "the gateway is shutting down");
  if (id.empty())
    id = fmt::format("{}-{:016x}-{}", st.scope->name, st.rng(),
                     ++st.next_call);
  else if (st.side_calls.count(id) != 0 || st.calls.count(id) != 0)
    return make_error(error_code::invalid_request,
                      "call_id " + id + " is already running");
  return {};
}

/// `invalid_request` unless `deadline_s` is unset or finite and positive.
inline caf::error check_deadline(const caf::optional<double>& deadline_s) {
  if (deadline_s && !(std::isfinite(*deadline_s) && *deadline_s > 0))
    return make_error(error_code::invalid_request,
                      "deadline_s must be finite and positive");
  return {};
}

/// `invalid_request` unless `source` is empty or a source of the scope (a
/// pinned call; chat says the same).
inline caf::error check_pin(gateway_self self, const std::string& source) {
  auto& st = self->state;
  if (!source.empty() && st.call_sources->count(source) == 0)
    return make_error(error_code::invalid_request,
                      st.scope->unknown_source(source));
  return {};
}

/// The fields every embedding and OCR call takes from the gateway: its id,
/// scope, sources, transport, telemetry, the caller (monitored), the
/// deadline (the request's, else the scope's CALL_DEADLINE_S) and the
/// pinned source.
template <class Args>
void fill_side_args(gateway_self self, Args& args, const std::string& call_id,
                    const caf::optional<double>& deadline_s,
                    const std::string& pin) {
  auto& st = self->state;
  args.call_id = call_id;
  args.pin = pin;
  args.scope = st.scope;
  args.sources = st.call_sources;
  args.gateway = self;
  args.transport = st.transport;
  if (deadline_s)
    args.deadline_s = deadline_s;
  else if (st.scope->call_deadline_s)
    args.deadline_s = *st.scope->call_deadline_s;
  args.seed = st.rng();
  args.requester = self->current_sender();
  args.telemetry = st.opts.telemetry;
  args.wall_offset_ms = st.opts.wall_offset_ms;
  args.prices = st.opts.prices;
}

/// Starts `call` (spawned by the caller), keeps it cancellable by `id`
/// while it runs and answers with its single result.
template <class Response, class Handle>
caf::result<Response> run_side_call(gateway_self self, const std::string& id,
                                    Handle call) {
  auto& st = self->state;
  auto rp = self->make_response_promise<Response>();
  st.side_calls.emplace(
    id, gateway_state::live_side_call{
          caf::actor_cast<caf::actor>(call),
          [rp](caf::error err) mutable { rp.deliver(std::move(err)); }});
  // Its end is heard (a gateway that stops waits for its calls to end).
  self->monitor(call);
  // A live call may arm timers at the gateway; they go when it answers.
  auto addr = call.address();
  st.call_of.emplace(addr, id);
  auto ended = [self, id, addr] {
    auto& st = self->state;
    st.side_calls.erase(id);
    st.call_of.erase(addr);
    st.timers.drop(addr);
  };
  ++st.calls_started;
  self->request(call, caf::infinite, atom::start_v)
    .then(
      [self, ended, rp](Response& resp) mutable {
        ended();
        ++self->state.calls_ok;
        rp.deliver(std::move(resp));
      },
      [self, ended, rp](caf::error& err) mutable {
        ended();
        ++self->state.calls_failed;
        rp.deliver(std::move(err));
      });
  return rp;
}

} // namespace pgw::detail
