#include "actors/embed_start.hpp"

#include "actors/embed_call.hpp"
#include "actors/side_start.hpp"

#include "transport/chat_codec.hpp"

namespace pgw::detail {

caf::result<embed_response> start_embed(gateway_self self,
                                        embed_request req) {
  auto& st = self->state;
  if (auto kind = st.scope->sources.front().kind;
      kind != source_kind::embedding)
    return make_error(error_code::invalid_request,
                      "scope " + st.scope->name
                        + " serves KIND=" + to_string(kind)
                        + ", not embeddings");
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    if (req.inputs[i].empty())
      return make_error(error_code::invalid_request,
                        fmt::format("input {} is empty", i));
    // Caught here, not sent on to be refused as a malformed body.
    if (auto bad = invalid_utf8_at(req.inputs[i]))
      return make_error(error_code::invalid_request,
                        fmt::format("input {}: not valid UTF-8 at byte offset "
                                    "{}", i, *bad));
  }
  if (auto err = check_deadline(req.deadline_s))
    return err;
  if (auto err = check_pin(self, req.source))
    return err;
  if (auto err = claim_call_id(self, req.call_id))
    return err;
  if (req.inputs.empty()) {
    embed_response out;
    out.call_id = req.call_id;
    out.model = req.source.empty() ? st.scope->sources.front().model
                                   : st.call_sources->at(req.source)
                                       .config->model;
    out.stats.model = out.model;
    out.stats.usage_source = "reported"; // 0 tokens is a fact
    return out;
  }
  embed_call_args args;
  fill_side_args(self, args, req.call_id, req.deadline_s, req.source);
  args.inputs = std::make_shared<const std::vector<std::string>>(
    std::move(req.inputs));
  auto id = args.call_id;
  return run_side_call<embed_response>(self, id,
                                       self->spawn(embed_call,
                                                   std::move(args)));
}

} // namespace pgw::detail
