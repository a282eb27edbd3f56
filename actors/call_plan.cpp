#include "actors/call_plan.hpp"

#include "actors/accounting.hpp"
#include "actors/selector.hpp"
#include "actors/settlement.hpp"
#include "actors/side_call.hpp"
#include "config/keys.hpp"
#include "config/limits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <cstdio>

namespace pgw {

const attempt_result& plan_leg::no_result() {
  static const attempt_result none{};
  return none;
}


namespace {

using act = call_decision::act;

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

bool schema_mismatch(const attempt_result& r) {
  return r.kind == outcome::result_invalid
         && (r.reason == "schema_mismatch" || r.reason == "invalid_json");
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

/// What `leg`'s source did as its permit settles it (SPEC §8): a running
/// leg is stopped mid-answer, or before its request left (nothing).
std::optional<spent_work> settled_work(const plan_leg& leg) {
  if (!leg.done && leg.unsent)
    return std::nullopt;
  return settled_work(leg.done ? &leg.result() : nullptr, leg.est);
}

} // namespace

call_plan::call_plan(call_plan_args args) : args_(std::move(args)) {
  // nop
}

call_decisions call_plan::take() {
  call_decisions out;
  out.swap(out_);
  return out;
}

call_plan::history& call_plan::learnt() {
  if (!history_)
    history_ = std::make_unique<history>();
  return *history_;
}

const call_plan::history& call_plan::known() const {
  static const history nothing;
  return history_ ? *history_ : nothing;
}

// -- events --------------------------------------------------------------------

void call_plan::start(time_point now, const std::string& pin) {
  started_at_ = now;
  // A call pinned to one source never runs on another.
  if (!pin.empty())
    for (auto& src : args_.scope->sources)
      if (src.name != pin)
        learnt().excluded.push_back(src.name);
  last_progress_ = now;
}

call_decisions call_plan::begin(time_point now) {
  arm(timer_kind::stall, 0, to_timespan(args_.scope->stall_window_s));
  arm_deadline_timer(now);
  admit();
  return take();
}

call_decisions call_plan::arm_deadline(time_point now) {
  arm_deadline_timer(now);
  return take();
}

void call_plan::arm_deadline_timer(time_point now) {
  if (!args_.deadline_s || deadline_armed_)
    return;
  deadline_armed_ = true;
  auto left = to_timespan(*args_.deadline_s) - (now - started_at_);
  arm(timer_kind::deadline, 0, std::max(left, caf::timespan{0}));
}

void call_plan::consulting_cache() {
  admitting_ = true; // like an admission: nothing begins before it ends
  consulting_cache_ = true;
}

call_decisions call_plan::cache_answered(bool hit, time_point now) {
  admitting_ = false;
  consulting_cache_ = false;
  if (finishing_)
    return take();
  if (!hit)
    return begin(now);
  won_ = true;
  finish();
  return take();
}

call_decisions call_plan::admitted(const admit_result& r, bool hedge,
                                   time_point now) {
  auto give_back = [this, &r] {
    call_decision d;
    d.what = act::give_back;
    d.admitted = r;
    out_.push_back(std::move(d));
  };
  if (hedge) {
    hedge_admitting_ = false;
    if (finishing_ || hedge_gen_ != round_ || round_first_token_
        || !round_running()) {
      give_back(); // the round moved on while admission ran
      return take();
    }
  } else {
    admitting_ = false;
    if (finishing_) {
      give_back();
      return take();
    }
  }
  auto src = args_.scope->find(r.source);
  if (src == nullptr) {
    // The gateway admitted a source this call does not know: give it back.
    give_back();
    fail_msg(error_code::internal, "gateway admitted unknown source");
    return take();
  }
  plan_leg leg;
  leg.id = ++next_leg_;
  if (hedge) {
    ++hedges_;
    ++round_extra_;
  } else {
    ++round_;
    round_first_token_ = false;
    round_extra_ = 0;
    // Extra leg k may start at k × AFTER_S (issue 17): one timer each.
    if (auto& after = args_.scope->hedge.after_s)
      for (int64_t k = 1; k <= args_.scope->hedge.max_extra; ++k)
        arm(timer_kind::hedge, round_,
            to_timespan(*after * static_cast<double>(k)));
  }
  leg.source = r.source;
  leg.hedge = hedge;
  leg.round = round_;
  leg.est = r.granted_permit.est;
  leg.model = src->model;
  leg.started = now;
  call_decision d;
  d.what = act::start_leg;
  d.leg = leg.id;
  d.hedge = hedge;
  d.admitted = r;
  out_.push_back(std::move(d));
  legs_.push_back(std::move(leg));
  ++attempts_;
  return take();
}

call_decisions call_plan::refused(const admit_result& r, bool hedge,
                                  time_point now) {
  if (hedge) {
    hedge_admitting_ = false; // no candidate: no hedge, keep waiting, silently
    return take();
  }
  admitting_ = false;
  if (!finishing_)
    on_refused(r, now);
  return take();
}

/// A governance backend that is down fails the call (fail closed, SPEC §7),
/// also for a hedge; any other error fails a primary admission and is
/// ignored for a hedge (it is only an optimisation).
call_decisions call_plan::admission_error(const caf::error& err, bool hedge) {
  (hedge ? hedge_admitting_ : admitting_) = false;
  if (code_of(err) == error_code::governance_unavailable)
    fail_msg(error_code::governance_unavailable, words_of(err));
  else if (!hedge)
    fail_msg(error_code::internal, "admission failed: " + to_string(err));
  return take();
}

call_decisions call_plan::cache_failed(error_code code, std::string message) {
  admitting_ = false;
  consulting_cache_ = false;
  fail_msg(code, std::move(message));
  return take();
}

call_decisions call_plan::first_token(uint64_t id, time_point now) {
  auto l = leg(id);
  if (l == nullptr || l->first_token || finishing_)
    return take();
  l->first_token = true;
  if (l->round == round_)
    round_first_token_ = true; // disarms the round's hedge timer
  last_progress_ = now;
  // Live streaming: the first leg to produce a token wins the call; every
  // other leg is the loser (SPEC §12), stopped `hedge_cancelled`. A whole
  // answer awaiting its decision came first: it wins (or a primary's
  // success at that instant does), so no other leg's deltas may start.
  if (args_.live && committed_ == 0 && deciding_ == 0) {
    committed_ = l->id;
    call_decision d;
    d.what = act::commit;
    d.leg = l->id;
    out_.push_back(std::move(d));
    for (auto& other : legs_)
      if (other.id != id && !other.down && !other.done && !other.label)
        stop(other, outcome::hedge_cancelled);
  }
  return take();
}

call_decisions call_plan::leg_done(uint64_t id, attempt_result res,
                                   time_point now) {
  on_done(id, std::move(res), now);
  return take();
}

call_decisions call_plan::leg_down(uint64_t id, time_point now) {
  auto l = leg(id);
  if (l == nullptr)
    return take();
  l->down = true;
  if (!l->done && !finishing_) {
    // The attempt died without an outcome (it should not): count it as a
    // transient failure so the call still answers.
    attempt_result res;
    res.kind = outcome::transient;
    res.reason = "attempt_failed";
    on_done(id, std::move(res), now);
  }
  return take();
}

call_decisions call_plan::decide(uint64_t id) {
  auto l = leg(id);
  if (l != nullptr && !finishing_)
    succeed(*l);
  return take();
}

call_decisions call_plan::timer_fired(timer_kind kind, uint64_t id,
                                      time_point now) {
  switch (kind) {
    case timer_kind::stall:
      on_stall_timer(now);
      break;
    case timer_kind::deadline:
      if (!finishing_)
        on_deadline(now);
      break;
    case timer_kind::retry:
      if (id == retry_gen_)
        admit();
      break;
    case timer_kind::hedge:
      on_hedge_timer(id);
      break;
  }
  return take();
}

call_decisions call_plan::cancel() {
  auto d = detail("the caller cancelled the call");
  // After the commit the caller had part of one source's answer: the call
  // is booked to that source (telemetry, metrics), still `cancelled`.
  for (auto& x : legs_)
    if (committed_ != 0 && x.id == committed_) {
      d.stream_source = x.source;
      d.streamed_bytes = streamed_bytes_;
      // Stopped mid-answer: no usage comes; its permit settles the estimate.
      if (auto w = settled_work(x))
        add_spent(d.spent, x.source, *w);
    }
  fail(error_code::cancelled, std::move(d));
  return take();
}

call_decisions call_plan::fail(error_code code, std::string message) {
  fail_msg(code, std::move(message));
  return take();
}

// -- queries -------------------------------------------------------------------

bool call_plan::forwards_delta(uint64_t id) const {
  // Only the committed leg's deltas reach the sink, and none once the
  // call's result is decided (the terminal event is the last message).
  return committed_ == id && !finishing_;
}

plan_leg* call_plan::leg(uint64_t id) {
  for (auto& l : legs_)
    if (l.id == id)
      return &l;
  return nullptr;
}

bool call_plan::ready_to_deliver() const {
  return finishing_
         && std::all_of(legs_.begin(), legs_.end(),
                        [](const plan_leg& l) { return l.down; });
}

/// Every source's last reason, with status and upstream message where
/// known: what the caller's error lists.
std::map<std::string, source_error> call_plan::source_errors() const {
  auto& h = known();
  auto out = h.last_error;
  for (auto& [source, reason] : h.last_reason) {
    auto& e = out[source];
    if (e.reason != reason) // a later skip (cooling, ...) replaced it
      e = source_error{reason, 0, {}, {}};
  }
  return out;
}

error_detail call_plan::detail(std::string message) const {
  error_detail detail;
  detail.message = std::move(message);
  detail.per_source = known().last_reason;
  detail.call_id = args_.call_id;
  detail.sources = source_errors();
  return detail;
}

/// `message`, followed by what each source did last (when any).
std::string call_plan::with_sources(std::string message) const {
  auto lines = describe(source_errors());
  return lines.empty() ? message : message + ": " + lines;
}

// -- the decisions -------------------------------------------------------------

bool call_plan::has_live_legs() const {
  return std::any_of(legs_.begin(), legs_.end(),
                     [](const plan_leg& l) { return !l.done && !l.down; });
}

/// True while a leg of the current round runs.
bool call_plan::round_running() const {
  return std::any_of(legs_.begin(), legs_.end(), [this](const plan_leg& l) {
    return l.round == round_ && !l.done && !l.down;
  });
}

/// The running primary of the current round, or nullptr.
const plan_leg* call_plan::live_primary() const {
  for (auto& l : legs_)
    if (!l.hedge && l.round == round_ && !l.done && !l.down)
      return &l;
  return nullptr;
}

void call_plan::arm(timer_kind kind, uint64_t id, caf::timespan in) {
  call_decision d;
  d.what = act::arm_timer;
  d.timer = kind;
  d.timer_id = id;
  d.delay = in;
  out_.push_back(std::move(d));
}

void call_plan::admit() {
  if (finishing_ || admitting_)
    return;
  admitting_ = true;
  call_decision d;
  d.what = act::ask_admission;
  auto& h = known();
  d.admission.exclude = h.excluded;
  d.admission.failures = h.failures;
  d.admission.demote = h.demoted;
  out_.push_back(std::move(d));
}

const spent_by_source& call_plan::unreturned() const {
  static const spent_by_source none;
  return unreturned_ ? *unreturned_ : none;
}

void call_plan::account_loser(const plan_leg& leg) {
  std::optional<double> cost;
  if (args_.cost)
    cost = args_.cost(leg);
  if (cost)
    losers_cost_usd_ += *cost;
  // Work the call does not return: a whole answer as its source reported
  // it, or the estimate its permit settled. A committed leg's goes with its
  // stream's error (`interruption`, `cancel`).
  auto w = settled_work(leg);
  if (!w || leg.id == committed_)
    return;
  if (cost)
    w->cost_usd = *cost;
  if (!unreturned_)
    unreturned_ = std::make_unique<spent_by_source>();
  add_spent(*unreturned_, leg.source, *w);
}

/// Stops a running leg and counts it as a loser labelled `label`.
void call_plan::stop(plan_leg& leg, outcome label) {
  leg.label = label;
  leg.unsent = args_.withhold && args_.withhold(leg);
  account_loser(leg);
  call_decision d;
  d.what = act::stop_leg;
  d.leg = leg.id;
  d.label = label;
  out_.push_back(std::move(d));
}

/// Decides the call: stops every live leg; the supervisor delivers once
/// they are all gone (`ready_to_deliver`).
void call_plan::finish() {
  finishing_ = true;
  // Losers of a won call are hedge_cancelled; a call that failed (deadline,
  // caller, stall) cancels its legs. Legs stopped at a live call's commit
  // are labelled and counted already.
  outcome label = won_ ? outcome::hedge_cancelled : outcome::cancelled;
  if (!won_)
    for (auto& l : legs_)
      if (l.done && !l.label)
        account_loser(l); // a failed call has no winner
  for (auto& l : legs_)
    if (!l.down && !l.done && !l.label)
      stop(l, label);
}

void call_plan::succeed(plan_leg& leg) {
  call_decision d;
  d.what = act::succeed;
  d.leg = leg.id;
  out_.push_back(std::move(d));
  // Legs of this round that ended without winning (a tie lost to the
  // primary, a failed leg) are losers too.
  for (auto& other : legs_)
    if (other.done && other.id != leg.id && !other.label)
      account_loser(other);
  won_ = true;
  finish();
}

/// The `stream_interrupted` detail of a live call whose committed leg
/// failed (or whose deadline passed) for `reason`.
error_detail call_plan::interruption(error_detail detail,
                                     const std::string& reason) const {
  const plan_leg* l = nullptr;
  for (auto& x : legs_)
    if (x.id == committed_)
      l = &x;
  detail.stream_source = l != nullptr ? l->source : std::string{};
  detail.stream_reason = reason;
  detail.streamed_bytes = streamed_bytes_;
  if (l != nullptr && l->done) {
    detail.usage_reported = l->result().usage_reported;
    detail.prompt_tokens = l->result().prompt_tokens;
    detail.completion_tokens = l->result().completion_tokens;
  }
  // Without reported usage the committed leg's permit settles its
  // estimate: estimated work, which the error carries.
  if (l != nullptr && !detail.usage_reported)
    if (auto w = settled_work(*l))
      add_spent(detail.spent, l->source, *w);
  auto usage = detail.usage_reported
                 ? "usage so far " + std::to_string(detail.prompt_tokens)
                     + " prompt + " + std::to_string(detail.completion_tokens)
                     + " completion tokens"
                 : std::string{"usage so far not reported"};
  detail.message = "the stream from source " + detail.stream_source
                   + " broke after it began (" + reason + ", "
                   + std::to_string(streamed_bytes_) + " bytes sent, " + usage
                   + "): the partial answer cannot be completed by another "
                     "source";
  detail.retry_after_s = caf::none;
  return detail;
}

void call_plan::fail(error_code code, error_detail detail) {
  if (finishing_)
    return;
  // After the commit a failure cannot be retried: the caller has part of
  // one source's answer. A caller's cancellation stays `cancelled`.
  if (committed_ != 0 && code != error_code::cancelled
      && code != error_code::stream_interrupted) {
    detail = interruption(std::move(detail), to_string(code));
    code = error_code::stream_interrupted;
  }
  call_decision d;
  d.what = act::fail;
  d.code = code;
  d.detail = std::move(detail);
  out_.push_back(std::move(d));
  finish();
}

void call_plan::fail_msg(error_code code, std::string message,
                         caf::optional<double> retry_after) {
  auto d = detail(std::move(message));
  d.retry_after_s = retry_after;
  fail(code, std::move(d));
}

void call_plan::fail_with_upstream(error_code code, std::string message,
                                   const attempt_result& res) {
  auto d = detail(std::move(message));
  d.upstream_status = res.http_status;
  d.upstream_code = res.error_code;
  d.upstream_message = res.error_message;
  fail(code, std::move(d));
}

/// Waits `delay_s`, then admits again; ends the call `stalled` instead when
/// the wait would cross the stall window.
void call_plan::retry_after(double delay_s, time_point now,
                            caf::optional<double> retry_hint) {
  auto idle = seconds_between(last_progress_, now);
  if (idle + delay_s > args_.scope->stall_window_s) {
    fail_msg(error_code::stalled,
             with_sources("no progress within STALL_WINDOW_S"),
             retry_hint ? retry_hint : caf::optional<double>{delay_s});
    return;
  }
  auto gen = ++retry_gen_;
  if (delay_s <= 0)
    admit();
  else
    arm(timer_kind::retry, gen, to_timespan(delay_s));
}

void call_plan::on_refused(const admit_result& r, time_point now) {
  for (auto& [source, reason] : r.skipped) {
    auto& h = learnt();
    h.last_reason[source] = to_string(reason);
    auto why = r.why.find(source);
    auto& e = h.last_error[source];
    e = after_skip(e, to_string(reason),
                   why == r.why.end() ? std::string{} : why->second);
  }
  if (r.refusal == admission_refusal::none) {
    auto& h = known();
    if (!h.dead.empty()) {
      fail_msg(error_code::retry_exhausted,
               with_sources("every source is unusable"));
    } else if (h.last_rejection) {
      fail_with_upstream(error_code::request_rejected,
                         "every source rejected the request",
                         *h.last_rejection);
    } else if (h.last_unusable) {
      // The upstreams answered, nothing usable (SPEC §12): not the
      // caller's fault, so not `request_rejected`.
      fail_with_upstream(error_code::result_invalid,
                         with_sources(no_usable_answer), *h.last_unusable);
    } else if (h.local_exhausted) {
      // This process, not the caller nor the upstreams: try again later.
      fail_msg(error_code::retry_exhausted, with_sources(local_words));
    } else {
      fail_msg(error_code::retry_exhausted, "no source left to try");
    }
    return;
  }
  // Which skipped sources may be waited for: cooling ones (429 memo) and
  // quota by ON_QUOTA_FULL, open circuits by ON_CIRCUIT_OPEN (one rule for
  // chat, embedding and OCR calls: actors/side_call.hpp).
  bool quota = false;
  auto wait_s = refusal_wait(*args_.scope, r, quota);
  if (!wait_s) {
    fail_msg(quota ? error_code::quota_exhausted : error_code::circuit_open,
             with_sources(refusal_words(r.refusal)), r.retry_after_s);
    return;
  }
  // A wait that would outlast the call's deadline is no use: the caller
  // hears now what it would hear then, with when to come back (was: the
  // whole deadline spent, then call_deadline_exceeded without it).
  if (args_.deadline_s
      && seconds_between(started_at_, now) + *wait_s >= *args_.deadline_s) {
    auto words = fmt::format("no source may run before the call's deadline "
                             "({} s): the earliest frees up in {:.1f} s",
                             detail::format_number(*args_.deadline_s),
                             *wait_s);
    fail_msg(quota ? error_code::quota_exhausted : error_code::circuit_open,
             with_sources(words),
             r.retry_after_s ? r.retry_after_s : caf::optional<double>{*wait_s});
    return;
  }
  // Wait for the earliest source, bounded by the stall window (and the
  // deadline's own timer).
  retry_after(std::max(*wait_s, min_wait_s), now, r.retry_after_s);
}

/// The hedge timer of round `gen` fired: one more extra leg, on a source
/// the round has not used, unless the round has all HEDGE__MAX_EXTRA of
/// them, a token came, or nothing runs any more.
void call_plan::on_hedge_timer(uint64_t gen) {
  if (finishing_ || gen != round_ || round_first_token_
      || round_extra_ >= args_.scope->hedge.max_extra || hedge_admitting_
      || !round_running())
    return; // stale, disarmed by a first token, or nothing left to hedge
  call_decision d;
  d.what = act::ask_admission;
  d.hedge = true;
  auto& h = known();
  d.admission.exclude = h.excluded;
  for (auto& l : legs_)
    if (l.round == round_)
      d.admission.exclude.push_back(l.source);
  d.admission.failures = h.failures;
  d.admission.demote = h.demoted;
  hedge_admitting_ = true;
  hedge_gen_ = gen;
  out_.push_back(std::move(d));
}

/// The deadline fired: the error lists the sources still in flight and what
/// they were doing.
void call_plan::on_deadline(time_point now) {
  for (auto& l : legs_) {
    if (l.done || l.down)
      continue;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "in flight %.1f s, ",
                  ms_between(l.started, now) / 1000.0);
    std::string doing = buf;
    doing += l.first_token ? "streaming" : "no first token";
    if (l.hedge)
      doing += " (hedge)";
    auto& h = learnt();
    h.last_reason[l.source] = "in_flight";
    h.last_error[l.source] = source_error{"in_flight", 0, {}, doing};
  }
  fail_msg(error_code::call_deadline_exceeded,
           with_sources("the call deadline passed"));
}

/// The stall timer fired: fail when the window since the last progress is
/// over, else wait for the rest of it. A stream that is producing tokens is
/// progress in itself.
void call_plan::on_stall_timer(time_point now) {
  if (finishing_)
    return;
  for (auto& l : legs_)
    if (l.first_token && !l.done && !l.down)
      last_progress_ = now;
  auto due = last_progress_ + to_timespan(args_.scope->stall_window_s);
  if (now >= due)
    fail_msg(error_code::stalled,
             with_sources("no progress within STALL_WINDOW_S"));
  else
    arm(timer_kind::stall, 0, due - now);
}

/// Every leg of the round has failed: charge the budget and go again.
void call_plan::round_failed(time_point now) {
  bool all_rate_limited = true;
  for (auto& l : legs_) {
    // Read through const: a leg without a result does not get an empty one.
    if (std::as_const(l).result().kind != outcome::rate_limited)
      all_rate_limited = false;
    account_loser(l);
  }
  legs_.clear();
  if (!all_rate_limited)
    ++budget_used_;
  ++rounds_failed_;
  auto& scope = *args_.scope;
  if (budget_used_ >= scope.max_attempts) {
    fail_msg(error_code::retry_exhausted,
             with_sources(scope.max_attempts == 1
                            ? std::string{"the only attempt of the retry "
                                          "budget failed"}
                            : "all " + std::to_string(scope.max_attempts)
                                + " attempts of the retry budget failed"));
    return;
  }
  // A 429 round moves on at once: its source cools down in the gateway's
  // memo, so admission picks another source or waits for the earliest one
  // (SPEC §12). So does a call with no source left to try.
  if (all_rate_limited
      || known().excluded.size() >= args_.scope->sources.size()) {
    retry_after(0, now);
    return;
  }
  std::uniform_real_distribution<double> u01{0.0, 1.0};
  if (!rng_)
    rng_ = std::make_unique<std::mt19937_64>(args_.seed);
  auto delay = backoff_delay(rounds_failed_, scope.backoff_base_s,
                             scope.backoff_max_s, u01(*rng_));
  retry_after(delay, now);
}

/// Removes the legs that ended (losers) from the table.
void call_plan::drop_done_legs() {
  for (auto& l : legs_)
    if (l.done)
      account_loser(l);
  legs_.erase(std::remove_if(legs_.begin(), legs_.end(),
                             [](const plan_leg& l) { return l.done; }),
              legs_.end());
}

/// A 400 that rejected the response format on an `auto` call: the ladder
/// moved that source one rung down (`lower_rung`), and the same attempt
/// runs again at once, at no budget cost. Returns false when this is not
/// such a rejection, or when there is no lower rung.
bool call_plan::structured_downgrade(plan_leg& leg) {
  if (!args_.structured || !args_.lower_rung || !args_.lower_rung(leg))
    return false;
  drop_done_legs();
  if (!has_live_legs())
    admit();
  return true;
}

/// Every leg of the round failed and one answered schema-invalid JSON:
/// re-ask at once (no backoff: the source answered, the answer was wrong).
/// A re-ask costs one unit of the retry budget like any failed round; after
/// `STRUCTURED__MAX_REASKS` re-asks (or an empty budget) the call ends
/// `result_invalid` with the last validation errors.
bool call_plan::structured_reask(time_point now) {
  if (!args_.structured
      || std::none_of(legs_.begin(), legs_.end(), [](const plan_leg& l) {
           return schema_mismatch(l.result());
         }))
    return false;
  for (auto& l : legs_)
    account_loser(l);
  legs_.clear();
  ++budget_used_;
  ++rounds_failed_;
  auto& scope = *args_.scope;
  if (reasks_ >= scope.structured_max_reasks
      || budget_used_ >= scope.max_attempts) {
    fail_msg(error_code::result_invalid,
             "no answer matched the schema after " + std::to_string(reasks_)
               + " re-asks; last validation errors: " + known().last_issues);
    return true;
  }
  ++reasks_;
  retry_after(0, now);
  return true;
}

void call_plan::on_done(uint64_t id, attempt_result res, time_point now) {
  auto l = leg(id);
  if (l == nullptr || l->done)
    return;
  l->done = true;
  l->result() = std::move(res);
  auto& r = l->result();
  // A leg stopped at a live call's commit lost already, whatever it says.
  if (finishing_ || l->label)
    return;
  auto& h = learnt();
  h.last_reason[l->source] = r.kind == outcome::ok ? "ok" : r.reason;
  h.last_error[l->source] = source_error{h.last_reason[l->source],
                                         r.http_status, r.error_message, {}};
  if (r.kind != outcome::ok && (r.timed_out || is_costly_failure(r.reason))
      && !contains(h.demoted, l->source))
    h.demoted.push_back(l->source);
  // Progress: any upstream answer other than a rate limit, or a success.
  if ((r.http_status != 0 && r.kind != outcome::rate_limited)
      || r.kind == outcome::ok)
    last_progress_ = now;
  if (committed_ == l->id) {
    // Committed: the caller has part of this answer, no other source may
    // continue it.
    if (r.kind == outcome::ok)
      succeed(*l);
    else
      fail(error_code::stream_interrupted,
           interruption(detail({}), r.reason));
    return;
  }
  if (structured_downgrade(*l))
    return;
  if (args_.structured && schema_mismatch(r) && args_.note_mismatch)
    h.last_issues = args_.note_mismatch(*l);
  auto kind = r.kind;
  switch (kind) {
    case outcome::ok:
      if (l->hedge && live_primary() != nullptr) {
        // Decide after the messages already in the mailbox: a primary
        // success that arrived at the same instant wins (SPEC §9).
        call_decision d;
        d.what = act::decide_later;
        d.leg = l->id;
        out_.push_back(std::move(d));
        deciding_ = l->id;
        return;
      }
      succeed(*l);
      return;
    case outcome::request_rejected:
      fail_with_upstream(error_code::request_rejected,
                         "the request was rejected by source " + l->source
                           + " (" + r.reason + ")",
                         r);
      return;
    case outcome::source_rejected:
      h.excluded.push_back(l->source);
      if (local_failure(r))
        h.local_exhausted = true;
      else
        (upstream_at_fault(r) ? h.last_unusable : h.last_rejection)
          = std::make_unique<attempt_result>(r);
      break;
    case outcome::rate_limited:
      break;
    case outcome::source_dead:
      // Dead for this call (bad key, no quota, untrusted certificate): not
      // asked again in it (SPEC §12).
      ++h.failures[l->source];
      if (!contains(h.dead, l->source)) {
        h.dead.push_back(l->source);
        h.excluded.push_back(l->source);
      }
      break;
    default:
      ++h.failures[l->source];
      break;
  }
  if (has_live_legs())
    return; // a failed leg waits for the other
  for (auto& other : legs_)
    if (other.done && other.result().kind == outcome::ok) {
      // A hedge leg won while its decision was pending.
      succeed(other);
      return;
    }
  if (kind == outcome::source_rejected) {
    // Not a failure of the round: other sources only, no budget.
    drop_done_legs();
    admit();
    return;
  }
  if (structured_reask(now))
    return;
  round_failed(now);
}

} // namespace pgw
