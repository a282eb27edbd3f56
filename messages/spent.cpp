#include "messages/spent.hpp"

namespace pgw {

void add_spent(spent_by_source& into, const std::string& source,
               int64_t prompt_tokens, int64_t completion_tokens,
               caf::optional<double> cost) {
  auto& w = into[source];
  w.prompt_tokens += prompt_tokens;
  w.completion_tokens += completion_tokens;
  if (cost)
    w.cost_usd = (w.cost_usd ? *w.cost_usd : 0.0) + *cost;
}

void add_spent(spent_by_source& into, const std::string& source,
               const spent_work& work) {
  add_spent(into, source, work.prompt_tokens, work.completion_tokens,
            work.cost_usd);
  into[source].estimated_tokens += work.estimated_tokens;
}

} // namespace pgw
