#pragma once

/// Live streaming (issue 13): the deltas a call with a stream sink forwards
/// to its caller as they arrive.

#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

/// A fragment of one tool call, normalised: `index` is stable per call id
/// (whatever index the upstream sent, or none), `id`, `type` and `name`
/// come with the first fragment of a call, `arguments` is a piece of the
/// arguments text (always a string).
struct tool_call_delta {
  int32_t index = 0;
  std::string id;
  std::string type;
  std::string name;
  std::string arguments;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_call_delta& x) {
  return f(caf::meta::type_name("pgw.tool_call_delta"), x.index, x.id, x.type,
           x.name, x.arguments);
}

/// What one upstream event added to the answer.
struct stream_delta {
  std::string content;
  std::string reasoning_content;
  std::vector<tool_call_delta> tool_calls;
  /// Set on the first delta a caller receives: the source that streams the
  /// answer (the call is committed to it).
  std::string source;
  /// Set on the first delta too: the answer comes from the response cache.
  bool cache_hit = false;
  /// Not part of the message's data (not inspected): while a delta is
  /// alive it counts against its transport's deltas in flight
  /// (transport/stream_relay.hpp).
  std::shared_ptr<const void> hold;

  bool empty() const {
    return content.empty() && reasoning_content.empty() && tool_calls.empty();
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_delta& x) {
  return f(caf::meta::type_name("pgw.stream_delta"), x.content,
           x.reasoning_content, x.tool_calls, x.source, x.cache_hit);
}

} // namespace pgw
