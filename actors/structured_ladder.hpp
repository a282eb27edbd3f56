#pragma once

/// Structured output (SPEC §12): the strategy ladder per source, and the
/// re-ask feedback.

#include "actors/structured_schema.hpp"
#include "config/settings.hpp"
#include "messages/chat.hpp"
#include "messages/outcome.hpp"

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace pgw {

/// Which rung each source is asked with. A source starts at the strongest
/// rung its provider profile lists (`config/providers.json`, `structured`);
/// a 400 that rejects the response format moves it one supported rung down,
/// for as long as the ladder lives (a gateway keeps one for the process).
/// Thread-safe: the call supervisors of a scope share one.
class structured_ladder {
public:
  /// The rung to ask `src` with: `requested` when it forces a rung,
  /// otherwise the strongest rung of the profile that `src` has not
  /// rejected.
  schema_strategy rung_for(const source_config& src,
                           schema_strategy requested) const;

  /// `src` rejected `used`: it is asked with the next supported rung below
  /// `used` from now on. Returns that rung, or nullopt when there is none
  /// (`used` was `prompt`). Lowering twice for the same rung (two calls in
  /// flight) moves it once.
  std::optional<schema_strategy> lower(const source_config& src,
                                       schema_strategy used);

private:
  mutable std::mutex mtx_;
  /// Source name → the strongest rung still allowed.
  std::map<std::string, schema_strategy> cap_;
};

/// True when `res` is an upstream 4xx that rejects the response format:
/// `request_rejected` or `source_rejected` whose error message or code
/// names `response_format` (OpenAI names the param in the message).
bool rejects_response_format(const attempt_result& res);

/// The bad answer as echoed back in a re-ask, capped at this many bytes.
constexpr size_t max_echoed_answer_bytes = 32 * 1024;

/// The messages of a re-ask round: `original`, then the model's bad answer
/// as an `assistant` message (capped at `max_echoed_answer_bytes`), then a
/// `user` message with the validator's errors:
///
///     Your previous answer does not match the required JSON Schema.
///     Validation errors (JSON pointer: message):
///     /age: Value type not permitted by 'type' constraint.
///     Answer again with one JSON value only that conforms to the schema,
///     with no code fences and no text around it.
std::vector<chat_message> reask_messages(
  const std::vector<chat_message>& original, const std::string& bad_answer,
  const std::vector<schema_issue>& issues);

} // namespace pgw
