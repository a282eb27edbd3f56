#pragma once

/// Splitting an embedding call into sub-batches (plain logic, no actors).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pgw {

/// Inputs `[begin, end)` of a call, sent as one upstream request.
struct embed_batch {
  size_t begin = 0;
  size_t end = 0;
  /// Estimated tokens of the batch (reserved at admission).
  int64_t est_tokens = 0;
};

/// Cuts a list of inputs into consecutive sub-batches of at most
/// `max_inputs` inputs and at most `max_tokens` estimated tokens each
/// (`estimate_embed_tokens` per input). Order is kept: the batches cover the
/// inputs exactly once, in order. An input whose own estimate exceeds
/// `max_tokens` travels alone (the upstream decides whether it fits).
class batch_splitter {
public:
  /// Both limits are at least 1 (smaller values are raised to 1).
  batch_splitter(int64_t max_inputs, int64_t max_tokens);

  std::vector<embed_batch> split(const std::vector<std::string>& inputs) const;

private:
  size_t max_inputs_;
  int64_t max_tokens_;
};

} // namespace pgw
