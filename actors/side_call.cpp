#include "actors/side_call.hpp"

#include "actors/accounting.hpp"

#include <caf/send.hpp>

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
    bool waits = (limited && scope.on_quota_full == "wait")
                 || (reason == skip_reason::circuit_open
                     && scope.on_circuit_open == "wait");
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

} // namespace pgw
