#include "actors/accounting.hpp"

namespace pgw {

caf::optional<double> attempt_cost(const price_table* prices,
                                   const std::string& scope,
                                   const std::string& source,
                                   const std::string& model, outcome kind,
                                   const attempt_result* res,
                                   int64_t settled_tokens) {
  if (prices == nullptr)
    return caf::none;
  std::optional<double> cost;
  if (res != nullptr && res->usage_reported)
    cost = prices->cost(scope, source, model, res->prompt_tokens,
                        res->completion_tokens);
  else if (kind == outcome::hedge_cancelled)
    cost = prices->cost(scope, source, model, 0, settled_tokens);
  if (!cost)
    return caf::none;
  return *cost;
}

} // namespace pgw
