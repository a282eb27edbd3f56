#include "messages/spent.hpp"

namespace pgw {

void add_spent(spent_by_source& into, const std::string& source,
               const spent_work& work) {
  auto& w = into[source];
  w.prompt_tokens += work.prompt_tokens;
  w.completion_tokens += work.completion_tokens;
  w.estimated_tokens += work.estimated_tokens;
  if (work.cost_usd)
    w.cost_usd = (w.cost_usd ? *w.cost_usd : 0.0) + *work.cost_usd;
}

} // namespace pgw
