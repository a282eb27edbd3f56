#pragma once

/// `pgw-actor serve`: translating between OpenAI's chat completions wire
/// format and pgw's chat_request / chat_response / errors.

#include "messages/chat.hpp"
#include "messages/errors.hpp"
#include "messages/stream.hpp"

#include <boost/json/value.hpp>
#include <caf/error.hpp>

#include <optional>
#include <string>

namespace pgw::serve {

/// A decoded `POST /v1/chat/completions` body.
struct openai_request {
  chat_request req;
  std::string model; ///< as the caller spelled it
  bool stream = false;
  bool include_usage = false; ///< `stream_options.include_usage`
};

/// Parses a request body that must be a JSON object (numbers as written,
/// `parse_json`); on bad input returns a message saying what is wrong and
/// where: empty, not UTF-8 (the byte offset), not JSON (Boost's reason and
/// the byte offset), not an object.
std::optional<std::string> parse_body_object(const std::string& body,
                                             boost::json::value& out);

/// Decodes a request body. Every field pgw models is mapped (messages with
/// tool calls, tools, tool_choice, response_format, seed, user, stop, n,
/// max_tokens / max_completion_tokens, ...); every other top-level field is
/// carried in `extra_body` unchanged. Returns a message naming the field on
/// bad input.
std::optional<std::string> parse_request(const std::string& body,
                                         openai_request& out);

/// The response cache's controls of one request (issue 14): the body's
/// `cache` (on, off, read_only, write_only; already in `req.cache`), the
/// `x-pgw-cache` header (same values; wins over the body), then
/// Cache-Control `no-cache` (do not read) and `no-store` (do not write).
/// Sets `req.cache`; returns a message on a bad value.
std::optional<std::string> apply_cache_controls(const std::string& cache_control,
                                                const std::string& x_pgw_cache,
                                                chat_request& req);

/// True when the upstream reported the answer's usage. Otherwise the
/// answer's `usage` (also in the stream's usage chunk) is null and a
/// buffered answer has the header `x-pgw-usage: unavailable`.
bool usage_known(const chat_response& resp);

/// The `chat.completion` object of an answer.
std::string completion_json(const chat_response& resp, const std::string& model,
                            long long created);

/// The whole answer as `chat.completion.chunk` SSE events (role, the content
/// in pieces of 4 KiB, tool calls, finish reason, the usage chunk when asked)
/// and `data: [DONE]`.
std::string completion_sse(const chat_response& resp, const std::string& model,
                           long long created, bool include_usage);

// -- live streaming (issue 13) -------------------------------------------------

/// The first chunk of a live stream (the assistant role).
std::string stream_open_sse(const std::string& call_id,
                            const std::string& model, long long created);

/// One delta as chunks: reasoning, content, tool-call fragments (with their
/// normalised index; id, type and name on a call's first fragment).
std::string delta_sse(const stream_delta& delta, const std::string& call_id,
                      const std::string& model, long long created);

/// The end of a live stream: the finish reason chunk, the usage chunk when
/// asked, `data: [DONE]`.
std::string stream_close_sse(const chat_response& resp,
                             const std::string& model, long long created,
                             bool include_usage);

/// A failure after streaming began: `data: {"error": …}` (OpenAI's error
/// shape, pgw's code in `error.code`); the stream closes after it.
std::string error_sse(const caf::error& err);

/// An HTTP answer for an error: status, OpenAI error body, Retry-After.
struct error_reply {
  int status = 500;
  std::string body;
  std::optional<long long> retry_after_s;
};

/// OpenAI's error shape `{"error": {message, type, code, param}}` with
/// `code` set to `code`.
std::string error_body(const std::string& message, const std::string& type,
                       const std::string& code);

/// The reply for a call's error: 400 invalid_request / request_rejected,
/// 429 quota_exhausted, 503 the rest of the unavailable family and
/// governance_unavailable (both with Retry-After, at least 1 s), 504
/// call_deadline_exceeded, 499-as-503 cancelled, 500 otherwise.
error_reply reply_for(const caf::error& err);

/// Why serve cancelled the calls still running (its drain time ran out, or
/// a second signal came): from then on a `cancelled` call says this rather
/// than blaming the caller. Set once, before the cancel; any thread.
void set_shutdown_cause(const std::string& why);

/// The pgw code of an error (`internal` for foreign errors).
std::string code_name(const caf::error& err);

} // namespace pgw::serve
