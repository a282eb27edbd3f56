#pragma once

/// OpenAI-compatible chat bodies: building the request, decoding a
/// non-streaming answer, and accumulating a streamed one (SPEC §10).

#include "config/settings.hpp"
#include "messages/chat.hpp"
#include "messages/outcome.hpp"
#include "transport/sse_parser.hpp"
#include "transport/tool_calls.hpp"

#include <caf/expected.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace pgw {

/// Builds the JSON body of `POST {BASE_URL}/chat/completions`:
/// `model` (the source's MODEL), `messages` (text content, or content parts
/// as `[{"type":"text","text":…}, {"type":"image_url","image_url":{"url":…}}]`),
/// `temperature`, `top_p`, the token limit under the profile's
/// `max_tokens_field`, `stop`, `stream` (and `stream_options.include_usage`
/// when streaming and the profile asks for usage), the reasoning effort
/// mapped by the profile (dotted path → nested objects; not sent when the
/// profile has no mapping for the value), the messages' `tool_calls`,
/// `tool_call_id` and `name`, and `tools`, `tool_choice`, `response_format`,
/// `parallel_tool_calls`, `seed`, `user` when set. Then the source's `OVERLAY` is
/// merged (objects merged recursively, other values replaced), then the
/// request's `extra_body`. An `extra_body` that is not a JSON object is an
/// `invalid_request` error naming `extra_body`; an `OVERLAY` that is not one
/// is an `invalid_config` error naming it. Neither may change `model`,
/// `stream` or `messages`, which are always set from the source and the
/// request; `stream_options` is never sent when not streaming. A request
/// with a `schema` then gets its rung's response format and instructions
/// (transport/structured_body.hpp, `apply_structured`, rung = `strategy`).
caf::expected<std::string> build_chat_body(const chat_request& req,
                                           const source_config& src,
                                           bool stream);

/// Checks a caller's request before anything starts: at least one message,
/// every role one of system/user/assistant/tool/developer, temperature in
/// [0, 2], top_p in [0, 1], max_tokens ≥ 1, a finite positive deadline,
/// effort one of none/low/medium/high, extra_body a JSON object, `n` unset
/// or 1, `tools` a JSON array, `tool_choice` a JSON string or object,
/// `response_format` a JSON object, each message tool call with an id and a
/// name. Returns an
/// `invalid_request` error naming the field, or a default (empty) error.
caf::error check_request(const chat_request& req);

/// The offset of the first byte of `s` that is not part of a well-formed
/// UTF-8 sequence (RFC 3629: no overlongs, no surrogates, ≤ U+10FFFF), or
/// none: a request's text must be UTF-8 before it goes into a JSON body.
std::optional<size_t> invalid_utf8_at(std::string_view s);

/// Decodes a complete non-streaming 200 body into `out`: `content`,
/// `reasoning_content` (`reasoning_content` or `reasoning` of the message),
/// `finish_reason`, `model`, usage (`usage_reported`, tokens), tool calls
/// (normalised by `tool_call_assembler`; `finish_reason` becomes
/// `tool_calls`, and arguments that are not a JSON object make the answer
/// `result_invalid` / `tool_arguments_invalid`). Sets
/// `out.kind = ok` and `reason = "ok"`, or `result_invalid` with reason
/// `malformed_body` (not JSON, no choices, no message) or `empty_answer`
/// (no content, no reasoning, no tool calls), or — when the body is an
/// `{"error": …}` object — classifies it with `classify_stream_error`.
void decode_chat_completion(const std::string& body, attempt_result& out);

/// Accumulates a streamed chat answer from SSE events.
class stream_accumulator {
public:
  /// What one event meant.
  enum class step {
    more,        ///< keep reading
    first_token, ///< this event carried the first non-empty delta
    done,        ///< `[DONE]` arrived: the stream is over
    error,       ///< an error event: the attempt is over, see `finish`
  };

  /// Consumes one event: `[DONE]` ends; a `data` that is not JSON (or not an
  /// object) is skipped and counted as malformed; an object with `error`, or
  /// any event named `error`, is classified (`classify_stream_error`) and
  /// later events change nothing; otherwise `choices[0].delta`'s
  /// `content`, `reasoning_content`/`reasoning` and `tool_calls` are
  /// appended, `finish_reason` recorded, `model` and `usage` taken when
  /// present (usage may come in a final chunk with empty `choices`). The
  /// first non-empty delta (content, reasoning or tool call) is the first
  /// token. Deltas after the `finish_reason` are ignored (usage is still
  /// taken); an answer growing beyond `max_answer_bytes` ends the stream
  /// with `source_rejected` / `response_too_large`; usage outside
  /// [0, 10^9] makes it `unavailable` for good (`usage_rejected`).
  step on_event(const sse_event& ev);

  /// `max_answer_bytes` caps content + reasoning + tool-call deltas.
  explicit stream_accumulator(
    size_t max_answer_bytes = static_cast<size_t>(8) * 1024 * 1024)
    : max_answer_bytes_(max_answer_bytes) {
    // nop
  }

  /// True once a `finish_reason` arrived.
  bool finished() const {
    return !finish_reason_.empty();
  }

  /// True once any non-empty delta arrived.
  bool got_first_token() const {
    return first_token_;
  }

  /// Events so far that moved the answer on: a delta with content,
  /// reasoning or tool-call data, or the `finish_reason`. Keep-alive
  /// comments, empty deltas and usage do not (STREAM_IDLE_TIMEOUT_S).
  uint64_t progress() const {
    return progress_;
  }

  /// Completes `out` when the stream is over (after `done`, an `error` step,
  /// or EOF). A stream is complete only once a `finish_reason` arrived:
  /// otherwise the outcome is `transient` with reason `stream_cut`. An error
  /// event's classification wins. A complete stream with neither content,
  /// reasoning nor tool calls is `result_invalid` / `empty_answer`. Tool
  /// calls are normalised as in `decode_chat_completion`.
  void finish(attempt_result& out) const;

  int32_t malformed() const {
    return malformed_;
  }

  /// Live streaming: from now on each event's addition to the answer is
  /// kept until `take_delta` (content, reasoning and tool-call fragments,
  /// normalised as the final answer is; nothing after the `finish_reason`).
  void capture_deltas() {
    if (!delta_)
      delta_ = std::make_unique<stream_delta>();
  }

  /// What the last events added since the previous call (empty when
  /// nothing, or when not capturing).
  stream_delta take_delta() {
    if (!delta_)
      return {};
    return std::exchange(*delta_, stream_delta{});
  }

private:
  std::string content_;
  std::string reasoning_;
  /// On the heap from the first tool-call delta (most answers have none).
  std::unique_ptr<tool_call_assembler> tool_calls_;
  std::string finish_reason_;
  std::string model_;
  size_t max_answer_bytes_;
  bool first_token_ = false;
  bool usage_reported_ = false;
  bool usage_rejected_ = false;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  int32_t malformed_ = 0;
  uint64_t progress_ = 0;
  /// Set by an error event or the answer cap, which decide the attempt
  /// (on the heap: 344 bytes a stream in flight would otherwise hold).
  std::unique_ptr<attempt_result> error_result_;
  /// Set by `capture_deltas` (a buffered call never needs one).
  std::unique_ptr<stream_delta> delta_;
};

} // namespace pgw
