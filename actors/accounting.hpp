#pragma once

/// What an attempt cost (SPEC §10): priced usage when the upstream reported
/// it; a hedge loser, settled at its estimate, priced as that many output
/// tokens (an upper bound of what it may have been billed); otherwise
/// unknown.

#include "config/pricing.hpp"
#include "messages/outcome.hpp"

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

} // namespace pgw
