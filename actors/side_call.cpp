#include "actors/side_call.hpp"

#include "actors/accounting.hpp"
#include "actors/selector.hpp"

#include <caf/send.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace pgw {

void end_admitted(const call_source& src, const gateway_actor& gateway,
                  const admit_result& admitted, outcome kind, int64_t amount,
                  caf::optional<double> retry_after, bool feeds_health) {
  auto& id = admitted.granted_permit.id;
  if (kind == outcome::cancelled) {
    if (!id.empty())
      caf::anon_send(src.limiter, atom::settle_v, id, amount, atom::release_v);
    if (admitted.probe)
      caf::anon_send(src.breaker, atom::release_v, admitted.epoch);
  } else if (!id.empty()) {
    // Settle, release and the breaker's feed: one message, one backend call
    // with a governance pair (issue 17).
    caf::anon_send(src.limiter, atom::settle_v, id, amount, atom::release_v,
                   admitted.epoch, kind);
  } else {
    caf::anon_send(src.breaker, atom::record_v, admitted.epoch, kind);
  }
  attempt_report rep;
  rep.source = admitted.source;
  rep.kind = kind;
  rep.retry_after_s = retry_after;
  rep.feeds_health = feeds_health;
  caf::anon_send(gateway, atom::report_v, std::move(rep));
}

caf::optional<double> refusal_wait(const scope_config& scope,
                                   const admit_result& refused, bool& quota) {
  caf::optional<double> wait_s;
  quota = false;
  for (auto& [source, reason] : refused.skipped) {
    // A cooling source (429 memo) counts as a full quota (SPEC §12).
    bool limited = reason == skip_reason::quota
                   || reason == skip_reason::cooling;
    quota = quota || limited;
    bool waits = (limited && scope.on_quota_full == refusal_policy::wait)
                 || (reason == skip_reason::circuit_open
                     && scope.on_circuit_open == refusal_policy::wait);
    if (!waits)
      continue;
    auto i = refused.retry_in.find(source);
    auto in = i != refused.retry_in.end() ? i->second : 0.0;
    if (!wait_s || in < *wait_s)
      wait_s = in;
  }
  return wait_s;
}

void write_side_row(const telemetry_actor& telemetry, const call_source& src,
                    const side_attempt& a, caf::actor_clock::time_point now,
                    double wall_offset_ms) {
  if (!telemetry)
    return;
  attempt_row row;
  row.call_id = a.call_id;
  row.attempt = a.attempt;
  row.scope = src.config->scope;
  row.source = src.config->name;
  row.request_model = src.config->model;
  row.started_at_ms = wall_ms(a.started_at, wall_offset_ms);
  row.latency_ms = ms_between(a.started_at, now);
  row.outcome = to_string(a.kind);
  row.settled_tokens = a.settled;
  row.cost_usd = a.cost_usd;
  row.operation = a.operation;
  fill_result(row, a.kind, a.res);
  caf::anon_send(telemetry, atom::record_v, std::move(row));
}

caf::timespan side_timespan(double seconds) {
  return std::chrono::ceil<caf::timespan>(
    std::chrono::duration<double>(std::max(0.0, seconds)));
}

const call_source* side_source(const side_call_args& args,
                               const std::string& name) {
  auto i = args.sources->find(name);
  return i == args.sources->end() ? nullptr : &i->second;
}

std::vector<std::string> pin_exclusions(const side_call_args& args) {
  std::vector<std::string> out;
  if (!args.pin.empty())
    for (auto& entry : *args.sources)
      if (entry.first != args.pin)
        out.push_back(entry.first);
  return out;
}

void source_history::note(const std::string& source,
                          const attempt_result& res) {
  auto& r = reason[source] = res.kind == outcome::ok ? "ok" : res.reason;
  error[source] = source_error{r, res.http_status, res.error_message, {}};
}

void source_history::skipped(const std::string& source,
                             const std::string& why_skipped,
                             const std::string& why) {
  reason[source] = why_skipped;
  auto& e = error[source];
  e = after_skip(e, why_skipped, why);
}

std::string refusal_words(admission_refusal refusal) {
  switch (refusal) {
    case admission_refusal::quota:
      return "no source may run: every source's quota is full";
    case admission_refusal::cooling:
      return "no source may run: every source is cooling down after a 429";
    case admission_refusal::circuit_open:
      return "every source's circuit is open";
    default:
      return "no source may run: quota full, cooling down after a 429 or "
             "circuit open everywhere";
  }
}

