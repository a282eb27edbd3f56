#include "actors/call_supervisor.hpp"

#include "actors/accounting.hpp"
#include "actors/attempt.hpp"
#include "actors/backend_call.hpp"
#include "actors/settlement.hpp"
#include "actors/side_call.hpp"
#include "actors/timer_table.hpp"
#include "config/support/log.hpp"

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <optional>

namespace pgw {

namespace {

using self_ptr = call_supervisor_actor::stateful_pointer<call_supervisor_state>;
using act = call_decision::act;

double ms_since(self_ptr self, caf::actor_clock::time_point from) {
  return ms_between(from, self->clock().now());
}

call_plan& plan_of(self_ptr self) {
  return *self->state.plan;
}

/// A live call forwards deltas as they come; a structured-output call never
/// does (its answer is validated and repaired first), so it is delivered as
/// one delta at the end, like a buffered answer.
bool is_live(const call_supervisor_state& st) {
  return static_cast<bool>(st.args.sink) && st.args.request->schema.empty();
}

/// The cost of `leg` (see actors/accounting.hpp), when known.
caf::optional<double> leg_cost(self_ptr self, const plan_leg& leg) {
  auto& st = self->state;
  auto kind = leg.done ? leg.result().kind
              : leg.label == outcome::hedge_cancelled ? outcome::hedge_cancelled
                                                 : outcome::cancelled;
  auto model = leg.done && !leg.result().model.empty() ? leg.result().model
                                                      : leg.model;
  return attempt_cost(st.args.prices.get(), st.args.scope->name, leg.source,
                      model, kind, leg.done ? &leg.result() : nullptr,
                      leg.done || leg.unsent ? 0 : leg.est);
}

/// Writes the call row (and the terminal failure row of a failed call).
void write_rows(self_ptr self) {
  auto& st = self->state;
  if (!st.args.telemetry)
    return;
  call_row row;
  row.call_id = st.args.call_id();
  row.scope = st.args.scope->name;
  row.started_at_ms = wall_ms(st.started_at, st.args.wall_offset_ms);
  row.attempts = plan_of(self).attempts();
  row.hedges = plan_of(self).hedges();
  row.latency_ms = ms_since(self, st.started_at);
  row.losers_cost_usd = plan_of(self).losers_cost_usd();
  if (st.args.telemetry_content)
    for (auto& m : st.args.request->messages)
      if (m.role == "user")
        row.prompt = m.content;
  if (st.response) {
    fill_ok_call(row, st.response->stats);
    self->send(st.args.telemetry, atom::record_v, std::move(row));
    return;
  }
  auto fail_row = fail_call(row, st.failure);
  self->send(st.args.telemetry, atom::record_v, std::move(row));
  self->send(st.args.telemetry, atom::record_v, std::move(fail_row));
}

void settle_cache(self_ptr self);
void send_terminal(self_ptr self);

/// The losers' whole answers (refused, or a tie lost) go with the result:
/// in the answer's stats, or in the error's `spent` (serve's /metrics
/// counts them as upstream work).
void attach_unreturned(self_ptr self) {
  auto& st = self->state;
  const auto& unreturned = plan_of(self).unreturned();
  if (unreturned.empty())
    return;
  if (st.response)
    st.response->stats.unreturned = unreturned;
  else
    st.failure = with_spent(st.failure, unreturned);
}

/// Delivers the decided result once every attempt is gone, then quits.
void maybe_deliver(self_ptr self) {
  auto& st = self->state;
  if (!plan_of(self).ready_to_deliver())
    return;
  if (!st.delivered) {
    st.delivered = true;
    if (st.response)
      st.response->stats.total_latency_ms = ms_since(self, st.started_at);
    attach_unreturned(self);
    write_rows(self);
    settle_cache(self);
    send_terminal(self);
    if (st.response)
      st.promise.deliver(std::move(*st.response));
    else
      st.promise.deliver(st.failure);
  }
  // An admission under way (a stalled Redis) may still grant a permit: the
  // caller has its answer, and this actor stays until the admission
  // returns, so the permit is given back (abandoned), never leaked.
  if (plan_of(self).awaiting_reply())
    return;
  self->quit();
}

/// Stops a running leg (its exit handler settles and closes the
/// connection); the plan labelled it `label` and counted it as a loser.
void stop_leg(self_ptr self, uint64_t id, outcome label) {
  auto& actor = self->state.leg_actors[id].actor;
  // The label goes first: same sender, same receiver, so the attempt
  // reads it before its exit handler runs.
  self->send(actor, atom::stop_v, label);
  self->send_exit(actor, caf::exit_reason::user_shutdown);
}

/// Sends the sink one delta; the first one names the committed source.
void forward_delta(self_ptr self, stream_delta delta,
                   const std::string& source) {
  auto& st = self->state;
  if (plan_of(self).streamed_bytes() == 0) {
    delta.source = source;
    delta.cache_hit = st.cache_hit;
  }
  int64_t bytes = static_cast<int64_t>(delta.content.size()
                                       + delta.reasoning_content.size());
  for (auto& t : delta.tool_calls)
    bytes += static_cast<int64_t>(t.name.size() + t.arguments.size());
  plan_of(self).add_streamed(std::max<int64_t>(bytes, 1));
  // anon_send: a typed actor cannot send() to a dynamically typed one; the
  // order of this actor's messages to the sink is kept all the same.
  caf::anon_send(st.args.sink, atom::delta_v, std::move(delta));
}

/// A call that never streamed (buffered upstream, cache hit, structured
/// output): the sink gets the whole answer as one delta (a structured
/// call's validated JSON).
void forward_whole_answer(self_ptr self, const chat_response& resp) {
  stream_delta d;
  d.content = resp.parsed.empty() ? resp.content : resp.parsed;
  d.reasoning_content = resp.reasoning_content;
  for (size_t i = 0; i < resp.tool_calls.size(); ++i) {
    auto& c = resp.tool_calls[i];
    d.tool_calls.push_back(
      tool_call_delta{static_cast<int32_t>(i), c.id, c.type, c.name,
                      c.arguments});
  }
  forward_delta(self, std::move(d), resp.source);
}

/// The sink's terminal event: the answer (after its deltas) or the error.
void send_terminal(self_ptr self) {
  auto& st = self->state;
  if (!st.args.sink)
    return;
  if (st.response) {
    if (plan_of(self).committed() == 0)
      forward_whole_answer(self, *st.response);
    caf::anon_send(st.args.sink, atom::stream_end_v, *st.response);
  } else {
    caf::anon_send(st.args.sink, atom::stream_end_v, st.failure);
  }
}

// -- structured output: the schema and the answer ------------------------------

/// Structured output: compiles the call's schema (once per process per
/// schema text; a text not compiled yet on the check runner, as answers
/// are checked: compiling a large schema takes tens of milliseconds), then
/// `begin_call`. An invalid schema is the caller's error, before any
/// upstream call: the call fails `invalid_request`. A call without a
/// schema begins at once.
void structured_start(self_ptr self);

bool consult_cache(self_ptr self);
void begin_call(self_ptr self);

/// Structured output: the validated JSON (`parsed`, from the attempt's or
/// the cache lookup's check: an answer is validated once) and how it was
/// obtained. An answer with tool calls is returned as it is, with no
/// `parsed`.
void structured_fill(self_ptr self, chat_response& resp, std::string parsed,
                     bool repaired) {
  auto& st = self->state;
  if (!st.schema)
    return;
  resp.stats.reasks = plan_of(self).reasks();
  if (!resp.tool_calls.empty())
    return;
  resp.parsed = std::move(parsed);
  resp.stats.repaired = repaired;
}

/// Leg `id` won: its result becomes the answer.
void succeed(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto& leg = *plan_of(self).leg(id);
  auto& res = leg.result();
  chat_response resp;
  resp.content = std::move(res.content);
  resp.reasoning_content = std::move(res.reasoning_content);
  resp.finish_reason = res.finish_reason;
  resp.source = leg.source;
  auto src = st.args.sources->find(leg.source);
  resp.model = !res.model.empty() ? res.model
               : src != st.args.sources->end() ? src->second.config->model
                                               : std::string{};
  resp.usage.prompt_tokens = res.prompt_tokens;
  resp.usage.completion_tokens = res.completion_tokens;
  resp.usage.total_tokens = res.prompt_tokens + res.completion_tokens;
  resp.tool_calls = std::move(res.tool_calls);
  resp.call_id = st.args.call_id();
  auto& stats = resp.stats;
  stats.attempts = plan_of(self).attempts();
  stats.generation_ms = res.latency_ms;
  stats.ttft_ms = res.ttft_ms;
  stats.hedges = plan_of(self).hedges();
  stats.hedge_won = leg.hedge;
  stats.source = resp.source;
  stats.model = resp.model;
  stats.prompt_tokens = res.prompt_tokens;
  stats.completion_tokens = res.completion_tokens;
  stats.usage_source = usage_source_of(&res);
  // Without usage its permit settled the estimate (SPEC §8).
  if (auto w = settled_work(&res, leg.est))
    stats.estimated_tokens = w->estimated_tokens;
  stats.cost_usd = leg_cost(self, leg);
  stats.malformed_events = res.malformed_events;
  if (res.malformed_events > 0)
    log::warn("gateway", "call {}: source {} sent {} stream event(s) that "
                         "were not valid JSON; they were skipped and the "
                         "answer may lack what they carried",
              resp.call_id, leg.source, res.malformed_events);
  structured_fill(self, resp, std::move(res.parsed), res.repaired);
  st.response = std::make_unique<chat_response>(std::move(resp));
}

/// Structured output: the request of a leg on `src` — the round's messages
/// (with the last bad answer and its errors after a mismatch) asked with the
/// rung the ladder gives that source — and the schema its attempt checks
/// answers against. Returns the rung (`auto_select` for a free-text call).
schema_strategy structured_leg(self_ptr self, const source_config& src,
                               attempt_args& aa) {
  auto& st = self->state;
  if (!st.schema)
    return schema_strategy::auto_select;
  auto req = std::make_shared<chat_request>(*st.args.request);
  req->messages = st.conversation;
  req->strategy = st.args.ladder->rung_for(src, req->strategy);
  aa.request = std::move(req);
  aa.schema = st.schema;
  return aa.request->strategy;
}

/// Spawns leg `id`'s attempt with the permit of `admitted` (a source the
/// plan checked this call knows).
void start_leg(self_ptr self, uint64_t id, admit_result& admitted,
               bool hedge) {
  auto& st = self->state;
  auto src = st.args.sources->find(admitted.source);
  attempt_args aa;
  aa.leg = id;
  aa.supervisor = self;
  aa.gateway = st.args.gateway;
  aa.transport = st.args.transport;
  aa.source = src->second.config;
  aa.request = st.args.request;
  auto rung = structured_leg(self, *src->second.config, aa);
  aa.stream = st.args.stream;
  aa.forward_deltas = is_live(st);
  aa.hedge = hedge;
  aa.limiter = src->second.limiter;
  aa.breaker = src->second.breaker;
  aa.granted_permit = std::move(admitted.granted_permit);
  aa.epoch = admitted.epoch;
  aa.probe = admitted.probe;
  aa.telemetry = st.args.telemetry;
  aa.prices = st.args.prices;
  aa.wall_offset_ms = st.args.wall_offset_ms;
  aa.telemetry_content = st.args.telemetry_content;
  aa.check_runner = st.args.check_runner;
  aa.gate = std::make_shared<send_gate>();
  auto& handle = st.leg_actors[id];
  handle.rung = rung;
  handle.gate = aa.gate;
  handle.actor = self->spawn(attempt, std::move(aa));
  self->monitor(handle.actor);
}

void ask_admission(self_ptr self, admit_request req, bool hedge);

/// Performs the plan's decisions in order, then delivers when the call is
/// decided and every attempt is gone.
void perform(self_ptr self, call_decisions decisions) {
  auto& st = self->state;
  for (auto& d : decisions) {
    switch (d.what) {
      case act::ask_admission:
        ask_admission(self, std::move(d.admission), d.hedge);
        break;
      case act::start_leg:
        start_leg(self, d.leg, d.admitted, d.hedge);
        break;
      case act::give_back:
        self->send(st.args.gateway, atom::abandon_v, d.admitted);
        break;
      case act::arm_timer:
        // Every timer of the call goes through the gateway (why:
        // actors/timer_table.hpp).
        arm_timer(self, d.timer, d.timer_id, d.delay);
        break;
      case act::commit:
        break; // the plan forwards only that leg's deltas from now on
      case act::stop_leg:
        stop_leg(self, d.leg, d.label);
        break;
      case act::decide_later:
        // Decide after the messages already in the mailbox: a primary
        // success that arrived at the same instant wins (SPEC §9).
        self->send(self, atom::decide_v, d.leg);
        break;
      case act::succeed:
        succeed(self, d.leg);
        break;
      case act::fail:
        st.failure = make_error(d.code, std::move(d.detail));
        break;
    }
  }
  maybe_deliver(self);
}

void ask_admission(self_ptr self, admit_request req, bool hedge) {
  self
    ->request(self->state.args.gateway, caf::infinite, atom::admit_v,
              std::move(req))
    .then(
      [self, hedge](admit_result& r) {
        auto now = self->clock().now();
        perform(self, r.admitted ? plan_of(self).admitted(r, hedge, now)
                                 : plan_of(self).refused(r, hedge, now));
      },
      [self, hedge](caf::error& err) {
        perform(self, plan_of(self).admission_error(err, hedge));
      });
}

/// Structured output: takes the compiled schema, or fails the call with
/// why it is not one (false).
bool use_schema(self_ptr self, caf::expected<schema_ptr> schema) {
  auto& st = self->state;
  if (!schema) {
    auto d = detail_of(schema.error());
    perform(self, plan_of(self).fail(error_code::invalid_request,
                                     d != nullptr ? d->message
                                                  : describe(schema.error())));
    return false;
  }
  st.schema = std::move(*schema);
  st.conversation = st.args.request->messages;
  return true;
}

/// The call's first step once its schema (if any) is compiled: the cache,
/// else the first admission. A cache hit answers before any timer is armed
/// (a waiter's wait is bounded by the cache itself), but for the deadline
/// of a call whose schema or stored answer went to the check runner.
void begin_call(self_ptr self) {
  if (!consult_cache(self))
    perform(self, plan_of(self).begin(self->clock().now()));
}

/// Runs `work` on the check runner (inside this actor without one), then
/// `done` here, for a call that has not begun: the work may queue behind
/// other checks, so the call's deadline is armed first and holds meanwhile.
template <class Work, class Done>
void check_before_begin(self_ptr self, Work work, Done done) {
  auto& st = self->state;
  if (st.args.check_runner)
    perform(self, plan_of(self).arm_deadline(self->clock().now()));
  detail::run(self, st.args.check_runner, std::move(work), std::move(done));
}

void structured_start(self_ptr self) {
  auto& st = self->state;
  const auto& text = st.args.request->schema;
  if (text.empty())
    return begin_call(self);
  if (auto known = compiled_schema_of(text)) {
    if (use_schema(self, std::move(known)))
      begin_call(self);
    return;
  }
  check_before_begin(
    self,
    [request = st.args.request] { return compile_schema(request->schema); },
    [self](caf::expected<schema_ptr> schema) {
      // A call cancelled (or shut down) meanwhile is answered already.
      if (plan_of(self).finishing())
        return;
      if (use_schema(self, std::move(schema)))
        begin_call(self);
    });
}

/// Structured output: a 400 that rejected the response format on an `auto`
/// call moves that source one rung down for the process (the plan runs the
/// attempt again at once, at no budget cost). False when this is not such
/// a rejection, or when there is no lower rung.
bool lower_rung(self_ptr self, const plan_leg& leg) {
  auto& st = self->state;
  if (!st.schema || st.args.request->strategy != schema_strategy::auto_select
      || !rejects_response_format(leg.result()))
    return false;
  auto src = st.args.sources->find(leg.source);
  return src != st.args.sources->end()
         && st.args.ladder->lower(*src->second.config,
                                  st.leg_actors[leg.id].rung);
}

/// Structured output: keeps the validator's errors of a mismatched answer
/// and makes the next round's messages from it; returns the errors as one
/// line of text (for the call's error message).
std::string note_mismatch(self_ptr self, const plan_leg& leg) {
  auto& st = self->state;
  if (!st.schema)
    return {};
  // The attempt's check: its errors (an answer is validated once).
  const auto& issues = leg.result().schema_issues;
  st.conversation = reask_messages(st.args.request->messages,
                                   leg.result().content, issues);
  return format_issues_line(issues);
}

call_plan_args plan_args(self_ptr self) {
  auto& st = self->state;
  call_plan_args pa;
  pa.call_id = st.args.call_id();
  pa.scope = st.args.scope;
  pa.live = is_live(st);
  pa.structured = !st.args.request->schema.empty();
  pa.deadline_s = st.args.deadline_s;
  pa.seed = st.args.seed;
  pa.withhold = [self](const plan_leg& leg) {
    auto& legs = self->state.leg_actors;
    auto it = legs.find(leg.id);
    return it != legs.end() && it->second.gate && it->second.gate->withhold();
  };
  pa.cost = [self](const plan_leg& leg) -> std::optional<double> {
    if (auto c = leg_cost(self, leg))
      return *c;
    return std::nullopt;
  };
  pa.lower_rung = [self](const plan_leg& leg) { return lower_rung(self, leg); };
  pa.note_mismatch = [self](const plan_leg& leg) {
    return note_mismatch(self, leg);
  };
  return pa;
}

void on_down(self_ptr self, caf::down_msg& msg) {
  auto& st = self->state;
  for (auto& [id, handle] : st.leg_actors)
    if (handle.actor.address() == msg.source) {
      perform(self, plan_of(self).leg_down(id, self->clock().now()));
      return;
    }
  maybe_deliver(self);
}

// -- response cache (issue 14) -------------------------------------------------

/// Structured output: a stored answer is served only when it still matches
/// the call's schema (an entry written by another version, or altered in a
/// shared store, may not); else the call goes upstream as on a miss, and
/// its answer is stored over the entry. True when `check` (the stored
/// answer's) says it fits; else logs why not.
bool stored_answer_fits(self_ptr self, const structured_check& check) {
  auto& st = self->state;
  if (!check.valid)
    log::warn("gateway", "call {}: the cached answer does not match the "
                         "call's schema ({}); asking the sources instead",
              st.args.call_id(), format_issues_line(check.issues));
  return check.valid;
}

/// The cache's verdict, once a stored structured answer is checked
/// (`check`; none when the call has no schema or the answer holds tool
/// calls): answers from the cache on a fitting hit, else goes on as on a
/// miss. Run after a check on the runner too, as the verdict's own handler
/// would: a call cancelled meanwhile is finishing and the plan ignores it.
void cache_answered(self_ptr self, cache_verdict v, bool hit,
                    std::optional<structured_check> check) {
  auto& st = self->state;
  if (hit && check && !stored_answer_fits(self, *check)) {
    hit = false; // asked upstream; its answer replaces the entry
    self->send(st.args.cache, atom::unfit_v, v.coalesced);
  }
  if (hit && !plan_of(self).finishing()) {
    st.cache_hit = true;
    st.response = std::make_unique<chat_response>(std::move(v.response));
    // A stored answer keeps its content, not `parsed`: a structured call
    // validated (and repaired) it again, as an upstream answer.
    structured_fill(self, *st.response,
                    check ? std::move(check->json) : std::string{},
                    check && check->repaired);
  }
  perform(self, plan_of(self).cache_answered(hit, self->clock().now()));
}

/// A structured hit's check, on the check runner (inside this actor
/// without one), as an attempt checks an upstream answer.
void check_stored(self_ptr self, cache_verdict v) {
  auto& st = self->state;
  check_before_begin(
    self,
    [schema = st.schema, v = std::move(v)]() mutable {
      auto check = check_answer(*schema, v.response.content);
      return std::make_pair(std::move(v), std::move(check));
    },
    [self](std::pair<cache_verdict, structured_check> checked) {
      cache_answered(self, std::move(checked.first), true,
                     std::move(checked.second));
    });
}

/// Asks the cache before the first admission. Returns false when the call
/// has no cache (admit at once); else the verdict decides: a hit answers
/// the call, lead or pass admit, an error (a wait that outlived the
/// deadline, a bad `cache` value) fails it.
bool consult_cache(self_ptr self) {
  auto& st = self->state;
  if (!st.args.cache || st.args.cache_key.empty())
    return false;
  const auto& req = *st.args.request;
  cache_lookup q{st.args.cache_key, req.cache, req.max_age_s,
                 st.args.deadline_s, st.args.call_id(), st.args.scope->name};
  plan_of(self).consulting_cache();
  self->request(st.args.cache, caf::infinite, atom::cache_get_v, std::move(q))
    .then(
      [self](cache_verdict& v) {
        auto& st = self->state;
        if (v.kind == cache_verdict_kind::lead)
          st.cache_lease = v.lease;
        bool hit = v.kind == cache_verdict_kind::hit;
        if (hit && st.schema && v.response.tool_calls.empty())
          return check_stored(self, std::move(v));
        cache_answered(self, std::move(v), hit, std::nullopt);
      },
      [self](caf::error& err) {
        auto code = code_of(err);
        perform(self, plan_of(self).cache_failed(
                        code ? *code : error_code::internal, words_of(err)));
      });
  return true;
}

/// At the end of the call: offers a success to the cache (it stores it when
/// complete and valid, and serves the calls waiting on this one), or hands
/// the lead to the next waiter.
void settle_cache(self_ptr self) {
  auto& st = self->state;
  if (!st.args.cache || st.cache_hit)
    return;
  if (st.response)
    self->send(st.args.cache, atom::cache_put_v, st.args.cache_key,
               st.cache_lease, st.args.request->cache, st.args.scope->name,
               *st.response);
  else if (st.cache_lease != 0)
    self->send(st.args.cache, atom::abandon_v, st.args.cache_key,
               st.cache_lease);
}

} // namespace

call_supervisor_actor::behavior_type
call_supervisor(self_ptr self, call_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.plan.emplace(plan_args(self));
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    // Shutdown from outside: stop the attempts, answer, quit.
    auto& st = self->state;
    for (auto& leg : plan_of(self).legs())
      if (!leg.down && !leg.done)
        self->send_exit(st.leg_actors[leg.id].actor,
                        caf::exit_reason::user_shutdown);
    if (st.started && !st.delivered) {
      st.delivered = true;
      st.response.reset();
      st.failure = make_error(error_code::cancelled,
                              plan_of(self).detail("the gateway shut down"));
      send_terminal(self);
      st.promise.deliver(st.failure);
    }
    self->quit(msg.reason);
  });
  return {
    [self](atom::start) -> caf::result<chat_response> {
      auto& st = self->state;
      // A second start is refused without touching the first caller's
      // promise (it would otherwise never be answered).
      if (st.started)
        return make_error(error_code::internal, "call started twice");
      st.promise = self->make_response_promise<chat_response>();
      st.started = true;
      st.started_at = self->clock().now();
      plan_of(self).start(st.started_at, st.args.request->source);
      structured_start(self);
      return st.promise;
    },
    [self](atom::first_token, uint64_t id) {
      perform(self, plan_of(self).first_token(id, self->clock().now()));
    },
    [self](atom::delta, uint64_t id, stream_delta& delta) {
      if (!plan_of(self).forwards_delta(id))
        return;
      if (auto leg = plan_of(self).leg(id))
        forward_delta(self, std::move(delta), leg->source);
    },
    [self](atom::decide, uint64_t id) {
      perform(self, plan_of(self).decide(id));
    },
    [self](atom::done, uint64_t id, attempt_result& res) {
      perform(self, plan_of(self).leg_done(id, std::move(res),
                                           self->clock().now()));
    },
    [self](atom::timer, timer_kind kind, uint64_t id) {
      perform(self, plan_of(self).timer_fired(kind, id, self->clock().now()));
    },
    [self](atom::cancel) {
      perform(self, plan_of(self).cancel());
    },
    [](atom::internal, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
