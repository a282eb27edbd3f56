#include "actors/embed_batches.hpp"

#include "transport/embed_codec.hpp"

#include <algorithm>

namespace pgw {

batch_splitter::batch_splitter(int64_t max_inputs, int64_t max_tokens)
  : max_inputs_(static_cast<size_t>(std::max<int64_t>(1, max_inputs))),
    max_tokens_(std::max<int64_t>(1, max_tokens)) {
  // nop
}

std::vector<embed_batch>
batch_splitter::split(const std::vector<std::string>& inputs) const {
  std::vector<embed_batch> out;
  embed_batch cur;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto est = estimate_embed_tokens(inputs[i]);
    auto count = i - cur.begin;
    if (count > 0
        && (count >= max_inputs_ || cur.est_tokens + est > max_tokens_)) {
      cur.end = i;
      out.push_back(cur);
      cur = embed_batch{};
      cur.begin = i;
    }
    cur.est_tokens += est;
  }
  if (!inputs.empty()) {
    cur.end = inputs.size();
    out.push_back(cur);
  }
  return out;
}

} // namespace pgw
