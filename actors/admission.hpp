#pragma once

/// Admission (SPEC §7), run by the gateway: order the candidates, then for
/// each one skip it when excluded (silently) or cooling, enter its breaker,
/// acquire a limiter permit (giving the breaker entry back when refused),
/// and admit the first that passes. Internal to the gateway.

#include "actors/gateway.hpp"

namespace pgw::detail {

using gateway_self = gateway_actor::stateful_pointer<gateway_state>;

/// Runs one admission; `rp` gets the result (or `governance_unavailable`).
void admit(gateway_self self, admit_request req,
           caf::typed_response_promise<admit_result> rp);

/// Gives back an admission that will not run: settles the permit at 0,
/// releases it, returns a probe lease, and ends the in-flight count.
void abandon(gateway_self self, const admit_result& admitted);

} // namespace pgw::detail
