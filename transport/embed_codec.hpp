#pragma once

/// OpenAI-compatible embedding bodies: building `POST {BASE_URL}/embeddings`
/// and decoding its answer.

#include "config/settings.hpp"
#include "messages/outcome.hpp"

#include <string>
#include <vector>

namespace pgw {

/// `{"model": MODEL, "input": [inputs[begin..end)], "encoding_format":
/// "float"}`, then the source's OVERLAY merged over it (it may not change
/// `model` or `input`; an OVERLAY that is not an object is ignored here —
/// validate rejects it before any call).
std::string build_embed_body(const source_config& src,
                             const std::vector<std::string>& inputs,
                             size_t begin, size_t end);

/// Decodes a 2xx embeddings body holding `expected` vectors into `vectors`
/// (ordered by each item's `index`), `out.model` and the usage
/// (`usage.prompt_tokens`, else `usage.total_tokens`). Leaves `out.kind`
/// alone on success; otherwise sets `result_invalid` with reason
/// `malformed_body` (not JSON, no `data` list, an item without a numeric
/// `embedding` or a valid `index`), `wrong_count` (not exactly one vector per
/// input) or `ragged_vectors` (vectors of different lengths); an `{"error":
/// …}` body is classified like a failed chat answer.
void decode_embeddings(const std::string& body, size_t expected,
                       std::vector<std::vector<float>>& vectors,
                       attempt_result& out);

/// Estimated tokens of one input before usage is known: a token per four
/// bytes, at least one.
int64_t estimate_embed_tokens(const std::string& input);

} // namespace pgw
