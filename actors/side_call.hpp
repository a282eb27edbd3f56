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

} // namespace pgw
