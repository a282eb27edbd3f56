#pragma once

/// The simulator's `POST /v1/embeddings` pieces: request parsing and
/// deterministic answers (the vector of an input depends only on its text).

#include <cstddef>
#include <string>
#include <vector>

namespace pgw::sim::detail {

struct embed_request {
  std::string model;
  std::vector<std::string> inputs;
  int prompt_tokens = 1; ///< a token per 4 input bytes, at least 1
};

/// Returns an error message, or empty when `body` is a usable request
/// (`model` a string, `input` a non-empty string or array of non-empty
/// strings; `encoding_format`, when given, "float").
std::string parse_embed(const std::string& body, embed_request& out);

/// The vector of `input`: `dim` values in [-1, 1) from a hash of the text.
std::vector<float> embed_vector(const std::string& input, size_t dim);

/// The OpenAI embeddings answer for `req` with vectors of length `dim`.
std::string embeddings_body(const embed_request& req, size_t dim, bool usage);

} // namespace pgw::sim::detail
