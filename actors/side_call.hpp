#pragma once

/// Pieces shared by the calls that run their upstream requests without an
/// attempt actor (embeddings, OCR): they admit through the gateway, start
/// the transport themselves and end each admitted request here.

#include "actors/accounting.hpp"
#include "actors/call_supervisor.hpp"
#include "actors/timer_table.hpp"

#include <caf/actor_clock.hpp>
#include <caf/optional.hpp>
#include <caf/typed_response_promise.hpp>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace pgw {

/// What every embedding and OCR call takes from its gateway.
struct side_call_args {
  std::string call_id;
  scope_ptr scope;
  std::shared_ptr<const std::map<std::string, call_source>> sources;
  gateway_actor gateway;
  transport_ptr transport;
  caf::optional<double> deadline_s;
  uint64_t seed = 0;
  /// Who asked: when it goes away, the call is cancelled (like a deadline).
  caf::strong_actor_ptr requester;
  /// Where each request's attempt row, the call row and the terminal
  /// failure row go; invalid = nowhere.
  telemetry_actor telemetry;
  double wall_offset_ms = 0;
  /// Prices for `cost_usd` (embeddings: input tokens of each sub-batch;
  /// OCR: pages, when the table gives a page price); null = none.
  std::shared_ptr<const price_table> prices;
  /// The source the call is pinned to (empty = any source of the scope).
  std::string pin;
};

/// The retry state of one line of requests (an OCR call, one embedding
/// sub-batch): the chat retry rules' counters.
struct side_retry {
  uint64_t retry_gen = 0;
  int64_t budget_used = 0;
  int64_t rounds_failed = 0;
  std::map<std::string, int32_t> failures;
  std::vector<std::string> excluded;
  /// The last rejection about the request, for the error when every
  /// source rejected it.
  caf::optional<attempt_result> last_rejection;
  /// The last rejection that was the upstream's fault (`upstream_at_fault`:
  /// over MAX_RESPONSE_BYTES, a redirect).
  caf::optional<attempt_result> last_unusable;

  /// This process could not open a socket to some source (`local_failure`).
  bool local_exhausted = false;

  /// Keeps `res`, a rejection, as `last_rejection` or `last_unusable`, or
  /// notes a local failure.
  void rejected(const attempt_result& res) {
    if (local_failure(res))
      local_exhausted = true;
    else
      (upstream_at_fault(res) ? last_unusable : last_rejection) = res;
  }
};

/// One admitted upstream request while it runs.
struct side_request {
  uint64_t tag = 0;
  uint64_t attempt = 0; ///< 1, 2, ... within the call (its telemetry row)
  admit_result admitted;
  std::shared_ptr<call_handle> handle;
  /// Shared with the transport: whether a stopped request left (SPEC §8;
  /// see `send_gate`). Null: a stopped request counts as sent.
  std::shared_ptr<send_gate> gate;
  caf::actor_clock::time_point sent_at;
};

/// Each source's last reason (ok, http_503, quota, ...: the error's
/// `per_source`) and, for the error's lines, its last failure's status and
/// upstream message (`sources`).
struct source_history {
  std::map<std::string, std::string> reason;
  std::map<std::string, source_error> error;

  /// An attempt on `source` ended with `res`.
  void note(const std::string& source, const attempt_result& res);

  /// `source` was skipped for `reason` (`why`: why its circuit is open, or
  /// empty). Its line keeps a failure this call saw there (`after_skip`):
  /// the 401 that opened the circuit says more than "circuit_open".
  void skipped(const std::string& source, const std::string& reason,
               const std::string& why);
};

/// The state every embedding and OCR call has.
template <class Args, class Response>
struct side_call_state_base {
  Args args;
  caf::typed_response_promise<Response> promise;
  bool started = false;
  bool finishing = false;
  bool delivered = false;
  caf::error failure;
  Response response;
  /// Each source's last reason and failure, for the error.
  source_history last;
  caf::actor_clock::time_point started_at;
  std::mt19937_64 rng;
  /// The priced cost of the attempts that did not win (the call row's
  /// losers' cost): failed ones with reported usage, and every attempt of
  /// a failed call.
  double losers_cost_usd = 0;
};

/// Shortest wait before admitting again after a refusal (no spinning).
constexpr double side_min_wait_s = 0.001;

/// `seconds` (negative = 0) as a CAF timespan, rounded up.
caf::timespan side_timespan(double seconds);

