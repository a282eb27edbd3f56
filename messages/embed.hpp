#pragma once

/// The embedding call a caller sends to a gateway and the answer it gets.

#include "pgw/messages/chat.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pgw {

/// A logical embedding call: one vector per input, in input order.
struct embed_request {
  std::vector<std::string> inputs;
  /// Per-call bound of the whole call in seconds; unset = CALL_DEADLINE_S.
  caf::optional<double> deadline_s;
  /// Optional caller-chosen id; used to cancel the call.
  std::string call_id;
  /// Pins the call to this source of the scope (empty = any source): every
  /// sub-batch runs there, split by its own batch limits.
  std::string source;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, embed_request& x) {
  return f(caf::meta::type_name("pgw.embed_request"), x.inputs, x.deadline_s,
           x.call_id, x.source);
}

/// The answer to a successful embedding call. `stats.prompt_tokens` and
/// `stats.generation_ms` are summed over the sub-batches; `stats.source`
/// names the sources that answered, comma-separated, in first-use order.
struct embed_response {
  std::vector<std::vector<float>> vectors;
  std::string model;
  int32_t sub_batches = 0;
  call_stats stats;
  std::string call_id;
  /// The upstream work by source (serve's /metrics counts it there, not all
  /// against the first source): the prompt tokens each source reported
  /// (sub-batches without reported usage left out), and each source's cost
  /// (meaningful only when `stats.cost_usd` is set).
  std::map<std::string, int64_t> reported_tokens_by_source;
  std::map<std::string, double> cost_by_source;
  /// The prompt tokens each source's permits settled by estimate for work
  /// of unknown size: sub-batches answered without usage (their sum is
  /// `stats.prompt_tokens − stats.reported_prompt_tokens`), and failed or
  /// cancelled ones whose request was sent.
  std::map<std::string, int64_t> estimated_tokens_by_source;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, embed_response& x) {
  return f(caf::meta::type_name("pgw.embed_response"), x.vectors, x.model,
           x.sub_batches, x.stats, x.call_id, x.reported_tokens_by_source,
           x.cost_by_source, x.estimated_tokens_by_source);
}

} // namespace pgw
