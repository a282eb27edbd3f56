#include "actors/ocr_call.hpp"
#include "actors/accounting.hpp"

#include "transport/chat_codec.hpp"

#include <caf/actor_cast.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace pgw {

namespace {

using self_ptr = ocr_call_actor::stateful_pointer<ocr_call_state>;

const call_source* source_of(self_ptr self, const std::string& name) {
  return side_source(self->state.args, name);
}

/// The price of a recognised image on `src` answering as `model`: pages ×
/// the table's page price; none without one (OCR has no tokens to price).
caf::optional<double> ocr_cost(self_ptr self, const source_config& src,
                               const std::string& model) {
  auto& args = self->state.args;
  if (!args.prices)
    return caf::none;
  if (auto cost = args.prices->page_cost(src.scope, src.name, model,
                                         args.pages))
    return *cost;
  return caf::none;
}

/// The model `res` answered as, else the source's MODEL.
const std::string& model_of(const source_config& src,
                            const attempt_result* res) {
  return res != nullptr && !res->model.empty() ? res->model : src.model;
}

/// Ends the running attempt: settles 0 (S6), breaker, report; an ok
/// attempt costs its pages.
void end_attempt(self_ptr self, outcome kind,
                 caf::optional<double> retry_after,
                 const attempt_result* res) {
  auto& st = self->state;
  if (auto src = source_of(self, st.req.admitted.source)) {
    auto cost = kind == outcome::ok
                  ? ocr_cost(self, *src->config, model_of(*src->config, res))
                  : caf::none;
    end_side_request(st.args, *src, st.req,
                     st.args.request->layout ? "ocr_layout" : "ocr_text",
                     kind, 0, retry_after, res, cost, true,
                     self->clock().now());
  } else {
    st.req.handle.reset();
    st.req.admitted = admit_result{};
  }
  st.running = false;
}

void maybe_deliver(self_ptr self) {
  auto& st = self->state;
  if (!st.finishing || st.delivered || st.admitting)
    return;
  deliver_side_call(self, [](ocr_response&) {});
}

void fail(self_ptr self, error_code code, std::string message,
          const attempt_result* upstream = nullptr) {
  auto& st = self->state;
  if (!begin_failure(self, code, std::move(message), upstream))
    return;
  if (st.running) {
    if (st.req.handle)
      st.req.handle->cancel();
    end_attempt(self, outcome::cancelled, caf::none, nullptr);
  }
  maybe_deliver(self);
}

void admit(self_ptr self);

void retry_later(self_ptr self, double delay_s) {
  auto gen = ++self->state.retry.retry_gen;
  arm_timer(self, timer_kind::retry, gen,
            side_timespan(std::max(delay_s, side_min_wait_s)));
}

void start_attempt(self_ptr self, admit_result& r) {
  auto& st = self->state;
  auto src = source_of(self, r.source);
  if (src == nullptr) {
    self->send(st.args.gateway, atom::abandon_v, r);
    fail(self, error_code::internal, "gateway admitted unknown source");
    return;
  }
  auto& cfg = *src->config;
  auto& req = *st.args.request;
  upstream_call call;
  call.source = src->config;
  if (cfg.kind == source_kind::ocr_monkey) {
    auto boundary = fmt::format("pgw-{:016x}", st.rng());
    call.kind = req.layout ? upstream_kind::ocr_parse : upstream_kind::ocr_text;
    call.content_type = "multipart/form-data; boundary=" + boundary;
    call.body = monkey_multipart(req.image, st.args.type, boundary);
  } else {
    auto body = build_chat_body(
      vision_request(cfg, req.image, st.args.type, req.layout), cfg, false);
    if (!body) {
      self->send(st.args.gateway, atom::abandon_v, r);
      fail(self, error_code::invalid_config, describe(body.error()));
      return;
    }
    call.body = std::move(*body);
  }
  st.req.admitted = std::move(r);
  st.running = true;
  st.req.tag += 1;
  ++st.response.stats.attempts;
  st.req.attempt = static_cast<uint64_t>(st.response.stats.attempts);
  st.req.sent_at = self->clock().now();
  st.req.handle = st.args.transport->start(
    std::move(call), caf::actor_cast<caf::actor>(self), st.req.tag);
}

void on_refused(self_ptr self, admit_result& r) {
  auto& st = self->state;
  auto step = after_refusal(*st.args.scope, r, st.retry, st.last,
                            "every source rejected the image",
                            time_left_s(self));
  if (step.wait_s)
    retry_later(self, *step.wait_s);
  else
    fail(self, step.code, std::move(step.message), step.upstream);
}

void admit(self_ptr self) {
  auto& st = self->state;
  if (st.finishing || st.admitting)
    return;
  st.admitting = true;
  admit_request req;
  req.exclude = st.retry.excluded;
  req.failures = st.retry.failures;
  // The admission reply's first lines match the supervisor's (duplicates
  // pairs them): every call actor gives back a permit that arrives late.
  self->request(st.args.gateway, caf::infinite, atom::admit_v, std::move(req))
    .then(
      [self](admit_result& r) {
        auto& st = self->state;
        st.admitting = false;
        if (st.finishing) {
          if (r.admitted)
            self->send(st.args.gateway, atom::abandon_v, r);
          maybe_deliver(self);
        } else if (r.admitted) {
          start_attempt(self, r);
        } else {
          on_refused(self, r);
        }
      },
      [self](caf::error& err) {
        self->state.admitting = false;
        auto [code, message] = admission_failure(err);
        fail(self, code, std::move(message));
        maybe_deliver(self);
      });
}

/// Decodes a transport success into the OCR answer (may turn it into a
/// failure: success:false, malformed, layout not JSON).
void decode(self_ptr self, const source_config& src, attempt_result& res) {
  auto& st = self->state;
  bool layout = st.args.request->layout;
  std::string blocks = "[]";
  if (src.kind == source_kind::ocr_monkey) {
    auto body = std::move(res.content);
    res.content.clear();
    if (layout)
      decode_monkey_layout(body, res, blocks);
    else
      decode_monkey_text(body, res);
  } else if (layout) {
    decode_vision_layout(res, blocks);
  }
  if (res.kind == outcome::ok && layout)
    st.response.blocks_json = std::move(blocks);
}

void on_done(self_ptr self, uint64_t tag, attempt_result& res) {
  auto& st = self->state;
  if (st.finishing || !st.running || tag != st.req.tag)
    return;
  auto source = st.req.admitted.source;
  auto src = source_of(self, source);
  if (res.kind == outcome::ok)
    decode(self, *src->config, res);
  end_attempt(self, res.kind, res.retry_after_s, &res);
  st.last.note(source, res);
  st.response.stats.generation_ms += res.latency_ms;
  switch (res.kind) {
    case outcome::ok: {
      auto& out = st.response;
      out.text = std::move(res.content);
      out.source = source;
      out.model = model_of(*src->config, &res);
      out.stats.source = source;
      out.stats.model = out.model;
      out.stats.cost_usd = ocr_cost(self, *src->config, out.model);
      // What the upstream reported, as the attempt's row says: a vision
      // model's token counts; a MonkeyOCR server reports none.
      out.stats.usage_source = usage_source_of(&res);
      if (res.usage_reported) {
        out.stats.prompt_tokens = res.prompt_tokens;
        out.stats.completion_tokens = res.completion_tokens;
      }
      st.finishing = true;
      maybe_deliver(self);
      return;
    }
    case outcome::request_rejected:
      fail(self, error_code::request_rejected,
           "the image was rejected by source " + source + " (" + res.reason
             + ")",
           &res);
      return;
    case outcome::source_rejected:
      st.retry.excluded.push_back(source);
      st.retry.rejected(res);
      admit(self);
      return;
    default:
      // A 429 spends no budget.
      if (auto delay = after_failure(*st.args.scope, st.retry, res.kind,
                                     source, st.rng))
        retry_later(self, *delay);
      else
        fail(self, error_code::retry_exhausted,
             budget_message(*st.args.scope));
      return;
  }
}

} // namespace

ocr_call_actor::behavior_type ocr_call(self_ptr self, ocr_call_args args) {
  init_side_call(self, std::move(args),
                 [](self_ptr self, error_code code, const char* what) {
                   fail(self, code, what);
                 });
  return {
    [self](atom::start) -> caf::result<ocr_response> {
      return start_side_call<ocr_response>(self, [self] {
        self->state.retry.excluded = pin_exclusions(self->state.args);
        admit(self);
      });
    },
    // The handlers below repeat in embed_call (duplicates pairs them): a typed
    // behaviour is one list of handlers, and each calls its own actor's
    // on_done / fail.
    [](atom::first_token, uint64_t) {},
    [self](atom::done, uint64_t tag, attempt_result& res) {
      on_done(self, tag, res);
    },
    [self](atom::timer, timer_kind kind, uint64_t id) {
      if (kind == timer_kind::retry && id == self->state.retry.retry_gen)
        admit(self);
      else if (kind == timer_kind::deadline)
        fail(self, error_code::call_deadline_exceeded,
             "the call deadline passed");
    },
    [self](atom::cancel) {
      fail(self, error_code::cancelled, "the caller cancelled the call");
    },
  };
}

} // namespace pgw
