#pragma once

/// Upstream work a call paid for beyond the answer it returned (serve's
/// /metrics counts it against the source that did it).

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace pgw {

/// What one source did for work the caller does not get: the tokens it
/// reported; the tokens its permits settled by estimate for work whose
/// usage it never reported (SPEC §8: a leg stopped while its request ran,
/// an answer cut or refused without usage); and, when the source is
/// priced, what they cost (a hedge loser's estimate priced as completion
/// tokens, as the call row's `losers_cost_usd` does).
struct spent_work {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t estimated_tokens = 0;
  caf::optional<double> cost_usd;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spent_work& x) {
  return f(caf::meta::type_name("pgw.spent_work"), x.prompt_tokens,
           x.completion_tokens, x.estimated_tokens, x.cost_usd);
}

/// By source name.
using spent_by_source = std::map<std::string, spent_work>;

/// Adds `work` to `into[source]` (a cost stays unknown only while no part
/// of it is known).
void add_spent(spent_by_source& into, const std::string& source,
               const spent_work& work);

} // namespace pgw
