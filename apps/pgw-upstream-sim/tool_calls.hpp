#pragma once

/// The simulator's tool-call answers (a model with `"tool_calls": MODE`):
/// two calls, get_weather and get_time, in the shapes upstreams really send.

#include <string>
#include <vector>

namespace pgw::sim::detail {

/// The `message` object of a non-streamed tool-call answer.
std::string tool_calls_message(const std::string& mode);

/// The `delta` objects of a streamed one, in order: per call, the id and
/// name, then the arguments in two fragments. `no_index` leaves `index`
/// out, `index0` sends index 0 for every call.
std::vector<std::string> tool_call_deltas(const std::string& mode);

/// `finish_reason` of such an answer: `tool_calls`, except `stop` for the
/// quirky modes (some upstreams say `stop` after tool calls).
const char* tool_calls_finish_reason(const std::string& mode);

} // namespace pgw::sim::detail
