#pragma once

/// The settlement rule (SPEC §8): settle what is known; if the upstream may
/// have generated tokens and the amount is unknown, settle the estimate; if
/// it certainly generated nothing, settle 0.

#include "messages/outcome.hpp"
#include "messages/spent.hpp"

#include <cstdint>
#include <optional>

namespace pgw {

/// Tokens to settle for an attempt whose outcome is known:
/// ok → reported usage (even 0), else est; request_rejected,
/// source_rejected, source_dead, rate_limited → 0; result_invalid → reported
/// usage, else est; transient → est when the upstream was reached, else 0
/// (connect failure before sending). Usage is used only when each count is
/// ≥ 0 and their sum ≤ 10^9; the result is always in [0, max(10^9, est)].
/// An answer cut for its size (`response_too_large`) settles est.
int64_t settle_amount(const attempt_result& res, int64_t est);

/// The reported usage `settle_amount` takes: reported, each count ≥ 0, their
/// sum ≤ 10^9.
bool usage_usable(const attempt_result& res);

/// The work an attempt's settlement stands for (serve's /metrics counts
/// it): its usable reported usage, else the tokens it settled by estimate
/// (`estimated_tokens`); none when it settled nothing. `res` null: stopped
/// before its outcome, counted as started (the plan does not see whether
/// its request had gone out, a window of microseconds after the spawn).
std::optional<spent_work> settled_work(const attempt_result* res,
                                       int64_t est);

/// Tokens to settle for an attempt stopped before its outcome was known:
/// est once its request may be in flight, 0 when nothing was sent.
int64_t settle_cancelled(bool request_started, int64_t est);

} // namespace pgw
