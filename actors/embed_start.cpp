#include "actors/embed_start.hpp"

#include "actors/embed_call.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <cmath>

namespace pgw::detail {

caf::result<embed_response> start_embed(gateway_self self,
                                        embed_request req) {
  auto& st = self->state;
  if (st.scope->sources.front().kind != "embedding")
    return make_error(error_code::invalid_request,
                      "scope " + st.scope->name
                        + " serves KIND=" + st.scope->sources.front().kind
                        + ", not embeddings");
  for (size_t i = 0; i < req.inputs.size(); ++i)
    if (req.inputs[i].empty())
      return make_error(error_code::invalid_request,
                        fmt::format("input {} is empty", i));
  if (req.deadline_s && !(std::isfinite(*req.deadline_s)
                          && *req.deadline_s > 0))
    return make_error(error_code::invalid_request,
                      "deadline_s must be finite and positive");
  if (req.call_id.empty())
    req.call_id = fmt::format("{}-{:016x}-{}", st.scope->name, st.rng(),
                              ++st.next_call);
  else if (st.embed_calls.count(req.call_id) != 0)
    return make_error(error_code::invalid_request,
                      "call_id " + req.call_id + " is already running");
  if (req.inputs.empty()) {
    embed_response out;
    out.call_id = req.call_id;
    out.model = st.scope->sources.front().model;
    out.stats.model = out.model;
    out.stats.usage_source = "reported"; // 0 tokens is a fact
    return out;
  }
  embed_call_args args;
  args.call_id = req.call_id;
  args.inputs = std::make_shared<const std::vector<std::string>>(
    std::move(req.inputs));
  args.scope = st.scope;
  args.sources = st.call_sources;
  args.gateway = self;
  args.transport = st.transport;
  if (req.deadline_s)
    args.deadline_s = req.deadline_s;
  else if (st.scope->call_deadline_s)
    args.deadline_s = *st.scope->call_deadline_s;
  args.seed = st.rng();
  args.requester = self->current_sender();
  auto id = args.call_id;
  auto call = self->spawn(embed_call, std::move(args));
  st.embed_calls.emplace(id, call);
  ++st.calls_started;
  auto rp = self->make_response_promise<embed_response>();
  self->request(call, caf::infinite, atom::start_v)
    .then(
      [self, id, rp](embed_response& resp) mutable {
        self->state.embed_calls.erase(id);
        ++self->state.calls_ok;
        rp.deliver(std::move(resp));
      },
      [self, id, rp](caf::error& err) mutable {
        self->state.embed_calls.erase(id);
        ++self->state.calls_failed;
        rp.deliver(std::move(err));
      });
  return rp;
}

} // namespace pgw::detail
