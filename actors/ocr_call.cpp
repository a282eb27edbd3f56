#include "actors/ocr_call.hpp"

#include "actors/selector.hpp"
#include "actors/side_call.hpp"
#include "transport/chat_codec.hpp"

#include <caf/actor_cast.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace pgw {

namespace {

using self_ptr = ocr_call_actor::stateful_pointer<ocr_call_state>;

constexpr double min_wait_s = 0.001;

caf::timespan to_timespan(double seconds) {
  return std::chrono::ceil<caf::timespan>(
    std::chrono::duration<double>(std::max(0.0, seconds)));
}

const call_source* source_of(self_ptr self, const std::string& name) {
  auto i = self->state.args.sources->find(name);
  return i == self->state.args.sources->end() ? nullptr : &i->second;
}

/// Ends the running attempt: settles 0 (S6), breaker, report.
void end_attempt(self_ptr self, outcome kind,
                 caf::optional<double> retry_after,
                 const attempt_result* res) {
  auto& st = self->state;
  if (auto src = source_of(self, st.admitted.source)) {
    end_admitted(*src, st.args.gateway, st.admitted, kind, 0, retry_after,
                 true);
    side_attempt a{st.args.call_id,
                   static_cast<uint64_t>(st.response.stats.attempts),
                   st.args.request->layout ? "ocr_layout" : "ocr_text",
                   st.sent_at, kind, res, 0, caf::none};
    write_side_row(st.args.telemetry, *src, a, self->clock().now(),
                   st.args.wall_offset_ms);
  }
  st.running = false;
  st.handle.reset();
  st.admitted = admit_result{};
}

void maybe_deliver(self_ptr self) {
  auto& st = self->state;
  if (!st.finishing || st.delivered || st.admitting)
    return;
  st.delivered = true;
  if (st.failure) {
    st.promise.deliver(st.failure);
  } else {
    st.response.stats.total_latency_ms
      = std::chrono::duration<double, std::milli>(self->clock().now()
                                                  - st.started_at)
          .count();
    st.response.call_id = st.args.call_id;
    st.promise.deliver(std::move(st.response));
  }
  self->quit();
}

void fail(self_ptr self, error_code code, std::string message,
          const attempt_result* upstream = nullptr) {
  auto& st = self->state;
  if (st.finishing)
    return;
  st.finishing = true;
  error_detail detail;
  detail.message = std::move(message);
  detail.per_source = st.last_reason;
  detail.call_id = st.args.call_id;
  if (upstream != nullptr) {
    detail.upstream_status = upstream->http_status;
    detail.upstream_code = upstream->error_code;
    detail.upstream_message = upstream->error_message;
  }
  st.failure = make_error(code, std::move(detail));
  if (st.running) {
    if (st.handle)
      st.handle->cancel();
    end_attempt(self, outcome::cancelled, caf::none, nullptr);
  }
  maybe_deliver(self);
}

void admit(self_ptr self);

void retry_later(self_ptr self, double delay_s) {
  auto gen = ++self->state.retry_gen;
  self->delayed_send(self, to_timespan(std::max(delay_s, min_wait_s)),
                     atom::retry_v, gen);
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
  if (cfg.kind == "ocr_monkey") {
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
  st.admitted = std::move(r);
  st.running = true;
  st.tag += 1;
  ++st.response.stats.attempts;
  st.sent_at = self->clock().now();
  st.handle = st.args.transport->start(std::move(call),
                                       caf::actor_cast<caf::actor>(self),
                                       st.tag);
}

void on_refused(self_ptr self, admit_result& r) {
  auto& st = self->state;
  for (auto& [source, reason] : r.skipped)
    st.last_reason[source] = to_string(reason);
  if (r.refusal == admission_refusal::none) {
    if (st.last_rejection)
      fail(self, error_code::request_rejected,
           "every source rejected the image", &*st.last_rejection);
    else
      fail(self, error_code::retry_exhausted, "no source left to try");
    return;
  }
  bool quota = false;
  auto wait_s = refusal_wait(*st.args.scope, r, quota);
  if (!wait_s) {
    fail(self, quota ? error_code::quota_exhausted : error_code::circuit_open,
         quota ? "no source may run: quota full or circuit open everywhere"
               : "every source's circuit is open");
    return;
  }
  retry_later(self, *wait_s);
}

void admit(self_ptr self) {
  auto& st = self->state;
  if (st.finishing || st.admitting)
    return;
  st.admitting = true;
  admit_request req;
  req.exclude = st.excluded;
  req.failures = st.failures;
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
        fail(self,
             code_of(err) == error_code::governance_unavailable
               ? error_code::governance_unavailable
               : error_code::internal,
             "admission failed: " + describe(err));
        maybe_deliver(self);
      });
}

