#include "actors/embed_call.hpp"

#include "actors/accounting.hpp"
#include "actors/settlement.hpp"
#include "config/keys.hpp"
#include "transport/embed_codec.hpp"

#include <caf/actor_cast.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <limits>

namespace pgw {

namespace {

using self_ptr = embed_call_actor::stateful_pointer<embed_call_state>;
using phase = embed_batch_state::phase;

const call_source* source_of(self_ptr self, const std::string& name) {
  return side_source(self->state.args, name);
}

/// Settles and releases a sub-batch's permit, feeds its breaker (unless
/// cancelled) and reports to the gateway, which never feeds the EWMA.
void end_request(self_ptr self, embed_batch_state& b, outcome kind,
                 int64_t amount, caf::optional<double> retry_after,
                 const attempt_result* res) {
  auto& args = self->state.args;
  if (auto src = source_of(self, b.req.admitted.source)) {
    auto& cfg = *src->config;
    // Work of unknown size (no usage came): its permit settled the
    // estimate, counted by source (serve's pgw_tokens_estimated_total).
    if (amount > 0 && (res == nullptr || !usage_usable(*res)))
      self->state.response.estimated_tokens_by_source[cfg.name] += amount;
    auto cost = attempt_cost(args.prices.get(), cfg.scope, cfg.name,
                             res && !res->model.empty() ? res->model
                                                        : cfg.model,
                             kind, res, amount);
    if (cost)
      (kind == outcome::ok ? self->state.won_cost_usd
                           : self->state.losers_cost_usd) += *cost;
    end_side_request(args, *src, b.req, "embeddings", kind, amount,
                     retry_after, res, cost, false, self->clock().now());
  } else {
    b.req.handle.reset();
    b.req.gate.reset();
    b.req.admitted = admit_result{};
  }
}

void maybe_deliver(self_ptr self) {
  auto& st = self->state;
  if (!st.finishing || st.delivered || st.admitting > 0)
    return;
  if (st.failure) { // no sub-batch won
    st.losers_cost_usd += st.won_cost_usd;
    // The sub-batches answered before the failure used tokens: the error
    // says how many each source reported, and what its permits settled by
    // estimate for work of unknown size (serve's /metrics counts both).
    spent_by_source spent;
    for (auto& [name, tokens] : st.response.reported_tokens_by_source)
      add_spent(spent, name, spent_work{tokens, 0, 0, caf::none});
    for (auto& [name, tokens] : st.response.estimated_tokens_by_source)
      add_spent(spent, name, spent_work{0, 0, tokens, caf::none});
    st.failure = with_spent(st.failure, spent);
  }
  deliver_side_call(self, [&st](embed_response& out) {
    auto& stats = out.stats;
    stats.usage_source = st.all_usage_reported ? "reported" : "unavailable";
    if (st.all_usage_reported)
      stats.reported_prompt_tokens = 0; // all of prompt_tokens
    stats.cost_usd = st.cost_usd;
    for (auto& s : st.sources_used)
      stats.source += (stats.source.empty() ? "" : ",") + s;
    stats.model = out.model;
  });
}

/// Ends the call with `code`: running sub-batches are cancelled and settled
/// with their estimate (S7: their request was sent), or 0 when their
/// request had not left (the gate, withheld now, decides).
void fail(self_ptr self, error_code code, std::string message,
          const attempt_result* upstream = nullptr) {
  auto& st = self->state;
  if (!begin_failure(self, code, std::move(message), upstream))
    return;
  for (auto& b : st.batches)
    if (b.at == phase::running) {
      if (b.req.handle)
        b.req.handle->cancel();
      bool left = b.req.handle && !(b.req.gate && b.req.gate->withhold());
      auto amount = settle_cancelled(left, b.req.admitted.granted_permit.est);
      end_request(self, b, outcome::cancelled, amount, caf::none, nullptr);
      b.at = phase::done;
    }
  maybe_deliver(self);
}

void pump(self_ptr self);

/// Waits `delay_s`, then makes sub-batch `i` ready again.
void retry_later(self_ptr self, size_t i, double delay_s) {
  auto& b = self->state.batches[i];
  b.at = phase::waiting;
  auto gen = ++b.retry.retry_gen;
  arm_timer(self, timer_kind::retry, (gen << 32) | static_cast<uint64_t>(i),
            side_timespan(std::max(delay_s, side_min_wait_s)));
}

/// Sub-batch `packed & 0xffffffff`'s wait is over (generation in the top
/// half): it is ready again unless a newer wait replaced this one.
void on_retry_timer(self_ptr self, uint64_t packed) {
  auto& st = self->state;
  auto i = static_cast<size_t>(packed & 0xffffffffu);
  if (st.finishing || i >= st.batches.size())
    return;
  auto& b = st.batches[i];
  if (b.at == phase::waiting && b.retry.retry_gen == (packed >> 32)) {
    b.at = phase::ready;
    pump(self);
  }
}

void on_refused(self_ptr self, size_t i, admit_result& r) {
  auto& st = self->state;
  auto& b = st.batches[i];
  auto step = after_refusal(*st.args.scope, r, b.retry, st.last,
                            "every source rejected a sub-batch of inputs "
                              + std::to_string(b.range.begin) + ".."
                              + std::to_string(b.range.end - 1),
                            time_left_s(self));
  // No source left, and the last ones were out only for the size of their
  // answer: the settings, not the caller, must change.
  if (!step.wait_s && r.refusal == admission_refusal::none
      && !b.retry.last_rejection && !b.too_large.empty()) {
    step.code = error_code::result_invalid;
    step.message = b.too_large;
  }
  if (step.wait_s)
    retry_later(self, i, *step.wait_s);
  else
    fail(self, step.code, std::move(step.message), step.upstream);
}

void start_request(self_ptr self, size_t i, admit_result& r) {
  auto& st = self->state;
  auto& b = st.batches[i];
  auto src = source_of(self, r.source);
  if (src == nullptr) {
    self->send(st.args.gateway, atom::abandon_v, r);
    fail(self, error_code::internal, "gateway admitted unknown source");
    return;
  }
  b.req.admitted = std::move(r);
  b.at = phase::running;
  b.req.tag = ++st.next_tag;
  ++st.response.stats.attempts;
  b.req.attempt = static_cast<uint64_t>(st.response.stats.attempts);
  b.req.sent_at = self->clock().now();
  upstream_call call;
  call.source = src->config;
  call.kind = upstream_kind::embeddings;
  call.body = build_embed_body(*src->config, *st.args.inputs, b.range.begin,
                               b.range.end);
  b.req.gate = std::make_shared<send_gate>();
  call.gate = b.req.gate;
  b.req.handle = st.args.transport->start(
    std::move(call), caf::actor_cast<caf::actor>(self), b.req.tag);
}

void admit(self_ptr self, size_t i) {
  auto& st = self->state;
  auto& b = st.batches[i];
  b.at = phase::admitting;
  ++st.busy;
  ++st.admitting;
  admit_request req;
  req.exclude = b.retry.excluded;
  req.failures = b.retry.failures;
  req.est = b.range.est_tokens;
  self->request(st.args.gateway, caf::infinite, atom::admit_v, std::move(req))
    .then(
      [self, i](admit_result& r) {
        auto& st = self->state;
        --st.admitting;
        if (st.finishing) {
          if (r.admitted)
            self->send(st.args.gateway, atom::abandon_v, r);
          maybe_deliver(self);
          return;
        }
        if (r.admitted) {
          start_request(self, i, r);
          return;
        }
        --st.busy;
        on_refused(self, i, r);
        pump(self);
      },
      [self](caf::error& err) {
        --self->state.admitting;
        auto [code, message] = admission_failure(err);
        fail(self, code, std::move(message));
        maybe_deliver(self);
      });
}

/// Admits ready sub-batches while fewer than BATCH_CONCURRENCY are busy.
void pump(self_ptr self) {
  auto& st = self->state;
  for (size_t i = 0; i < st.batches.size(); ++i) {
    if (st.finishing || st.busy >= st.args.scope->batch_concurrency)
      return;
    if (st.batches[i].at == phase::ready)
      admit(self, i);
  }
}

/// Takes sub-batch `b`'s vectors; `settled` is what its permit settled
/// (the reported usage, else the estimate), the tokens the answer reports.
void succeed_batch(self_ptr self, embed_batch_state& b,
                   std::vector<std::vector<float>>& vectors,
                   const attempt_result& res, const std::string& source,
                   int64_t settled) {
  auto& st = self->state;
  auto& out = st.response;
  for (size_t k = 0; k < vectors.size(); ++k)
    out.vectors[b.range.begin + k] = std::move(vectors[k]);
  ++out.sub_batches;
  out.stats.generation_ms += res.latency_ms;
  // Without reported usage the estimate was settled: the answer says so
  // (usage_source `unavailable` tells it from a reported count), not 0.
  out.stats.prompt_tokens += settled;
  st.all_usage_reported = st.all_usage_reported && res.usage_reported;
  if (res.usage_reported) {
    out.stats.reported_prompt_tokens += settled;
    out.reported_tokens_by_source[source] += settled;
  }
  auto model = !res.model.empty() ? res.model
                                  : source_of(self, source)->config->model;
  if (out.model.empty())
    out.model = model;
  // Priced as its attempt row is: no reported usage, no price (as chat).
  auto cost = attempt_cost(st.args.prices.get(), st.args.scope->name, source,
                           model, outcome::ok, &res, settled);
  if (cost)
    out.cost_by_source[source] += *cost;
  if (cost && st.cost_usd)
    *st.cost_usd += *cost;
  else
    st.cost_usd = caf::none;
  if (std::find(st.sources_used.begin(), st.sources_used.end(), source)
      == st.sources_used.end())
    st.sources_used.push_back(source);
  b.at = phase::done;
}

/// Inputs `[begin, end)` as a sub-batch, with their estimate.
embed_batch batch_of(const std::vector<std::string>& inputs, size_t begin,
                     size_t end) {
  embed_batch out{begin, end, 0};
  for (auto k = begin; k < end; ++k)
    out.est_tokens += estimate_embed_tokens(inputs[k]);
  return out;
}

/// Sub-batch `i`'s answer on `source` was larger than that source's
/// MAX_RESPONSE_BYTES: too many vectors for one answer, nothing the caller
/// did. Halved (both halves ready again; no budget spent, no source
/// excluded) while it has two inputs or more and was halved fewer than
/// `max_embed_halvings` times; otherwise `source` is out for it, and when
/// no source is left the call fails `result_invalid` with what to change.
void on_too_large(self_ptr self, size_t i, const std::string& source) {
  auto& st = self->state;
  auto& b = st.batches[i];
  auto n = b.range.end - b.range.begin;
  b.at = phase::ready;
  if (n > 1 && b.halvings < max_embed_halvings) {
    auto mid = b.range.begin + n / 2;
    embed_batch_state upper;
    upper.range = batch_of(*st.args.inputs, mid, b.range.end);
    upper.retry = b.retry;
    upper.halvings = ++b.halvings;
    b.range = batch_of(*st.args.inputs, b.range.begin, mid);
    // Index `i` stays this batch's: admissions and timers in flight name
    // their batch by index, so the other half goes at the end.
    st.batches.push_back(std::move(upper));
    return;
  }
  b.retry.excluded.push_back(source);
  auto& cfg = *source_of(self, source)->config;
  auto key = [&cfg](const char* field) {
    return detail::source_key(cfg.scope, cfg, field);
  };
  b.too_large = "the answer of source " + source + " for inputs "
                + std::to_string(b.range.begin) + ".."
                + std::to_string(b.range.end - 1) + " is larger than "
                + key("MAX_RESPONSE_BYTES") + "="
                + std::to_string(cfg.max_response_bytes)
                + (n > 1 ? " after " + std::to_string(b.halvings)
                             + " halvings of its sub-batch: lower "
                             + key("MAX_BATCH_INPUTS") + " or raise "
                             + key("MAX_RESPONSE_BYTES")
                         : " for a single input: raise "
                             + key("MAX_RESPONSE_BYTES"));
}

void on_done(self_ptr self, uint64_t tag, attempt_result& res) {
  auto& st = self->state;
  if (st.finishing)
    return;
  auto it = std::find_if(st.batches.begin(), st.batches.end(),
                         [tag](auto& b) {
                           return b.at == phase::running && b.req.tag == tag;
                         });
  if (it == st.batches.end())
    return;
  auto& b = *it;
  auto i = static_cast<size_t>(it - st.batches.begin());
  auto source = b.req.admitted.source;
  std::vector<std::vector<float>> vectors;
  if (res.kind == outcome::ok) {
    decode_embeddings(res.content, b.range.end - b.range.begin, vectors, res);
    if (res.kind == outcome::ok && st.dim != 0
        && vectors.front().size() != st.dim) {
      res.kind = outcome::result_invalid;
      res.reason = "dimension_mismatch";
      res.error_message = "vectors of length "
                          + std::to_string(vectors.front().size())
                          + ", the call's first sub-batch had "
                          + std::to_string(st.dim);
    }
  }
  res.content.clear();
  auto settled = settle_amount(res, b.req.admitted.granted_permit.est);
  end_request(self, b, res.kind, settled, res.retry_after_s, &res);
  --st.busy;
  st.last.note(source, res);
  if (res.kind == outcome::source_rejected
      && res.reason == reason_response_too_large) {
    on_too_large(self, i, source);
    pump(self);
    return;
  }
  switch (res.kind) {
    case outcome::ok:
      if (st.dim == 0)
        st.dim = vectors.front().size();
      succeed_batch(self, b, vectors, res, source, settled);
      if (std::all_of(st.batches.begin(), st.batches.end(),
                      [](auto& x) { return x.at == phase::done; })) {
        st.finishing = true;
        maybe_deliver(self);
        return;
      }
      break;
    case outcome::request_rejected:
    case outcome::source_rejected:
      // Sources differ in what they accept (batch size, input length):
      // another source may take this sub-batch; no budget spent.
      b.retry.excluded.push_back(source);
      b.retry.rejected(res);
      b.at = phase::ready;
      break;
    default: {
      if (res.reason == "dimension_mismatch")
        b.retry.excluded.push_back(source); // it would answer the same again
      // A 429 spends no budget; the gateway's cooldown memo keeps the
      // source away.
      auto delay = after_failure(*st.args.scope, b.retry, res.kind, source,
                                 st.rng);
      if (!delay) {
        fail(self, error_code::retry_exhausted,
             budget_message(*st.args.scope) + " for inputs "
               + std::to_string(b.range.begin) + ".."
               + std::to_string(b.range.end - 1));
        return;
      }
      retry_later(self, i, *delay);
      break;
    }
  }
  pump(self);
}

/// The smallest per-source limit of the scope: any sub-batch may land on
/// any source (only the pinned one when the call is pinned).
batch_splitter splitter_of(const scope_config& scope, const std::string& pin) {
  auto inputs = std::numeric_limits<int64_t>::max();
  auto tokens = std::numeric_limits<int64_t>::max();
  for (auto& src : scope.sources) {
    if (!pin.empty() && src.name != pin)
      continue;
    inputs = std::min(inputs, src.max_batch_inputs);
    tokens = std::min(tokens, src.max_batch_tokens);
  }
  return batch_splitter{inputs, tokens};
}

} // namespace

embed_call_actor::behavior_type
embed_call(self_ptr self, embed_call_args args) {
  init_side_call(self, std::move(args),
                 [](self_ptr self, error_code code, const char* what) {
                   fail(self, code, what);
                 });
  return {
    [self](atom::start) -> caf::result<embed_response> {
      return start_side_call<embed_response>(self, [self] {
        auto& st = self->state;
        auto pinned_out = pin_exclusions(st.args);
        for (auto& range : splitter_of(*st.args.scope, st.args.pin)
                             .split(*st.args.inputs)) {
          embed_batch_state b;
          b.range = range;
          b.retry.excluded = pinned_out;
          st.batches.push_back(std::move(b));
        }
        st.response.vectors.resize(st.args.inputs->size());
        pump(self);
      });
    },
    // The handlers below repeat in ocr_call (duplicates pairs them): a typed
    // behaviour is one list of handlers, and each calls its own actor's
    // on_done / fail.
    [](atom::first_token, uint64_t) {},
    [self](atom::done, uint64_t tag, attempt_result& res) {
      on_done(self, tag, res);
    },
    [self](atom::timer, timer_kind kind, uint64_t id) {
      if (kind == timer_kind::retry)
        on_retry_timer(self, id);
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
