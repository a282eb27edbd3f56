#pragma once

/// `call_plan`: the decisions of one call (retries, refusals, hedging, live
/// commit, winner choice) as a plain class. It takes events (admitted,
/// refused, first token, leg done, leg down, timer fired, ...) and returns
/// the decisions its actor, `call_supervisor`, performs: the actor spawns,
/// sends and arms; the plan never sees an actor handle (SPEC §7, §9, §12).

#include "config/settings.hpp"
#include "messages/errors.hpp"
#include "messages/gateway.hpp"
#include "messages/outcome.hpp"

#include <caf/actor_clock.hpp>
#include <caf/optional.hpp>
#include <caf/timespan.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace pgw {

/// One attempt of the call as the plan sees it (its actor handle is the
/// supervisor's, by id).
struct plan_leg {
  uint64_t id = 0;
  std::string source;
  bool hedge = false;
  bool done = false;        ///< its outcome arrived
  bool down = false;        ///< the actor is gone
  bool first_token = false; ///< streamed its first token
  uint64_t round = 0;       ///< the round it belongs to
  int64_t est = 0;          ///< its permit's estimate
  std::string model;        ///< the source's MODEL
  caf::actor_clock::time_point started{}; ///< when the plan started it
  /// Why the plan stopped it: hedge_cancelled (lost to another leg) or
  /// cancelled (deadline, caller, stall); none when it ended.
  std::optional<outcome> label;
  /// Stopped before its request left (`call_plan_args::withhold`): it
  /// generated nothing and settles 0, not its estimate (SPEC §8).
  bool unsent = false;

  /// Its outcome once done, a default one before. Held on the heap from
  /// the first write: a leg in flight (most of a call's life) holds no
  /// 344-byte result.
  const attempt_result& result() const {
    return result_ ? *result_ : no_result();
  }
  attempt_result& result() {
    if (!result_)
      result_ = std::make_unique<attempt_result>();
    return *result_;
  }

private:
  static const attempt_result& no_result();
  std::unique_ptr<attempt_result> result_;
};

/// One thing the supervisor does for the plan. Only the fields its `act`
/// names are set.
struct call_decision {
  enum class act : uint8_t {
    ask_admission, ///< request `admission` from the gateway (`hedge`: for a hedge)
    start_leg,     ///< spawn leg `leg`'s attempt with the `admitted` permit
    give_back,     ///< abandon the `admitted` permit (the call moved on)
    arm_timer,     ///< arm `timer` with id `timer_id` in `delay`
    commit,        ///< live call: leg `leg`'s deltas reach the sink from now
    stop_leg,      ///< stop leg `leg`, labelled `label`
    decide_later,  ///< leg `leg` won, unless a primary success is queued
    succeed,       ///< leg `leg` wins: its result is the answer
    fail,          ///< the call fails with `code` and `detail`
  };
  act what = act::fail;
  uint64_t leg = 0;
  bool hedge = false;
  outcome label = outcome::cancelled;
  admit_request admission;
  admit_result admitted;
  timer_kind timer = timer_kind::stall;
  uint64_t timer_id = 0;
  caf::timespan delay{0};
  error_code code = error_code::internal;
  error_detail detail;
};

using call_decisions = std::vector<call_decision>;

/// What the plan knows of its call; built by the supervisor.
struct call_plan_args {
  std::string call_id;
  /// The scope: its rules and its sources (each with its MODEL).
  scope_ptr scope;
  /// Live streaming: deltas go to a sink as they come (commit at first token).
  bool live = false;
  /// Structured output: a schema was compiled (re-ask on a mismatch).
  bool structured = false;
  /// Bound of the whole call in seconds.
  caf::optional<double> deadline_s;
  /// Seed of the backoff jitter.
  uint64_t seed = 0;
  /// Called as a running leg is stopped: true when its request has not
  /// left and now never will (the transport's `send_gate`); unset: a
  /// stopped leg counts as sent.
  std::function<bool(const plan_leg&)> withhold;
  /// The cost of a leg that did not win (see actors/accounting.hpp).
  std::function<std::optional<double>(const plan_leg&)> cost;
  /// Structured output: moves the leg's source one rung down when its 400
  /// rejected the response format; true when it did (run the leg again).
  std::function<bool(const plan_leg&)> lower_rung;
  /// Structured output: keeps a mismatched answer for the next round's
  /// messages; returns the validator's errors as text.
  std::function<std::string(const plan_leg&)> note_mismatch;
};

class call_plan {
public:
  using time_point = caf::actor_clock::time_point;

