#pragma once

/// The simulator's `POST /v1/embeddings` pieces: request parsing and
/// deterministic answers (the vector of an input depends only on its text).

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace pgw::sim::detail {

struct embed_request {
  std::string model;
  std::vector<std::string> inputs;
  int prompt_tokens = 1; ///< a token per 4 input bytes, at least 1
};

/// The head every simulated endpoint reads: `body` parsed into `doc`, a
/// JSON object with a string `model`. Returns OpenAI's error message, or
/// empty (then `doc` is an object and `model` set).
std::string parse_request_head(const std::string& body, boost::json::value& doc,
                               std::string& model);

/// Returns an error message, or empty when `body` is a usable request
/// (`model` a string, `input` a non-empty string or array of non-empty
/// strings; `encoding_format`, when given, "float").
std::string parse_embed(const std::string& body, embed_request& out);

/// The vector of `input`: `dim` values in [-1, 1) from a hash of the text.
std::vector<float> embed_vector(const std::string& input, size_t dim);

/// The OpenAI embeddings answer for `req` with vectors of length `dim`.
std::string embeddings_body(const embed_request& req, size_t dim, bool usage);

// -- MonkeyOCR-style `/ocr/text` and `/parse` ---------------------------------

/// The bytes of the first part of a `multipart/form-data` body (the
/// boundary is read from the body's first line); false when malformed.
bool multipart_file(const std::string& body, std::string& out);

/// The text the simulator "recognises" in `file`: it names a hash of the
/// bytes, so a test can tell which image was read.
std::string ocr_text_of(const std::string& file);

/// `{success: true, task_type: "text", content}` for `/ocr/text`, or a
/// layout (`content` and a two-block `content_list`) for `/parse`.
std::string ocr_body(const std::string& file, bool layout);

/// The bytes of a `data:<type>;base64,<...>` URL; false when it is not one.
bool data_url_bytes(const std::string& url, std::string& out);

/// HTTP 200 with `{success: false, message}`: how such servers fail.
std::string ocr_failure_body(const std::string& message);

} // namespace pgw::sim::detail
