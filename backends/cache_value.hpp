#pragma once

/// What the response cache stores per key: an answer and when it was
/// stored, as a small JSON document, and the rules for what may be stored
/// and what a read accepts (issue 14).

#include "messages/chat.hpp"

#include <caf/expected.hpp>

#include <string>

namespace pgw {

/// The per-call cache control (chat_request::cache), parsed at the edge.
enum class cache_mode { on, off, read_only, write_only };

/// Parses "", "on", "off", "read_only", "write_only" (also with '-').
/// Fails with `invalid_request` naming the accepted values.
caf::expected<cache_mode> parse_cache_mode(const std::string& text);

/// Whether a call in `mode` reads / writes the cache.
inline bool cache_reads(cache_mode m) {
  return m == cache_mode::on || m == cache_mode::read_only;
}
inline bool cache_writes(cache_mode m) {
  return m == cache_mode::on || m == cache_mode::write_only;
}

/// A stored answer.
struct cached_answer {
  chat_response response;
  /// Wall-clock seconds since the epoch when it was stored.
  double stored_at_s = 0;
};

/// True when `resp` may be stored: a finish reason arrived and is not
/// `length` (a truncated answer; allowed with `store_length`, the scope's
/// CACHE__STORE_LENGTH), and every tool call has a name and arguments that
/// parse as JSON. (The stream's clean end is the caller's part: only a
/// complete success reaches here.) On false, `why` says why.
bool cacheable(const chat_response& resp, std::string* why = nullptr,
               bool store_length = false);

/// The stored form: the answer's content, reasoning, finish reason, source,
/// model, usage, tool calls and the original call's cost, plus stored_at_s.
std::string encode_cached_answer(const cached_answer& x);

/// Reads `encode_cached_answer`'s output. Anything else (truncated,
/// garbage, wrong types, a non-cacheable answer) fails with `internal`
/// and a message saying what is wrong. A `length` answer decodes (a scope
/// with CACHE__STORE_LENGTH stored it); whether to serve it is the
/// reader's choice.
caf::expected<cached_answer> decode_cached_answer(const std::string& text);

/// The answer a hit returns: `stored`'s content, usage, source, model,
/// finish reason and tool calls, with cache_hit=true, attempts=0,
/// generation_ms=0 and `call_id` as given.
chat_response hit_response(const cached_answer& stored,
                           const std::string& call_id);

} // namespace pgw
