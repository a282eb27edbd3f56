#pragma once

/// Normalising the tool calls of an answer (SPEC §12 "Tool calls"): upstreams
/// stream them as fragments, some without `index`, some reusing index 0 for
/// every call; a few send arguments as objects or answer `stop`.

#include "messages/chat.hpp"
#include "messages/stream.hpp"

#include <map>
#include <string>
#include <vector>

namespace boost::json {
class array;
class value;
} // namespace boost::json

namespace pgw {

/// Assembles tool calls from complete messages or stream deltas.
class tool_call_assembler {
public:
  /// Feeds one `tool_calls` array (a message's, or a stream delta's). Each
  /// element lands in a slot: a known `id` → its slot; a new `id` → a new
  /// slot (even when it reuses an index); no `id` but an `index` seen
  /// before → the slot last given that index; no `id` and no `index` → the
  /// latest slot. `function.name` and `function.arguments` fragments are
  /// appended (an arguments object is serialized). Returns true when the
  /// array carried anything. With `deltas`, each fragment is also appended
  /// there as the caller sees it (live streaming): the slot as `index`, the
  /// id (`call_<i>` when the upstream gave none) and type with the slot's
  /// first fragment, the name when it grows, the arguments piece.
  bool add(const boost::json::array& calls,
           std::vector<tool_call_delta>* deltas = nullptr);

  /// Feeds a legacy `function_call` object as the one tool call.
  bool add_function_call(const boost::json::value& call,
                         std::vector<tool_call_delta>* deltas = nullptr);

  bool empty() const {
    return calls_.empty();
  }

  /// Bytes fed so far (ids, names and arguments), for size caps.
  size_t bytes() const {
    return bytes_;
  }

  /// Live streaming, at the `finish_reason`: an arguments fragment `{}`
  /// for each call whose arguments are still empty, appended to `deltas`
  /// as `add` appends, so that a stream assembled from the deltas reads as
  /// `finish` does.
  void close_empty_arguments(std::vector<tool_call_delta>& deltas) const;

  /// The calls in order of appearance: a missing id becomes `call_<i>`,
  /// empty arguments become `{}`. Sets `problem` (and returns what it has)
  /// when a call has no name or its arguments are not JSON.
  std::vector<tool_call> finish(std::string& problem) const;

private:
  bool add_one(const boost::json::value& call,
               std::vector<tool_call_delta>* deltas);

  std::vector<tool_call> calls_;
  std::map<std::string, size_t> by_id_;
  std::map<int64_t, size_t> by_index_;
  size_t bytes_ = 0;
};

/// `finish_reason` once tool calls were produced: `tool_calls` unless the
/// upstream said `length` or `content_filter` (those say more).
std::string tool_finish_reason(const std::string& upstream);

} // namespace pgw