  explicit call_plan(call_plan_args args);

  // -- events ------------------------------------------------------------------

  /// The caller's start at `now`: a call pinned to one source excludes the
  /// others.
  void start(time_point now, const std::string& pin);

  /// Arms the stall and deadline timers and asks the first admission.
  call_decisions begin(time_point now);

  /// Arms the deadline timer (once per call; `begin` then does not) for a
  /// call that waits before it begins on work off the actor: its schema
  /// compiled, or a stored answer checked, on the check runner, where it
  /// may queue behind other checks.
  call_decisions arm_deadline(time_point now);

  /// A cache consultation is under way: nothing begins before it ends (a
  /// cancel or a failure still answers the caller at once).
  void consulting_cache();

  /// The cache answered: a hit wins the call, anything else begins it.
  call_decisions cache_answered(bool hit, time_point now);

  /// An admission (a hedge's when `hedge`) admitted a source.
  call_decisions admitted(const admit_result& r, bool hedge, time_point now);

  /// An admission (a hedge's when `hedge`) was refused: a hedge is
  /// silently not started, a primary waits or fails.
  call_decisions refused(const admit_result& r, bool hedge, time_point now);

  /// An admission request failed.
  call_decisions admission_error(const caf::error& err, bool hedge);

  /// The cache consultation failed with `code` and `message`.
  call_decisions cache_failed(error_code code, std::string message);

  /// Leg `id` streamed its first token.
  call_decisions first_token(uint64_t id, time_point now);

  /// Leg `id` ended with `res`.
  call_decisions leg_done(uint64_t id, attempt_result res, time_point now);

  /// Leg `id`'s actor is gone.
  call_decisions leg_down(uint64_t id, time_point now);

  /// A `decide_later` came back: leg `id` wins unless the call is decided.
  call_decisions decide(uint64_t id);

  /// The timer `kind` with `id` fired.
  call_decisions timer_fired(timer_kind kind, uint64_t id, time_point now);

  /// The caller cancelled.
  call_decisions cancel();

  /// The call fails with `code` and `message` (a bad schema, a bad source,
  /// a cache error).
  call_decisions fail(error_code code, std::string message);

  // -- queries -----------------------------------------------------------------

  /// True when leg `id`'s deltas reach the sink (the committed leg, while
  /// the call runs).
  bool forwards_delta(uint64_t id) const;

  /// Leg `id`, or nullptr.
  plan_leg* leg(uint64_t id);
  const std::vector<plan_leg>& legs() const {
    return legs_;
  }

  /// True once the result is decided; legs are being wound down.
  bool finishing() const {
    return finishing_;
  }

  /// True when every leg is gone and the result is decided: deliver.
  bool ready_to_deliver() const;

  /// True while an admission may still answer (a permit it grants must be
  /// given back). A cache consultation does not count: a call that ends
  /// during one (cancelled, out of time) need not wait for it, the cache
  /// hands the lead of a flight whose caller ended to the next waiter.
  bool awaiting_reply() const {
    return (admitting_ && !consulting_cache_) || hedge_admitting_;
  }

  /// The error detail with `message` and each source's last reason.
  error_detail detail(std::string message) const;

  int32_t attempts() const {
    return attempts_;
  }
  int32_t hedges() const {
    return hedges_;
  }
  double losers_cost_usd() const {
    return losers_cost_usd_;
  }
  /// The losers' work, by source: whole answers as their sources reported
  /// them (their tokens, and their cost when priced), else the estimates
  /// their permits settled (legs stopped while their requests ran, answers
  /// cut or refused without usage; SPEC §8).
  const spent_by_source& unreturned() const;
  uint64_t committed() const {
    return committed_;
  }
  int64_t streamed_bytes() const {
    return streamed_bytes_;
  }
  /// Answer bytes the sink received (at least 1 per delta).
  void add_streamed(int64_t bytes) {
    streamed_bytes_ += bytes;
  }
  int32_t reasks() const {
    return reasks_;
  }
  const std::vector<std::string>& excluded() const {
    return known().excluded;
  }
  const std::vector<std::string>& demoted() const {
    return known().demoted;
  }
  const std::map<std::string, int32_t>& failures() const {
    return known().failures;
  }
  int64_t budget_used() const {
    return budget_used_;
  }

private:
  void admit();
  void fail(error_code code, error_detail detail);
  void fail_msg(error_code code, std::string message,
                caf::optional<double> retry_after = caf::none);
  void fail_with_upstream(error_code code, std::string message,
                          const attempt_result& res);
  void finish();
  void succeed(plan_leg& leg);
  void stop(plan_leg& leg, outcome label);
  void account_loser(const plan_leg& leg);
  void retry_after(double delay_s, time_point now,
                   caf::optional<double> retry_hint = caf::none);
  void arm(timer_kind kind, uint64_t id, caf::timespan in);
  void arm_deadline_timer(time_point now);
  void on_done(uint64_t id, attempt_result res, time_point now);
  void on_refused(const admit_result& r, time_point now);
  void on_hedge_timer(uint64_t gen);
  void on_deadline(time_point now);
  void on_stall_timer(time_point now);
  void round_failed(time_point now);
  bool structured_downgrade(plan_leg& leg);
  bool structured_reask(time_point now);
  void drop_done_legs();
  bool has_live_legs() const;
  bool round_running() const;
  const plan_leg* live_primary() const;
  std::map<std::string, source_error> source_errors() const;
  std::string with_sources(std::string message) const;
  error_detail interruption(error_detail detail, const std::string& reason) const;
  call_decisions take();