/// The source `name` of the call, or null.
const call_source* side_source(const side_call_args& args,
                               const std::string& name);

/// The sources a call pinned to `args.pin` must never run on (all but the
/// pinned one; none when not pinned).
std::vector<std::string> pin_exclusions(const side_call_args& args);

/// Ends one admitted request: settles `amount` and releases the permit,
/// records `kind` at the source's breaker (a cancellation records nothing
/// and gives a probe lease back) and reports to the gateway, which feeds
/// the health EWMA only when `feeds_health`.
void end_admitted(const call_source& src, const gateway_actor& gateway,
                  const admit_result& admitted, outcome kind, int64_t amount,
                  caf::optional<double> retry_after, bool feeds_health);

/// Why no source may run, for a refusal nobody waits for: "every source's
/// quota is full", "every source is cooling down after a 429", or (mixed)
/// both with open circuits.
std::string refusal_words(admission_refusal refusal);

/// Why a call with no source left fails `result_invalid` when the sources
/// were left out only for the upstream's fault (`upstream_at_fault`).
inline constexpr const char* no_usable_answer
  = "no source gave a usable answer";

/// Why a call with no source left fails `retry_exhausted` when this process
/// could not open sockets (`local_failure`), with nothing else to blame.
inline constexpr const char* local_words
  = "this process cannot open sockets (file descriptors or memory "
    "exhausted)";

/// After a refusal that is not "none": how long to wait before admitting
/// again (the earliest skipped source that may be waited for: cooling
/// always, quota and open circuits by ON_QUOTA_FULL / ON_CIRCUIT_OPEN), or
/// none when the call must fail; `quota` tells whether quota was among the
/// reasons (`quota_exhausted` rather than `circuit_open`).
caf::optional<double> refusal_wait(const scope_config& scope,
                                   const admit_result& refused, bool& quota);

/// What a refused admission leads to: a wait before admitting again, or the
/// call's failure.
struct refusal_step {
  caf::optional<double> wait_s; ///< set: admit again after this long
  error_code code = error_code::internal;
  std::string message;
  const attempt_result* upstream = nullptr;
};

/// Records the skipped sources in `last`, then decides:
/// no source left → `request_rejected` with `rejected_message` when `line`
/// was rejected somewhere for the request, else `result_invalid` when it
/// was left out for the upstream's fault (`no_usable_answer` and every
/// source's line), else `retry_exhausted`; otherwise the wait of
/// `refusal_wait`, or `quota_exhausted` / `circuit_open` — also when that
/// wait would outlast `time_left_s`, the time left before the call's
/// deadline.
refusal_step after_refusal(const scope_config& scope, const admit_result& r,
                           const side_retry& line, source_history& last,
                           std::string rejected_message,
                           caf::optional<double> time_left_s = caf::none);

/// The seconds left before the deadline of a call started at `started_at`,
/// if it has one.
template <class Self>
caf::optional<double> time_left_s(Self* self) {
  auto& st = self->state;
  if (!st.args.deadline_s)
    return caf::none;
  return *st.args.deadline_s
         - std::chrono::duration<double>(self->clock().now() - st.started_at)
             .count();
}

/// The code and message of a failed admission request.
std::pair<error_code, std::string> admission_failure(const caf::error& err);

/// After a failed request of `line` on `source` that another try may fix:
/// a 429 waits a backoff round without spending the budget; any other
/// failure counts against `source` and spends one of MAX_ATTEMPTS. Returns
/// the backoff to wait, or none when the budget is spent.
caf::optional<double> after_failure(const scope_config& scope,
                                    side_retry& line, outcome kind,
                                    const std::string& source,
                                    std::mt19937_64& rng);

/// "all N attempts of the retry budget failed".
std::string budget_message(const scope_config& scope);

/// The error a call ends with: `message`, each source's last reason and
/// failure, the call id and, when given, the upstream's status, code and
/// message.
caf::error side_error(const side_call_args& args, const source_history& last,
                      error_code code, std::string message,
                      const attempt_result* upstream);

/// Makes an embedding or OCR call end with `cancelled` when its caller goes
/// away (monitored) or its gateway shuts down (the exit handler answers the
/// caller first); `fail(self, code, message)` is the call's own failure path.
template <class Self, class Requester, class Fail>
void watch_caller(Self self, const Requester& requester, Fail fail) {
  if (requester)
    self->monitor(requester);
  self->set_down_handler([self, fail](caf::down_msg&) {
    fail(self, error_code::cancelled, "the caller went away");
  });
  self->set_exit_handler([self, fail](caf::exit_msg& msg) {
    auto& st = self->state;
    if (st.started && !st.delivered) {
      fail(self, error_code::cancelled, "the gateway shut down");
      if (!st.delivered) {
        st.delivered = true;
        st.promise.deliver(st.failure);
      }
    }
    self->quit(msg.reason);
  });
}

