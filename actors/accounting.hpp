#pragma once

/// What an attempt cost (SPEC §10): priced usage when the upstream reported
/// it; a hedge loser, settled at its estimate, priced as that many output
/// tokens (an upper bound of what it may have been billed); otherwise
/// unknown.

#include "config/pricing.hpp"
#include "messages/outcome.hpp"

#include <caf/actor_clock.hpp>
#include <caf/error.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>

namespace pgw {

/// `kind` is the attempt's final label (its outcome, or cancelled /
/// hedge_cancelled); `res` its result when one arrived (else null).
caf::optional<double> attempt_cost(const price_table* prices,
                                   const std::string& scope,
                                   const std::string& source,
                                   const std::string& model, outcome kind,
                                   const attempt_result* res,
                                   int64_t settled_tokens);

// -- what the attempt and call rows share -------------------------------------

/// `at` (an actor-clock time) as wall-clock ms since the epoch: actors read
/// only their own clock, and rows carry wall time.
double wall_ms(caf::actor_clock::time_point at, double wall_offset_ms);

/// Milliseconds from `from` to `to`.
double ms_between(caf::actor_clock::time_point from,
                  caf::actor_clock::time_point to);

/// "reported" when the upstream reported the usage of `res`, else
/// "unavailable" (SPEC §10: usage is never guessed).
const char* usage_source_of(const attempt_result* res);

struct attempt_row;

/// Fills the fields of an attempt row that come from its result: usage
/// source, and when `res` is set the response model, timings, reason,
/// HTTP status, upstream error (scrubbed) and reported tokens; without a
/// result the reason is `kind`.
void fill_result(attempt_row& row, outcome kind, const attempt_result* res);

struct call_row;
struct call_stats;
struct terminal_failure_row;

/// Fills the call row of a successful call from its `call_stats` (outcome
/// "ok", hedge and cache flags, generation time, source, model, tokens,
/// cost).
void fill_ok_call(call_row& row, const call_stats& stats);

/// For a failed call: sets the row's outcome to the error's code name (and
/// for `stream_interrupted` its source and the usage reported so far) and
/// returns its terminal failure row (message, retry hint, upstream status
/// and code, each source's last reason as JSON).
terminal_failure_row fail_call(call_row& row, const caf::error& failure);

} // namespace pgw