  call_plan_args args_;
  call_decisions out_;

  bool finishing_ = false;
  bool won_ = false;
  bool admitting_ = false;
  /// `admitting_` is the cache's consultation, not an admission.
  bool consulting_cache_ = false;
  bool deadline_armed_ = false;
  time_point started_at_{};
  time_point last_progress_{};
  uint64_t retry_gen_ = 0;

  int64_t budget_used_ = 0;
  int64_t rounds_failed_ = 0;
  int32_t attempts_ = 0;
  /// What the call learnt of its sources (failures, exclusions, last
  /// reasons, demotions): on the heap from the first write, since a call
  /// in flight on its first attempt has learnt nothing yet (issue 17).
  struct history {
    std::map<std::string, int32_t> failures;
    std::vector<std::string> excluded;
    std::map<std::string, std::string> last_reason;
    /// The last failure per source with its status and upstream message.
    std::map<std::string, source_error> last_error;
    /// Sources demoted to the tail after one time-costly failure (SPEC §12).
    std::vector<std::string> demoted;
    /// Sources that ended `source_dead` in this call: not asked again in it.
    std::vector<std::string> dead;
    /// The last source_rejected answer about the request (context length,
    /// 413, model not found), for the error when no source is left.
    std::unique_ptr<attempt_result> last_rejection;
    /// The last source_rejected answer that was the upstream's fault (over
    /// MAX_RESPONSE_BYTES, a redirect): with no request rejection, the
    /// call ends `result_invalid`, not `request_rejected`.
    std::unique_ptr<attempt_result> last_unusable;
    /// A source this process could not open a socket to (`local_failure`):
    /// with no rejection or unusable answer, the call ends retry_exhausted.
    bool local_exhausted = false;
    /// Structured output: the last validation errors.
    std::string last_issues;
  };
  /// The history to write to (created at the first write).
  history& learnt();
  /// The history to read (an empty one when nothing was learnt).
  const history& known() const;
  std::unique_ptr<history> history_;

  std::vector<plan_leg> legs_;
  uint64_t next_leg_ = 0;

  // -- hedging (SPEC §9) --
  uint64_t round_ = 0;             ///< generation of the current round
  bool round_first_token_ = false; ///< a leg of this round streamed a token
  /// Extra legs started in this round (at most HEDGE__MAX_EXTRA).
  int64_t round_extra_ = 0;
  bool hedge_admitting_ = false;
  uint64_t hedge_gen_ = 0;         ///< the round a hedge admission is for
  int32_t hedges_ = 0;             ///< hedge legs actually sent

  /// Cost of attempts that did not win (SPEC §10), accumulated.
  double losers_cost_usd_ = 0;
  /// See `unreturned()`; on the heap from the first entry (most calls
  /// have none: issue 17's memory per call).
  std::unique_ptr<spent_by_source> unreturned_;
  /// Backoff jitter, seeded with `args.seed` at the first backoff: the
  /// engine is 2.5 kB, and most calls never back off (issue 17).
  std::unique_ptr<std::mt19937_64> rng_;

  // -- structured output (SPEC §12) --
  int32_t reasks_ = 0;

  // -- live streaming (issue 13) --
  /// The leg whose first token came first (0: not committed yet).
  uint64_t committed_ = 0;
  /// A hedge leg whose success awaits its `decide_later` (0: none): the
  /// call ends with a success, so nothing commits meanwhile.
  uint64_t deciding_ = 0;
  int64_t streamed_bytes_ = 0;
};

} // namespace pgw