/// Decodes a transport success into the OCR answer (may turn it into a
/// failure: success:false, malformed, layout not JSON).
void decode(self_ptr self, const source_config& src, attempt_result& res) {
  auto& st = self->state;
  bool layout = st.args.request->layout;
  std::string blocks = "[]";
  if (src.kind == "ocr_monkey") {
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

void backoff(self_ptr self, bool spend) {
  auto& st = self->state;
  auto& scope = *st.args.scope;
  if (spend && ++st.budget_used >= scope.max_attempts) {
    fail(self, error_code::retry_exhausted,
         "all " + std::to_string(scope.max_attempts)
           + " attempts of the retry budget failed");
    return;
  }
  std::uniform_real_distribution<double> u01{0.0, 1.0};
  retry_later(self, backoff_delay(++st.rounds_failed, scope.backoff_base_s,
                                  scope.backoff_max_s, u01(st.rng)));
}

void on_done(self_ptr self, uint64_t tag, attempt_result& res) {
  auto& st = self->state;
  if (st.finishing || !st.running || tag != st.tag)
    return;
  auto source = st.admitted.source;
  auto src = source_of(self, source);
  if (res.kind == outcome::ok)
    decode(self, *src->config, res);
  end_attempt(self, res.kind, res.retry_after_s, &res);
  st.last_reason[source] = res.kind == outcome::ok ? "ok" : res.reason;
  st.response.stats.generation_ms += res.latency_ms;
  switch (res.kind) {
    case outcome::ok: {
      auto& out = st.response;
      out.text = std::move(res.content);
      out.source = source;
      out.model = !res.model.empty() ? res.model : src->config->model;
      out.stats.source = source;
      out.stats.model = out.model;
      out.stats.usage_source = "reported"; // OCR has no tokens: 0 is a fact
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
      st.excluded.push_back(source);
      st.last_rejection = res;
      admit(self);
      return;
    case outcome::rate_limited:
      backoff(self, false);
      return;
    default:
      ++st.failures[source];
      backoff(self, true);
      return;
  }
}

} // namespace

ocr_call_actor::behavior_type ocr_call(self_ptr self, ocr_call_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.rng.seed(st.args.seed);
  watch_caller(self, st.args.requester,
               [](self_ptr self, error_code code, const char* what) {
                 fail(self, code, what);
               });
  return {
    [self](atom::start) -> caf::result<ocr_response> {
      auto& st = self->state;
      // A second start is refused without touching the first caller's
      // promise (it would otherwise never be answered).
      if (st.started)
        return make_error(error_code::internal, "call started twice");
      st.promise = self->make_response_promise<ocr_response>();
      st.started = true;
      st.started_at = self->clock().now();
      if (st.args.deadline_s)
        self->delayed_send(self, to_timespan(*st.args.deadline_s),
                           atom::timer_v, uint64_t{1});
      admit(self);
      return st.promise;
    },
    [](atom::first_token, uint64_t) {},
    [self](atom::done, uint64_t tag, attempt_result& res) {
      on_done(self, tag, res);
    },
    [self](atom::retry, uint64_t gen) {
      if (gen == self->state.retry_gen)
        admit(self);
    },
    [self](atom::timer, uint64_t) {
      fail(self, error_code::call_deadline_exceeded,
           "the call deadline passed");
    },
    [self](atom::cancel) {
      fail(self, error_code::cancelled, "the caller cancelled the call");
    },
  };
}

} // namespace pgw
