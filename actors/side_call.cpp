#include "actors/side_call.hpp"

#include <caf/send.hpp>

namespace pgw {

void end_admitted(const call_source& src, const gateway_actor& gateway,
                  const admit_result& admitted, outcome kind, int64_t amount,
                  caf::optional<double> retry_after, bool feeds_health) {
  if (!admitted.granted_permit.id.empty())
    caf::anon_send(src.limiter, atom::settle_v, admitted.granted_permit.id,
                   amount, atom::release_v);
  if (kind == outcome::cancelled) {
    if (admitted.probe)
      caf::anon_send(src.breaker, atom::release_v, admitted.epoch);
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

} // namespace pgw