/// Takes `args`, seeds the call's generator and watches the caller.
template <class Self, class Args, class Fail>
void init_side_call(Self self, Args&& args, Fail fail) {
  auto& st = self->state;
  st.args = std::move(args);
  st.rng.seed(st.args.seed);
  watch_caller(self, st.args.requester, fail);
}

/// The `start` handler's common part: refuses a second start without
/// touching the first caller's promise (it would otherwise never be
/// answered), takes the promise, arms the call deadline and runs `begin`.
template <class Response, class Self, class Begin>
caf::result<Response> start_side_call(Self self, Begin begin) {
  auto& st = self->state;
  if (st.started)
    return make_error(error_code::internal, "call started twice");
  st.promise = self->template make_response_promise<Response>();
  st.started = true;
  st.started_at = self->clock().now();
  if (st.args.deadline_s)
    arm_timer(self, timer_kind::deadline, 0, side_timespan(*st.args.deadline_s));
  begin();
  return st.promise;
}

/// Decides the call's failure once (false when it is already finishing).
template <class Self>
bool begin_failure(Self self, error_code code, std::string message,
                   const attempt_result* upstream) {
  auto& st = self->state;
  if (st.finishing)
    return false;
  st.finishing = true;
  st.failure = side_error(st.args, st.last, code, std::move(message),
                          upstream);
  return true;
}

/// Sends the call row of a finished embedding or OCR call (with
/// `losers_cost_usd`) and, when it failed (`stats` null), its terminal
/// failure row; nothing when `args.telemetry` is invalid.
void write_side_call_rows(const side_call_args& args,
                          caf::actor_clock::time_point started_at,
                          caf::actor_clock::time_point now, int32_t attempts,
                          double losers_cost_usd, const call_stats* stats,
                          const caf::error& failure);

/// Answers the caller once: the failure, or the response after `finish`
/// completed it (total latency and call id are set here); writes the call's
/// telemetry rows, then quits.
template <class Self, class Finish>
void deliver_side_call(Self self, Finish finish) {
  auto& st = self->state;
  st.delivered = true;
  auto now = self->clock().now();
  auto attempts = st.response.stats.attempts;
  if (st.failure) {
    write_side_call_rows(st.args, st.started_at, now, attempts,
                         st.losers_cost_usd, nullptr, st.failure);
    st.promise.deliver(st.failure);
  } else {
    st.response.stats.total_latency_ms = ms_between(st.started_at, now);
    finish(st.response);
    st.response.call_id = st.args.call_id;
    write_side_call_rows(st.args, st.started_at, now, attempts,
                         st.losers_cost_usd, &st.response.stats, st.failure);
    st.promise.deliver(std::move(st.response));
  }
  self->quit();
}

/// One ended request of an embedding or OCR call, for its telemetry row.
struct side_attempt {
  std::string call_id;
  uint64_t attempt = 0;          ///< 1, 2, ... within the call
  const char* operation = "";    ///< embeddings, ocr_text, ocr_layout
  caf::actor_clock::time_point started_at;
  outcome kind = outcome::ok;
  const attempt_result* res = nullptr; ///< null when stopped before its outcome
  int64_t settled = 0;
  caf::optional<double> cost_usd;
};

/// Sends the attempt row of `a` on `src` (nothing when `telemetry` is
/// invalid); `now` and `wall_offset_ms` give its times.
void write_side_row(const telemetry_actor& telemetry, const call_source& src,
                    const side_attempt& a, caf::actor_clock::time_point now,
                    double wall_offset_ms);

/// Ends the running request `req` on `src`: `end_admitted`, then its
/// attempt row (`operation`, `res`, `amount` settled, `cost`); clears the
/// request's permit and handle.
void end_side_request(const side_call_args& args, const call_source& src,
                      side_request& req, const char* operation, outcome kind,
                      int64_t amount, caf::optional<double> retry_after,
                      const attempt_result* res, caf::optional<double> cost,
                      bool feeds_health, caf::actor_clock::time_point now);

} // namespace pgw
