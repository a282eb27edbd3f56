#include "transport/tool_calls.hpp"

#include "config/json_text.hpp"
#include "config/scrub.hpp"

#include <boost/json.hpp>

namespace pgw {

namespace json = boost::json;

namespace {

/// A string member's text; an object or array is serialized (some upstreams
/// send arguments as an object); anything else is empty.
std::string text_of(const json::object& obj, std::string_view key) {
  auto v = obj.if_contains(key);
  if (v == nullptr || v->is_null())
    return {};
  if (v->is_string())
    return std::string(v->get_string());
  if (v->is_object() || v->is_array())
    return json_text(*v);
  return {};
}

bool index_of(const json::object& obj, int64_t& out) {
  auto v = obj.if_contains("index");
  if (v == nullptr)
    return false;
  if (v->is_int64()) {
    out = v->get_int64();
    return true;
  }
  if (v->is_uint64() && v->get_uint64() <= INT64_MAX) {
    out = static_cast<int64_t>(v->get_uint64());
    return true;
  }
  return false;
}

} // namespace

bool tool_call_assembler::add(const json::array& calls,
                              std::vector<tool_call_delta>* deltas) {
  bool any = false;
  for (auto& c : calls)
    any = add_one(c, deltas) || any;
  return any;
}

bool tool_call_assembler::add_function_call(
  const json::value& call, std::vector<tool_call_delta>* deltas) {
  if (!call.is_object())
    return false;
  // A legacy function call has neither id nor index: it continues the
  // latest slot, which is the only one.
  json::object wrapped{{"function", call}};
  return add_one(wrapped, deltas);
}

bool tool_call_assembler::add_one(const json::value& value,
                                  std::vector<tool_call_delta>* deltas) {
  if (!value.is_object())
    return false;
  auto& obj = value.get_object();
  auto id = text_of(obj, "id");
  int64_t index = 0;
  bool has_index = index_of(obj, index);
  size_t slot = calls_.size();
  if (!id.empty()) {
    if (auto i = by_id_.find(id); i != by_id_.end())
      slot = i->second;
  } else if (has_index) {
    if (auto i = by_index_.find(index); i != by_index_.end())
      slot = i->second;
  } else if (!calls_.empty()) {
    slot = calls_.size() - 1;
  }
  std::string name;
  std::string arguments;
  if (auto f = obj.if_contains("function"); f && f->is_object()) {
    name = text_of(f->get_object(), "name");
    arguments = text_of(f->get_object(), "arguments");
  }
  auto type = text_of(obj, "type");
  bool fresh = slot == calls_.size();
  if (fresh) {
    if (id.empty() && name.empty() && arguments.empty())
      return false; // nothing to start a call with
    calls_.emplace_back();
    if (!id.empty())
      by_id_[id] = slot;
  }
  if (has_index)
    by_index_[index] = slot;
  auto& call = calls_[slot];
  if (call.id.empty() && !id.empty())
    call.id = id;
  if (!type.empty())
    call.type = type;
  // Names come whole in practice; some upstreams repeat them in every
  // fragment, which must not double them.
  bool name_grew = !name.empty() && call.name != name;
  if (name_grew)
    call.name += name;
  call.arguments += arguments;
  if (deltas != nullptr && (fresh || name_grew || !arguments.empty())) {
    // Events relayed together (stream_relay) make one delta: a call's
    // later fragment joins its fragment there.
    if (!fresh && !deltas->empty()
        && deltas->back().index == static_cast<int32_t>(slot)) {
      if (name_grew)
        deltas->back().name += name;
      deltas->back().arguments += arguments;
    } else {
      tool_call_delta d;
      d.index = static_cast<int32_t>(slot);
      if (fresh) {
        d.id = id.empty() ? "call_" + std::to_string(slot) : id;
        d.type = call.type;
      }
      if (name_grew)
        d.name = name;
      d.arguments = arguments;
      deltas->push_back(std::move(d));
    }
  }
  bytes_ += id.size() + name.size() + arguments.size();
  return !id.empty() || !name.empty() || !arguments.empty();
}

void tool_call_assembler::close_empty_arguments(
  std::vector<tool_call_delta>& deltas) const {
  for (size_t i = 0; i < calls_.size(); ++i) {
    if (!calls_[i].arguments.empty())
      continue;
    auto slot = static_cast<int32_t>(i);
    if (!deltas.empty() && deltas.back().index == slot) {
      deltas.back().arguments += "{}";
    } else {
      tool_call_delta d;
      d.index = slot;
      d.arguments = "{}";
      deltas.push_back(std::move(d));
    }
  }
}

std::vector<tool_call> tool_call_assembler::finish(std::string& problem) const {
  std::vector<tool_call> out = calls_;
  for (size_t i = 0; i < out.size(); ++i) {
    auto& call = out[i];
    if (call.id.empty())
      call.id = "call_" + std::to_string(i);
    if (call.arguments.empty())
      call.arguments = "{}";
    if (!problem.empty())
      continue;
    if (call.name.empty()) {
      problem = "tool call " + std::to_string(i) + " has no function name";
      continue;
    }
    json::error_code ec;
    auto parsed = json::parse(call.arguments, ec);
    if (ec || !parsed.is_object())
      problem = "tool call " + std::to_string(i) + " (" + scrub(call.name.substr(0, 64))
                + "): arguments are not a JSON object";
  }
  return out;
}

std::string tool_finish_reason(const std::string& upstream) {
  if (upstream == "length" || upstream == "content_filter")
    return upstream;
  return "tool_calls";
}

} // namespace pgw