refusal_step after_refusal(const scope_config& scope, const admit_result& r,
                           const side_retry& line, source_history& last,
                           std::string rejected_message,
                           caf::optional<double> time_left_s) {
  refusal_step step;
  for (auto& [source, reason] : r.skipped) {
    auto why = r.why.find(source);
    last.skipped(source, to_string(reason),
                 why == r.why.end() ? std::string{} : why->second);
  }
  if (r.refusal == admission_refusal::none) {
    if (line.last_rejection) {
      step.code = error_code::request_rejected;
      step.message = std::move(rejected_message);
      step.upstream = &*line.last_rejection;
    } else if (line.last_unusable) {
      // The upstreams answered, nothing usable: not the caller's fault.
      step.code = error_code::result_invalid;
      step.message
        = std::string{no_usable_answer} + ": " + describe(last.error);
      step.upstream = &*line.last_unusable;
    } else if (line.local_exhausted) {
      step.code = error_code::retry_exhausted;
      step.message = std::string{local_words} + ": " + describe(last.error);
    } else {
      step.code = error_code::retry_exhausted;
      step.message = "no source left to try";
    }
    return step;
  }
  bool quota = false;
  step.wait_s = refusal_wait(scope, r, quota);
  if (!step.wait_s) {
    step.code = quota ? error_code::quota_exhausted : error_code::circuit_open;
    step.message = refusal_words(r.refusal);
  } else if (time_left_s && *step.wait_s >= *time_left_s) {
    // Waiting would only spend the deadline (as call_plan decides).
    step.code = quota ? error_code::quota_exhausted : error_code::circuit_open;
    step.message = fmt::format("no source may run before the call's "
                               "deadline: the earliest frees up in {:.1f} s",
                               *step.wait_s);
    step.wait_s = caf::none;
  }
  return step;
}

std::pair<error_code, std::string> admission_failure(const caf::error& err) {
  if (code_of(err) == error_code::governance_unavailable)
    return {error_code::governance_unavailable, words_of(err)};
  return {error_code::internal, "admission failed: " + describe(err)};
}

caf::optional<double> after_failure(const scope_config& scope,
                                    side_retry& line, outcome kind,
                                    const std::string& source,
                                    std::mt19937_64& rng) {
  if (kind != outcome::rate_limited) {
    ++line.failures[source];
    if (++line.budget_used >= scope.max_attempts)
      return caf::none;
  }
  std::uniform_real_distribution<double> u01{0.0, 1.0};
  return backoff_delay(++line.rounds_failed, scope.backoff_base_s,
                       scope.backoff_max_s, u01(rng));
}

std::string budget_message(const scope_config& scope) {
  return "all " + std::to_string(scope.max_attempts)
         + " attempts of the retry budget failed";
}

caf::error side_error(const side_call_args& args, const source_history& last,
                      error_code code, std::string message,
                      const attempt_result* upstream) {
  error_detail detail;
  detail.message = std::move(message);
  detail.per_source = last.reason;
  detail.sources = last.error;
  detail.call_id = args.call_id;
  if (upstream != nullptr) {
    detail.upstream_status = upstream->http_status;
    detail.upstream_code = upstream->error_code;
    detail.upstream_message = upstream->error_message;
  }
  return make_error(code, std::move(detail));
}

void write_side_call_rows(const side_call_args& args,
                          caf::actor_clock::time_point started_at,
                          caf::actor_clock::time_point now, int32_t attempts,
                          double losers_cost_usd, const call_stats* stats,
                          const caf::error& failure) {
  if (!args.telemetry)
    return;
  call_row row;
  row.call_id = args.call_id;
  row.scope = args.scope->name;
  row.started_at_ms = wall_ms(started_at, args.wall_offset_ms);
  row.attempts = attempts;
  row.latency_ms = ms_between(started_at, now);
  row.losers_cost_usd = losers_cost_usd;
  if (stats != nullptr) {
    fill_ok_call(row, *stats);
    caf::anon_send(args.telemetry, atom::record_v, std::move(row));
    return;
  }
  auto fail_row = fail_call(row, failure);
  caf::anon_send(args.telemetry, atom::record_v, std::move(row));
  caf::anon_send(args.telemetry, atom::record_v, std::move(fail_row));
}

void end_side_request(const side_call_args& args, const call_source& src,
                      side_request& req, const char* operation, outcome kind,
                      int64_t amount, caf::optional<double> retry_after,
                      const attempt_result* res, caf::optional<double> cost,
                      bool feeds_health, caf::actor_clock::time_point now) {
  end_admitted(src, args.gateway, req.admitted, kind, amount, retry_after,
               feeds_health);
  side_attempt a{args.call_id, req.attempt, operation, req.sent_at, kind,
                 res, amount, cost};
  write_side_row(args.telemetry, src, a, now, args.wall_offset_ms);
  req.handle.reset();
  req.gate.reset();
  req.admitted = admit_result{};
}

} // namespace pgw
