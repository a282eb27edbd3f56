#pragma once

/// Pieces shared by the calls that run their upstream requests without an
/// attempt actor (embeddings, OCR): they admit through the gateway, start
/// the transport themselves and end each admitted request here.

#include "actors/call_supervisor.hpp"

#include <caf/optional.hpp>

namespace pgw {

/// Ends one admitted request: settles `amount` and releases the permit,
/// records `kind` at the source's breaker (a cancellation records nothing
/// and gives a probe lease back) and reports to the gateway, which feeds
/// the health EWMA only when `feeds_health`.
void end_admitted(const call_source& src, const gateway_actor& gateway,
                  const admit_result& admitted, outcome kind, int64_t amount,
                  caf::optional<double> retry_after, bool feeds_health);

/// After a refusal that is not "none": how long to wait before admitting
/// again (the earliest skipped source that may be waited for: cooling
/// always, quota and open circuits by ON_QUOTA_FULL / ON_CIRCUIT_OPEN), or
/// none when the call must fail; `quota` tells whether quota was among the
/// reasons (`quota_exhausted` rather than `circuit_open`).
caf::optional<double> refusal_wait(const scope_config& scope,
                                   const admit_result& refused, bool& quota);

} // namespace pgw
