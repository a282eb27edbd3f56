#include "actors/call_supervisor.hpp"

#include "actors/accounting.hpp"
#include "actors/attempt.hpp"
#include "actors/selector.hpp"
#include "actors/side_call.hpp"
#include "actors/timer_table.hpp"
#include "config/limits.hpp"

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace pgw {

namespace {

using self_ptr = call_supervisor_actor::stateful_pointer<call_supervisor_state>;

/// Rounded up, so a wait never ends just before what it waits for.
caf::timespan to_timespan(double seconds) {
  return saturating_duration(seconds);
}

/// Shortest wait before admitting again after a refusal: a refusal that
/// says "now" (a window edge in floating point) must not spin.
constexpr double min_wait_s = 0.001;

double seconds_between(caf::actor_clock::time_point from,
                       caf::actor_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double ms_since(self_ptr self, caf::actor_clock::time_point from) {
  return ms_between(from, self->clock().now());
}

bool has_live_legs(self_ptr self) {
  for (auto& leg : self->state.legs)
    if (!leg.done && !leg.down)
      return true;
  return false;
}

call_leg* find_leg(self_ptr self, uint64_t id) {
  for (auto& leg : self->state.legs)
    if (leg.id == id)
      return &leg;
  return nullptr;
}

// -- live streaming: the decisions (issue 13) ----------------------------------

/// A live call forwards deltas as they come; a structured-output call never
/// does (its answer is validated and repaired first), so it is delivered as
/// one delta at the end, like a buffered answer.
bool is_live(const call_supervisor_state& st) {
  return static_cast<bool>(st.args.sink) && st.args.request->schema.empty();
}

/// True when `leg`'s first token commits the call: live, not yet
/// committed, and the call is still running.
bool commits_on_first_token(const call_supervisor_state& st) {
  return is_live(st) && st.committed == 0 && !st.finishing;
}

/// Only the committed leg's deltas reach the sink, and none once the
/// call's result is decided (the terminal event is the last message).
bool forwards_delta(const call_supervisor_state& st, uint64_t leg) {
  return st.committed == leg && !st.finishing;
}

/// After the commit a failure cannot be retried: the caller has part of
/// one source's answer. A caller's cancellation stays `cancelled`.
bool interrupts_stream(const call_supervisor_state& st, error_code code) {
  return st.committed != 0 && code != error_code::cancelled
         && code != error_code::stream_interrupted;
}

/// The cost of `leg` (see actors/accounting.hpp), when known.
caf::optional<double> leg_cost(self_ptr self, const call_leg& leg) {
  auto& st = self->state;
  auto kind = leg.done ? leg.result.kind
              : leg.label == "hedge_cancelled" ? outcome::hedge_cancelled
                                                 : outcome::cancelled;
  auto model = leg.done && !leg.result.model.empty() ? leg.result.model
                                                      : leg.model;
  return attempt_cost(st.args.prices.get(), st.args.scope->name, leg.source,
                      model, kind, leg.done ? &leg.result : nullptr,
                      leg.done ? 0 : leg.est);
}

/// Adds a leg that did not win to the call's losers' cost.
void account_loser(self_ptr self, const call_leg& leg) {
  if (auto cost = leg_cost(self, leg))
    self->state.losers_cost_usd += *cost;
}

/// Writes the call row (and the terminal failure row of a failed call).
void write_rows(self_ptr self) {
  auto& st = self->state;
  if (!st.args.telemetry)
    return;
  call_row row;
  row.call_id = st.args.call_id;
  row.scope = st.args.scope->name;
  row.started_at_ms = wall_ms(st.started_at, st.args.wall_offset_ms);
  row.attempts = st.attempts;
  row.hedges = st.hedges;
  row.latency_ms = ms_since(self, st.started_at);
  row.losers_cost_usd = st.losers_cost_usd;
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

/// Delivers the decided result once every attempt is gone, then quits.
void maybe_deliver(self_ptr self) {
  auto& st = self->state;
  if (!st.finishing)
    return;
  for (auto& leg : st.legs)
    if (!leg.down)
      return;
  if (!st.delivered) {
    st.delivered = true;
    if (st.response)
      st.response->stats.total_latency_ms = ms_since(self, st.started_at);
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
  if (st.admitting || st.hedge_admitting)
    return;
  self->quit();
}

/// Stops a running leg (its exit handler settles and closes the
/// connection) and counts it as a loser labelled `label`.
void stop_leg(self_ptr self, call_leg& leg, outcome label) {
  leg.label = to_string(label);
  account_loser(self, leg);
  // The label goes first: same sender, same receiver, so the attempt
  // reads it before its exit handler runs.
  self->send(leg.actor, atom::stop_v, label);
  self->send_exit(leg.actor, caf::exit_reason::user_shutdown);
}

/// Decides the call: stops every live attempt (their exit handlers settle and
/// close connections), then delivers after they are gone.
void finish(self_ptr self) {
  auto& st = self->state;
  st.finishing = true;
  // Losers of a won call are hedge_cancelled; a call that failed (deadline,
  // caller, stall) cancels its legs. Legs stopped at a live call's commit
  // are labelled and counted already.
  auto label = st.response ? outcome::hedge_cancelled : outcome::cancelled;
  if (!st.response)
    for (auto& leg : st.legs)
      if (leg.done && leg.label.empty())
        account_loser(self, leg); // a failed call has no winner
  for (auto& leg : st.legs)
    if (!leg.down && !leg.done && leg.label.empty())
      stop_leg(self, leg, label);
  maybe_deliver(self);
}

/// Live streaming: the first leg to produce a token wins the call; every
/// other leg is the loser (SPEC §12), stopped and settled
/// `hedge_cancelled`.
void commit(self_ptr self, call_leg& winner) {
  auto& st = self->state;
  st.committed = winner.id;
  for (auto& leg : st.legs)
    if (leg.id != winner.id && !leg.down && !leg.done && leg.label.empty())
      stop_leg(self, leg, outcome::hedge_cancelled);
}

/// Sends the sink one delta; the first one names the committed source.
void forward_delta(self_ptr self, stream_delta delta,
                   const std::string& source) {
  auto& st = self->state;
  if (st.streamed_bytes == 0) {
    delta.source = source;
    delta.cache_hit = st.cache_hit;
  }
  int64_t bytes = static_cast<int64_t>(delta.content.size()
                                       + delta.reasoning_content.size());
  for (auto& t : delta.tool_calls)
    bytes += static_cast<int64_t>(t.name.size() + t.arguments.size());
  st.streamed_bytes += std::max<int64_t>(bytes, 1);
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
    if (st.committed == 0)
      forward_whole_answer(self, *st.response);
    caf::anon_send(st.args.sink, atom::stream_end_v, *st.response);
  } else {
    caf::anon_send(st.args.sink, atom::stream_end_v, st.failure);
  }
}

/// Every source's last reason, with status and upstream message where
/// known: what the caller's error lists.
std::map<std::string, source_error> source_errors(self_ptr self) {
  auto& st = self->state;
  auto out = st.last_error;
  for (auto& [source, reason] : st.last_reason) {
    auto& e = out[source];
    if (e.reason != reason) // a later skip (cooling, ...) replaced it
      e = source_error{reason, 0, {}, {}};
  }
  return out;
}

error_detail make_detail(self_ptr self, std::string message) {
  auto& st = self->state;
  error_detail detail;
  detail.message = std::move(message);
  detail.per_source = st.last_reason;
  detail.call_id = st.args.call_id;
  detail.sources = source_errors(self);
  return detail;
}

/// `message`, followed by what each source did last (when any).
std::string with_sources(self_ptr self, std::string message) {
  auto lines = describe(source_errors(self));
  return lines.empty() ? message : message + ": " + lines;
}

/// The `stream_interrupted` detail of a live call whose committed leg
/// failed (or whose deadline passed) for `reason`.
error_detail interruption(self_ptr self, error_detail detail,
                          const std::string& reason) {
  auto& st = self->state;
  auto leg = find_leg(self, st.committed);
  detail.stream_source = leg != nullptr ? leg->source : std::string{};
  detail.stream_reason = reason;
  detail.streamed_bytes = st.streamed_bytes;
  if (leg != nullptr && leg->done) {
    detail.usage_reported = leg->result.usage_reported;
    detail.prompt_tokens = leg->result.prompt_tokens;
    detail.completion_tokens = leg->result.completion_tokens;
  }
  detail.message = "the stream from source " + detail.stream_source
                   + " broke after it began (" + reason + ", "
                   + std::to_string(st.streamed_bytes)
                   + " bytes sent): the partial answer cannot be completed "
                     "by another source";
  detail.retry_after_s = caf::none;
  return detail;
}

void fail(self_ptr self, error_code code, error_detail detail) {
  auto& st = self->state;
  if (st.finishing)
    return;
  if (interrupts_stream(st, code)) {
    detail = interruption(self, std::move(detail), to_string(code));
    code = error_code::stream_interrupted;
  }
  st.failure = make_error(code, std::move(detail));
  finish(self);
}

void fail(self_ptr self, error_code code, std::string message,
          caf::optional<double> retry_after = caf::none) {
  auto detail = make_detail(self, std::move(message));
  detail.retry_after_s = retry_after;
  fail(self, code, std::move(detail));
}

void fail_with_upstream(self_ptr self, error_code code, std::string message,
                        const attempt_result& res) {
  auto detail = make_detail(self, std::move(message));
  detail.upstream_status = res.http_status;
  detail.upstream_code = res.error_code;
  detail.upstream_message = res.error_message;
  fail(self, code, std::move(detail));
}

// -- structured output: the schema and the answer ------------------------------

/// Structured output: compiles the call's schema (once per process per
/// schema text). An invalid schema is the caller's error, before any
/// upstream call: the call fails `invalid_request` and this returns false.
bool structured_start(self_ptr self) {
  auto& st = self->state;
  if (st.args.request->schema.empty())
    return true;
  auto schema = compile_schema(st.args.request->schema);
  if (!schema) {
    auto d = detail_of(schema.error());
    fail(self, error_code::invalid_request,
         d != nullptr ? d->message : describe(schema.error()));
    return false;
  }
  st.schema = std::move(*schema);
  st.conversation = st.args.request->messages;
  return true;
}

/// Structured output: the validated JSON and how it was obtained. The
/// attempt already checked the answer (an invalid one never reaches here);
/// the check is repeated for its value (the schema is compiled, it is cheap).
void structured_fill(self_ptr self, chat_response& resp) {
  auto& st = self->state;
  if (!st.schema)
    return;
  auto check = check_answer(*st.schema, resp.content);
  resp.parsed = std::move(check.json);
  resp.stats.repaired = check.repaired;
  resp.stats.reasks = st.reasks;
}

void succeed(self_ptr self, call_leg& leg) {
  auto& st = self->state;
  auto& res = leg.result;
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
  resp.call_id = st.args.call_id;
  auto& stats = resp.stats;
  stats.attempts = st.attempts;
  stats.generation_ms = res.latency_ms;
  stats.ttft_ms = res.ttft_ms;
  stats.hedges = st.hedges;
  stats.hedge_won = leg.hedge;
  stats.source = resp.source;
  stats.model = resp.model;
  stats.prompt_tokens = res.prompt_tokens;
  stats.completion_tokens = res.completion_tokens;
  stats.usage_source = usage_source_of(&res);
  stats.cost_usd = leg_cost(self, leg);
  // Legs of this round that ended without winning (a tie lost to the
  // primary, a failed leg) are losers too.
  for (auto& other : st.legs)
    if (other.done && other.id != leg.id && other.label.empty())
      account_loser(self, other);
  structured_fill(self, resp);
  st.response = std::make_unique<chat_response>(std::move(resp));
  finish(self);
}

/// Records progress: any upstream answer other than a rate limit, or a
/// first token. The stall timer checks it when it fires.
void progress(self_ptr self) {
  self->state.last_progress = self->clock().now();
}

/// Arms the stall timer at the gateway for the end of the window. Every
/// timer of the call goes through the gateway (why: actors/timer_table.hpp).
void arm_stall_timer(self_ptr self, caf::timespan in) {
  arm_timer(self, timer_kind::stall, 0, in);
}

void admit(self_ptr self);

/// Waits `delay_s`, then admits again; ends the call `stalled` instead when
/// the wait would cross the stall window.
void retry_after(self_ptr self, double delay_s,
                 caf::optional<double> retry_hint = caf::none) {
  auto& st = self->state;
  auto now = self->clock().now();
  auto idle = seconds_between(st.last_progress, now);
  if (idle + delay_s > st.args.scope->stall_window_s) {
    fail(self, error_code::stalled,
         with_sources(self, "no progress within STALL_WINDOW_S"), retry_hint ? retry_hint : caf::optional<double>{delay_s});
    return;
  }
  auto gen = ++st.retry_gen;
  if (delay_s <= 0)
    admit(self);
  else
    arm_timer(self, timer_kind::retry, gen, to_timespan(delay_s));
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

void start_leg(self_ptr self, admit_result& admitted, bool hedge) {
  auto& st = self->state;
  auto src = st.args.sources->find(admitted.source);
  if (src == st.args.sources->end()) {
    // The gateway admitted a source this call does not know: give it back.
    self->send(st.args.gateway, atom::abandon_v, admitted);
    fail(self, error_code::internal, "gateway admitted unknown source");
    return;
  }
  attempt_args aa;
  aa.leg = ++st.next_leg;
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
  aa.call_id = st.args.call_id;
  aa.telemetry = st.args.telemetry;
  aa.prices = st.args.prices;
  aa.wall_offset_ms = st.args.wall_offset_ms;
  aa.telemetry_content = st.args.telemetry_content;
  auto est = aa.granted_permit.est;
  if (hedge) {
    ++st.hedges;
    ++st.round_extra;
  } else {
    ++st.round;
    st.round_first_token = false;
    st.round_extra = 0;
    // Extra leg k may start at k × AFTER_S (issue 17): one timer each.
    if (auto& after = st.args.scope->hedge.after_s)
      for (int64_t k = 1; k <= st.args.scope->hedge.max_extra; ++k)
        arm_timer(self, timer_kind::hedge, st.round,
                  to_timespan(*after * static_cast<double>(k)));
  }
  call_leg leg;
  leg.id = aa.leg;
  leg.source = admitted.source;
  leg.hedge = hedge;
  leg.round = st.round;
  leg.est = est;
  leg.model = src->second.config->model;
  leg.rung = rung;
  leg.started = self->clock().now();
  leg.actor = self->spawn(attempt, std::move(aa));
  self->monitor(leg.actor);
  st.legs.push_back(std::move(leg));
  ++st.attempts;
}

void on_refused(self_ptr self, admit_result& r) {
  auto& st = self->state;
  for (auto& [source, reason] : r.skipped) {
    st.last_reason[source] = to_string(reason);
    source_error e{to_string(reason), 0, {}, {}};
    if (auto why = r.why.find(source); why != r.why.end())
      e.doing = "circuit open, " + why->second;
    st.last_error[source] = std::move(e);
  }
  if (r.refusal == admission_refusal::none) {
    if (!st.dead.empty()) {
      fail(self, error_code::retry_exhausted,
           with_sources(self, "every source is unusable"));
    } else if (st.last_rejection) {
      fail_with_upstream(self, error_code::request_rejected,
                         "every source rejected the request",
                         *st.last_rejection);
    } else {
      fail(self, error_code::retry_exhausted, "no source left to try");
    }
    return;
  }
  // Which skipped sources may be waited for: cooling ones (429 memo) and
  // quota by ON_QUOTA_FULL, open circuits by ON_CIRCUIT_OPEN (one rule for
  // chat, embedding and OCR calls: actors/side_call.hpp).
  bool quota = false;
  auto wait_s = refusal_wait(*st.args.scope, r, quota);
  if (!wait_s) {
    if (quota)
      fail(self, error_code::quota_exhausted,
           with_sources(self, "no source may run: quota full, cooling down "
                              "after a 429 or circuit open everywhere"),
           r.retry_after_s);
    else
      fail(self, error_code::circuit_open,
           with_sources(self, "every source's circuit is open"),
           r.retry_after_s);
    return;
  }
  // Wait for the earliest source, bounded by the stall window (and the
  // deadline's own timer).
  retry_after(self, std::max(*wait_s, min_wait_s), r.retry_after_s);
}

/// An admission request failed. A governance backend that is down fails
/// the call (fail closed, SPEC §7), also for a hedge; any other error fails
/// a primary admission and is ignored for a hedge (it is only an
/// optimisation).
void admission_failed(self_ptr self, const caf::error& err, bool hedge) {
  maybe_deliver(self);
  if (code_of(err) == error_code::governance_unavailable)
    fail(self, error_code::governance_unavailable,
         "the limiter or breaker backend is unavailable: " + describe(err));
  else if (!hedge)
    fail(self, error_code::internal, "admission failed: " + to_string(err));
}

void admit(self_ptr self) {
  auto& st = self->state;
  if (st.finishing || st.admitting)
    return;
  st.admitting = true;
  admit_request req;
  req.exclude = st.excluded;
  req.failures = st.failures;
  req.demote = st.demoted;
  self
    ->request(st.args.gateway, caf::infinite, atom::admit_v, std::move(req))
    .then(
      [self](admit_result& r) {
        auto& st = self->state;
        st.admitting = false;
        if (st.finishing) {
          if (r.admitted)
            self->send(st.args.gateway, atom::abandon_v, r);
          maybe_deliver(self);
          return;
        }
        if (r.admitted)
          start_leg(self, r, false);
        else
          on_refused(self, r);
      },
      [self](caf::error& err) {
        self->state.admitting = false;
        admission_failed(self, err, false);
      });
}

/// The running primary of the current round, or nullptr.
call_leg* live_primary(self_ptr self) {
  auto& st = self->state;
  for (auto& leg : st.legs)
    if (!leg.hedge && leg.round == st.round && !leg.done && !leg.down)
      return &leg;
  return nullptr;
}

/// True while a leg of the current round runs.
bool round_running(self_ptr self) {
  auto& st = self->state;
  return std::any_of(st.legs.begin(), st.legs.end(), [&st](const call_leg& l) {
    return l.round == st.round && !l.done && !l.down;
  });
}

/// The hedge timer of round `gen` fired: one more extra leg, on a source
/// the round has not used, unless the round has all HEDGE__MAX_EXTRA of
/// them, a token came, or nothing runs any more.
void on_hedge_timer(self_ptr self, uint64_t gen) {
  auto& st = self->state;
  if (st.finishing || gen != st.round || st.round_first_token
      || st.round_extra >= st.args.scope->hedge.max_extra
      || st.hedge_admitting || !round_running(self))
    return; // stale, disarmed by a first token, or nothing left to hedge
  admit_request req;
  req.exclude = st.excluded;
  for (auto& leg : st.legs)
    if (leg.round == st.round)
      req.exclude.push_back(leg.source);
  req.failures = st.failures;
  req.demote = st.demoted;
  st.hedge_admitting = true;
  self
    ->request(st.args.gateway, caf::infinite, atom::admit_v, std::move(req))
    .then(
      [self, gen](admit_result& r) {
        auto& st = self->state;
        st.hedge_admitting = false;
        if (!r.admitted) {
          maybe_deliver(self);
          return; // no candidate: no hedge, keep waiting, silently
        }
        if (st.finishing || gen != st.round || st.round_first_token
            || !round_running(self)) {
          // The round moved on while admission ran: give it back.
          self->send(st.args.gateway, atom::abandon_v, r);
          maybe_deliver(self);
          return;
        }
        start_leg(self, r, true);
      },
      [self](caf::error& err) {
        self->state.hedge_admitting = false;
        admission_failed(self, err, true);
      });
}

/// The deadline fired: the error lists the sources still in flight and what
/// they were doing.
void on_deadline(self_ptr self) {
  auto& st = self->state;
  for (auto& leg : st.legs) {
    if (leg.done || leg.down)
      continue;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "in flight %.1f s, ",
                  ms_since(self, leg.started) / 1000.0);
    std::string doing = buf;
    doing += leg.first_token ? "streaming" : "no first token";
    if (leg.hedge)
      doing += " (hedge)";
    st.last_reason[leg.source] = "in_flight";
    st.last_error[leg.source] = source_error{"in_flight", 0, {}, doing};
  }
  fail(self, error_code::call_deadline_exceeded,
       with_sources(self, "the call deadline passed"));
}

/// The stall timer fired: fail when the window since the last progress is
/// over, else wait for the rest of it. A stream that is producing tokens is
/// progress in itself.
void on_stall_timer(self_ptr self) {
  auto& st = self->state;
  if (st.finishing)
    return;
  auto now = self->clock().now();
  for (auto& leg : st.legs)
    if (leg.first_token && !leg.done && !leg.down)
      st.last_progress = now;
  auto due = st.last_progress + to_timespan(st.args.scope->stall_window_s);
  if (now >= due)
    fail(self, error_code::stalled,
         with_sources(self, "no progress within STALL_WINDOW_S"));
  else
    arm_stall_timer(self, due - now);
}

/// Every leg of the round has failed: charge the budget and go again.
void round_failed(self_ptr self) {
  auto& st = self->state;
  bool all_rate_limited = true;
  for (auto& leg : st.legs) {
    if (leg.result.kind != outcome::rate_limited)
      all_rate_limited = false;
    account_loser(self, leg);
  }
  st.legs.clear();
  if (!all_rate_limited)
    ++st.budget_used;
  ++st.rounds_failed;
  auto& scope = *st.args.scope;
  if (st.budget_used >= scope.max_attempts) {
    fail(self, error_code::retry_exhausted,
         with_sources(self, scope.max_attempts == 1
                              ? std::string{"the only attempt of the retry "
                                            "budget failed"}
                              : "all " + std::to_string(scope.max_attempts)
                                  + " attempts of the retry budget failed"));
    return;
  }
  // A 429 round moves on at once: its source cools down in the gateway's
  // memo, so admission picks another source or waits for the earliest one
  // (SPEC §12). So does a call with no source left to try.
  if (all_rate_limited || st.excluded.size() >= st.args.sources->size()) {
    retry_after(self, 0);
    return;
  }
  std::uniform_real_distribution<double> u01{0.0, 1.0};
  if (!st.rng)
    st.rng = std::make_unique<std::mt19937_64>(st.args.seed);
  auto delay = backoff_delay(st.rounds_failed, scope.backoff_base_s,
                             scope.backoff_max_s, u01(*st.rng));
  retry_after(self, delay);
}

// -- structured output: downgrade and re-ask ------------------------------------

bool schema_mismatch(const attempt_result& r) {
  return r.kind == outcome::result_invalid
         && (r.reason == "schema_mismatch" || r.reason == "invalid_json");
}

/// A 400 that rejected the response format on an `auto` call: the ladder
/// moves that source one rung down for the process, and the same attempt
/// runs again at once, at no budget cost (the breaker saw a neutral
/// rejection). Returns false when this is not such a rejection, or when
/// there is no lower rung (then it is an ordinary rejection).
bool structured_downgrade(self_ptr self, call_leg& leg) {
  auto& st = self->state;
  if (!st.schema || st.args.request->strategy != schema_strategy::auto_select
      || !rejects_response_format(leg.result))
    return false;
  auto src = st.args.sources->find(leg.source);
  if (src == st.args.sources->end()
      || !st.args.ladder->lower(*src->second.config, leg.rung))
    return false;
  for (auto& l : st.legs)
    if (l.done)
      account_loser(self, l);
  st.legs.erase(std::remove_if(st.legs.begin(), st.legs.end(),
                               [](const call_leg& l) { return l.done; }),
                st.legs.end());
  if (!has_live_legs(self))
    admit(self);
  return true;
}

/// Keeps the validator's errors of a mismatched answer and makes the next
/// round's messages from it.
void note_mismatch(self_ptr self, const call_leg& leg) {
  auto& st = self->state;
  if (!st.schema || !schema_mismatch(leg.result))
    return;
  st.last_issues = check_answer(*st.schema, leg.result.content).issues;
  st.conversation = reask_messages(st.args.request->messages,
                                   leg.result.content, st.last_issues);
}

/// Every leg of the round failed and one answered schema-invalid JSON:
/// re-ask at once (no backoff: the source answered, the answer was wrong).
/// A re-ask costs one unit of the retry budget like any failed round and
/// shares the call's deadline and stall window; after
/// `STRUCTURED__MAX_REASKS` re-asks (or an empty budget) the call ends
/// `result_invalid` with the last validation errors. Returns false when the
/// round had no mismatch.
bool structured_reask(self_ptr self) {
  auto& st = self->state;
  if (!st.schema
      || std::none_of(st.legs.begin(), st.legs.end(), [](const call_leg& l) {
           return schema_mismatch(l.result);
         }))
    return false;
  for (auto& leg : st.legs)
    account_loser(self, leg);
  st.legs.clear();
  ++st.budget_used;
  ++st.rounds_failed;
  auto& scope = *st.args.scope;
  if (st.reasks >= scope.structured_max_reasks
      || st.budget_used >= scope.max_attempts) {
    fail(self, error_code::result_invalid,
         "no answer matched the schema after " + std::to_string(st.reasks)
           + " re-asks; last validation errors:\n"
           + format_issues(st.last_issues));
    return true;
  }
  ++st.reasks;
  retry_after(self, 0);
  return true;
}

void on_done(self_ptr self, uint64_t id, attempt_result& res) {
  auto& st = self->state;
  auto leg = find_leg(self, id);
  if (leg == nullptr || leg->done)
    return;
  leg->done = true;
  leg->result = std::move(res);
  auto& r = leg->result;
  // A leg stopped at a live call's commit lost already, whatever it says.
  if (st.finishing || !leg->label.empty())
    return;
  st.last_reason[leg->source] = r.kind == outcome::ok ? "ok" : r.reason;
  st.last_error[leg->source] = source_error{st.last_reason[leg->source],
                                            r.http_status, r.error_message, {}};
  if (r.kind != outcome::ok && is_costly_failure(r.reason)
      && std::find(st.demoted.begin(), st.demoted.end(), leg->source)
           == st.demoted.end())
    st.demoted.push_back(leg->source);
  if ((r.http_status != 0 && r.kind != outcome::rate_limited)
      || r.kind == outcome::ok)
    progress(self);
  if (st.committed == leg->id) {
    // Committed: the caller has part of this answer, no other source may
    // continue it.
    if (r.kind == outcome::ok)
      succeed(self, *leg);
    else
      fail(self, error_code::stream_interrupted,
           interruption(self, make_detail(self, {}), r.reason));
    return;
  }
  if (structured_downgrade(self, *leg))
    return;
  note_mismatch(self, *leg);
  switch (r.kind) {
    case outcome::ok:
      if (leg->hedge && live_primary(self) != nullptr) {
        // Decide after the messages already in the mailbox: a primary
        // success that arrived at the same instant wins (SPEC §9).
        self->send(self, atom::decide_v, leg->id);
        return;
      }
      succeed(self, *leg);
      return;
    case outcome::request_rejected:
      fail_with_upstream(self, error_code::request_rejected,
                         "the request was rejected by source " + leg->source
                           + " (" + r.reason + ")",
                         r);
      return;
    case outcome::source_rejected:
      st.excluded.push_back(leg->source);
      st.last_rejection = std::make_unique<attempt_result>(r);
      break;
    case outcome::rate_limited:
      break;
    case outcome::source_dead:
      // Dead for this call (bad key, no quota, untrusted certificate): not
      // asked again in it (SPEC §12).
      ++st.failures[leg->source];
      if (std::find(st.dead.begin(), st.dead.end(), leg->source)
          == st.dead.end()) {
        st.dead.push_back(leg->source);
        st.excluded.push_back(leg->source);
      }
      break;
    default:
      ++st.failures[leg->source];
      break;
  }
  if (has_live_legs(self))
    return; // a failed leg waits for the other
  for (auto& other : st.legs)
    if (other.done && other.result.kind == outcome::ok) {
      // A hedge leg won while its decision was pending.
      succeed(self, other);
      return;
    }
  if (r.kind == outcome::source_rejected) {
    // Not a failure of the round: other sources only, no budget.
    for (auto& leg : st.legs)
      if (leg.done)
        account_loser(self, leg);
    st.legs.erase(std::remove_if(st.legs.begin(), st.legs.end(),
                                 [](const call_leg& l) { return l.done; }),
                  st.legs.end());
    admit(self);
    return;
  }
  if (structured_reask(self))
    return;
  round_failed(self);
}

void on_down(self_ptr self, caf::down_msg& msg) {
  auto& st = self->state;
  for (auto& leg : st.legs) {
    if (leg.actor.address() != msg.source)
      continue;
    leg.down = true;
    if (!leg.done && !st.finishing) {
      // The attempt died without an outcome (it should not): count it as a
      // transient failure so the call still answers.
      attempt_result res;
      res.kind = outcome::transient;
      res.reason = "attempt_failed";
      on_done(self, leg.id, res);
      // on_done may have cleared the legs vector.
      break;
    }
    break;
  }
  maybe_deliver(self);
}

// -- response cache (issue 14) -------------------------------------------------

/// Arms the stall timer and the deadline timer (what is left of the
/// deadline since the call started).
void arm_call_timers(self_ptr self) {
  auto& st = self->state;
  arm_stall_timer(self, to_timespan(st.args.scope->stall_window_s));
  if (st.args.deadline_s) {
    auto left = to_timespan(*st.args.deadline_s)
                - (self->clock().now() - st.started_at);
    arm_timer(self, timer_kind::deadline, 0, std::max(left, caf::timespan{0}));
  }
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
                 st.args.deadline_s, st.args.call_id, st.args.scope->name};
  st.admitting = true; // like an admission: nothing is delivered before it ends
  self->request(st.args.cache, caf::infinite, atom::cache_get_v, std::move(q))
    .then(
      [self](cache_verdict& v) {
        auto& st = self->state;
        st.admitting = false;
        if (v.kind == cache_verdict_kind::lead)
          st.cache_lease = v.lease;
        if (st.finishing) {
          maybe_deliver(self);
        } else if (v.kind != cache_verdict_kind::hit) {
          arm_call_timers(self);
          admit(self);
        } else {
          st.cache_hit = true;
          st.response = std::make_unique<chat_response>(std::move(v.response));
          finish(self);
        }
      },
      [self](caf::error& err) {
        self->state.admitting = false;
        auto code = code_of(err);
        auto* detail = detail_of(err);
        fail(self, code ? *code : error_code::internal,
             detail ? detail->message : describe(err));
        maybe_deliver(self);
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
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    // Shutdown from outside: stop the attempts, answer, quit.
    auto& st = self->state;
    for (auto& leg : st.legs)
      if (!leg.down && !leg.done)
        self->send_exit(leg.actor, caf::exit_reason::user_shutdown);
    if (st.started && !st.delivered) {
      st.delivered = true;
      st.response.reset();
      st.failure = make_error(error_code::cancelled,
                              make_detail(self, "the gateway shut down"));
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
      // A call pinned to one source never runs on another.
      if (auto& pin = st.args.request->source; !pin.empty())
        for (auto& entry : *st.args.sources)
          if (entry.first != pin)
            st.excluded.push_back(entry.first);
      progress(self);
      if (!structured_start(self))
        return st.promise;
      // A cache hit answers before any timer is armed (a waiter's wait is
      // bounded by the cache itself).
      if (!consult_cache(self)) {
        arm_call_timers(self);
        admit(self);
      }
      return st.promise;
    },
    [self](atom::first_token, uint64_t id) {
      auto& st = self->state;
      auto leg = find_leg(self, id);
      if (leg == nullptr || leg->first_token || st.finishing)
        return;
      leg->first_token = true;
      if (leg->round == st.round)
        st.round_first_token = true; // disarms the round's hedge timer
      progress(self);
      if (commits_on_first_token(st))
        commit(self, *leg);
    },
    [self](atom::delta, uint64_t id, stream_delta& delta) {
      auto& st = self->state;
      if (!forwards_delta(st, id))
        return;
      if (auto leg = find_leg(self, id))
        forward_delta(self, std::move(delta), leg->source);
    },
    [self](atom::decide, uint64_t id) {
      auto leg = find_leg(self, id);
      if (leg != nullptr && !self->state.finishing)
        succeed(self, *leg);
    },
    [self](atom::done, uint64_t id, attempt_result& res) {
      on_done(self, id, res);
    },
    [self](atom::timer, timer_kind kind, uint64_t id) {
      switch (kind) {
        case timer_kind::stall:
          on_stall_timer(self);
          break;
        case timer_kind::deadline:
          if (!self->state.finishing)
            on_deadline(self);
          break;
        case timer_kind::retry:
          if (id == self->state.retry_gen)
            admit(self);
          break;
        case timer_kind::hedge:
          on_hedge_timer(self, id);
          break;
      }
    },
    [self](atom::cancel) {
      fail(self, error_code::cancelled, "the caller cancelled the call");
    },
  };
}

} // namespace pgw
