#include "transport/chat_codec.hpp"

#include "config/json_text.hpp"

#include "messages/errors.hpp"
#include "config/limits.hpp"
#include "transport/classify.hpp"
#include "transport/structured_body.hpp"

#include <boost/json.hpp>

#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_map>

namespace pgw {

namespace {

namespace json = boost::json;

// -- JSON helpers -------------------------------------------------------------

/// Merges `src` into `dst`: objects recursively, every other value (null
/// included) replaces what was there.
void deep_merge(json::object& dst, const json::object& src) {
  for (auto& kv : src) {
    auto i = dst.find(kv.key());
    if (i != dst.end() && i->value().is_object() && kv.value().is_object())
      deep_merge(i->value().as_object(), kv.value().as_object());
    else
      dst[kv.key()] = kv.value();
  }
}

/// Writes `value` at a dotted path ("reasoning.effort"), creating (or
/// replacing non-object values with) the intermediate objects.
void set_path(json::object& root, std::string_view path, json::value value) {
  json::object* obj = &root;
  while (true) {
    auto dot = path.find('.');
    auto segment = path.substr(0, dot);
    if (dot == std::string_view::npos) {
      if (!segment.empty())
        (*obj)[segment] = std::move(value);
      return;
    }
    path.remove_prefix(dot + 1);
    if (segment.empty())
      continue;
    auto& slot = (*obj)[segment];
    if (!slot.is_object())
      slot = json::object{};
    obj = &slot.as_object();
  }
}

/// A string member, or empty when absent or of another type.
std::string string_member(const json::object& obj, std::string_view key) {
  if (auto v = obj.if_contains(key); v && v->is_string())
    return std::string(v->get_string());
  return {};
}

/// What a token count member held.
enum class count { absent, ok, absurd };

/// A token count: an integer in [0, 10^9] (a double only when integral);
/// anything else a member holds is absurd (SPEC §12).
count count_member(const json::object& obj, std::string_view key,
                   int64_t& out) {
  auto v = obj.if_contains(key);
  if (v == nullptr || v->is_null())
    return count::absent;
  double x = -1;
  if (v->is_int64())
    x = static_cast<double>(v->get_int64());
  else if (v->is_uint64())
    x = static_cast<double>(v->get_uint64());
  else if (v->is_double())
    x = v->get_double();
  if (!(x >= 0 && x <= static_cast<double>(max_reported_tokens))
      || std::floor(x) != x)
    return count::absurd;
  out = static_cast<int64_t>(x);
  return count::ok;
}

/// What an OpenAI `usage` object said.
enum class usage_read { none, ok, rejected };

/// Reads an OpenAI `usage` object: `none` when it lacks either token count,
/// `rejected` when a count (or their sum) is outside [0, 10^9].
usage_read read_usage(const json::value* usage, int64_t& prompt,
                      int64_t& completion) {
  if (usage == nullptr || !usage->is_object())
    return usage_read::none;
  auto& obj = usage->get_object();
  int64_t p = 0;
  int64_t c = 0;
  auto has_p = count_member(obj, "prompt_tokens", p);
  auto has_c = count_member(obj, "completion_tokens", c);
  if (has_p == count::absurd || has_c == count::absurd
      || p + c > max_reported_tokens)
    return usage_read::rejected;
  // One count alone leaves the other unknown: an answer that generated
  // tokens in an unknown amount settles the estimate (SPEC §8).
  if (has_p == count::absent || has_c == count::absent)
    return usage_read::none;
  prompt = p;
  completion = c;
  return usage_read::ok;
}

/// Message or delta text: a string, or the concatenated `text` of content
/// parts (some providers answer with parts); empty for null/other.
std::string text_member(const json::object& obj, std::string_view key) {
  auto v = obj.if_contains(key);
  if (v == nullptr)
    return {};
  if (v->is_string())
    return std::string(v->get_string());
  std::string out;
  if (v->is_array())
    for (auto& part : v->get_array())
      if (part.is_object())
        out += string_member(part.get_object(), "text");
  return out;
}

/// `reasoning_content`, else `reasoning` (providers name it differently).
std::string reasoning_member(const json::object& obj) {
  auto r = string_member(obj, "reasoning_content");
  return r.empty() ? string_member(obj, "reasoning") : r;
}

/// Feeds a message's or delta's `tool_calls` (or legacy `function_call`);
/// true when it carried anything.
bool add_tool_calls(const json::object& obj, tool_call_assembler& out,
                    std::vector<tool_call_delta>* deltas = nullptr) {
  if (auto v = obj.if_contains("tool_calls"); v && v->is_array())
    return out.add(v->get_array(), deltas);
  if (auto v = obj.if_contains("function_call"); v && v->is_object())
    return out.add_function_call(*v, deltas);
  return false;
}

/// Completes `out` with the assembled tool calls: their finish reason, or
/// `result_invalid` / `tool_arguments_invalid` when one does not hold up.
/// False when the answer is invalid.
bool finish_tool_calls(const tool_call_assembler& calls, attempt_result& out) {
  if (calls.empty())
    return true;
  std::string problem;
  out.tool_calls = calls.finish(problem);
  out.finish_reason = tool_finish_reason(out.finish_reason);
  if (problem.empty())
    return true;
  out.kind = outcome::result_invalid;
  out.reason = "tool_arguments_invalid";
  out.error_message = std::move(problem);
  return false;
}

/// Parses JSON text that the caller passed for `what`; `kinds` says which
/// JSON kinds are allowed ("object", "array", "string").
caf::error check_json_field(const std::string& text, const char* what,
                            std::initializer_list<json::kind> kinds,
                            const char* expected) {
  if (text.empty())
    return {};
  json::error_code ec;
  auto v = json::parse(text, ec);
  if (!ec)
    for (auto k : kinds)
      if (v.kind() == k)
        return {};
  return make_error(error_code::invalid_request,
                    std::string(what) + ": must be " + expected);
}

/// The choice with `index` 0 (or without an index): with `n` > 1 a chunk
/// may carry only another choice, which this gateway does not read.
const json::object* first_choice(const json::array& choices) {
  for (auto& c : choices) {
    if (!c.is_object())
      continue;
    auto index = c.get_object().if_contains("index");
    if (index == nullptr || index->is_null()
        || (index->is_int64() && index->get_int64() == 0)
        || (index->is_uint64() && index->get_uint64() == 0))
      return &c.get_object();
  }
  return nullptr;
}


caf::error invalid(std::string message) {
  return make_error(error_code::invalid_request, std::move(message));
}

bool valid_role(const std::string& role) {
  for (const char* name : {"system", "user", "assistant", "tool", "developer"})
    if (role == name)
      return true;
  return false;
}

bool valid_effort(const std::string& effort) {
  for (const char* name : {"none", "low", "medium", "high"})
    if (effort == name)
      return true;
  return false;
}

/// Parses `text` as a JSON object; `what` names it in the error.
caf::expected<json::object> parse_object(const std::string& text,
                                          error_code code,
                                          const std::string& what) {
  json::error_code ec;
  auto v = parse_json(text, ec);
  if (ec)
    return make_error(code, what + ": not valid JSON (" + ec.message() + ")");
  if (!v.is_object())
    return make_error(code, what + ": must be a JSON object");
  return std::move(v.as_object());
}

/// A source's OVERLAY as an object: the default `{}` is nothing to merge;
/// other texts are parsed once per thread and kept (settings are read-only
/// once loaded, so the text is the key; a few sources per process).
caf::expected<const json::object*> overlay_of(const source_config& src) {
  if (src.overlay.empty() || src.overlay == "{}")
    return nullptr;
  thread_local std::unordered_map<std::string, json::object> parsed;
  if (auto i = parsed.find(src.overlay); i != parsed.end())
    return &i->second;
  auto obj = parse_object(src.overlay, error_code::invalid_config,
                          "OVERLAY of source " + src.name);
  if (!obj)
    return std::move(obj.error());
  if (parsed.size() >= 256)
    parsed.clear();
  return &parsed.emplace(src.overlay, std::move(*obj)).first->second;
}

/// Adds the members of `extra` (a caller's JSON object text, checked by
/// check_request) that `obj` does not have.
void add_extra(json::object& obj, const std::string& extra) {
  if (extra.empty())
    return;
  json::error_code ec;
  auto v = parse_json(extra, ec);
  if (ec || !v.is_object())
    return;
  for (auto& kv : v.get_object())
    if (!obj.contains(kv.key()))
      obj.emplace(kv.key(), kv.value());
}

json::value build_messages(const std::vector<chat_message>& messages) {
  json::array out;
  out.reserve(messages.size());
  for (auto& m : messages) {
    json::object msg;
    msg["role"] = m.role;
    if (m.parts.empty()) {
      msg["content"] = m.content;
    } else {
      json::array parts;
      for (auto& p : m.parts) {
        json::object part;
        if (p.type == "image_url") {
          json::object image{{"url", p.image_url}};
          if (!p.detail.empty())
            image["detail"] = p.detail;
          part = json::object{{"type", "image_url"},
                              {"image_url", std::move(image)}};
        } else {
          part = json::object{{"type", "text"}, {"text", p.text}};
        }
        add_extra(part, p.extra);
        parts.push_back(std::move(part));
      }
      msg["content"] = std::move(parts);
    }
    if (!m.tool_calls.empty()) {
      json::array calls;
      for (auto& c : m.tool_calls)
        calls.push_back(json::object{
          {"id", c.id},
          {"type", c.type.empty() ? std::string("function") : c.type},
          {"function",
           json::object{{"name", c.name}, {"arguments", c.arguments}}}});
      msg["tool_calls"] = std::move(calls);
      if (m.content.empty() && m.parts.empty())
        msg["content"] = nullptr;
    }
    if (!m.tool_call_id.empty())
      msg["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty())
      msg["name"] = m.name;
    add_extra(msg, m.extra);
    out.push_back(std::move(msg));
  }
  return out;
}

} // namespace

std::optional<size_t> invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3
                 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size() || (len == 2 && c < 0xC2))
      return i;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return i;
    auto c1 = len > 1 ? static_cast<unsigned char>(s[i + 1]) : 0;
    if ((len == 3 && c == 0xE0 && c1 < 0xA0)     // overlong
        || (len == 3 && c == 0xED && c1 >= 0xA0) // surrogate
        || (len == 4 && c == 0xF0 && c1 < 0x90)  // overlong
        || (len == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90))))
      return i;
    i += len;
  }
  return std::nullopt;
}

// -- request ------------------------------------------------------------------

namespace {

/// `invalid_request` naming `where` and the first byte that is not UTF-8.
caf::error utf8_field(const std::string& where, std::string_view text) {
  if (auto bad = invalid_utf8_at(text))
    return invalid(where + ": not valid UTF-8 at byte offset "
                   + std::to_string(*bad));
  return {};
}

/// `invalid_request` unless `extra` (the members passed through) is empty
/// or a JSON object's text.
caf::error extra_field(const std::string& where, const std::string& extra) {
  if (extra.empty())
    return {};
  json::error_code ec;
  auto v = json::parse(extra, ec);
  if (ec || !v.is_object())
    return invalid(where + ".extra: must be a JSON object's text");
  return {};
}

} // namespace

caf::error check_request(const chat_request& req) {
  if (req.messages.empty())
    return invalid("messages: at least one message is required");
  for (size_t i = 0; i < req.messages.size(); ++i) {
    auto& m = req.messages[i];
    auto where = "messages[" + std::to_string(i) + "]";
    if (!valid_role(m.role))
      return invalid(where + ".role: '" + m.role.substr(0, 40)
                     + "' is not one of system, user, assistant, tool, "
                       "developer");
    for (size_t j = 0; j < m.parts.size(); ++j)
      if (m.parts[j].type != "text" && m.parts[j].type != "image_url")
        return invalid(where + ".parts[" + std::to_string(j)
                       + "].type: must be text or image_url");
    for (size_t j = 0; j < m.tool_calls.size(); ++j)
      if (m.tool_calls[j].id.empty() || m.tool_calls[j].name.empty())
        return invalid(where + ".tool_calls[" + std::to_string(j)
                       + "]: needs an id and a function name");
    // JSON text is UTF-8: invalid bytes would make the body invalid JSON
    // (and the source would be blamed for refusing it).
    if (auto err = utf8_field(where + ".content", m.content))
      return err;
    for (size_t j = 0; j < m.parts.size(); ++j) {
      auto part = where + ".parts[" + std::to_string(j) + "]";
      if (auto err = utf8_field(part + ".text", m.parts[j].text))
        return err;
      if (auto err = utf8_field(part + ".image_url", m.parts[j].image_url))
        return err;
      if (auto err = utf8_field(part + ".detail", m.parts[j].detail))
        return err;
      if (auto err = extra_field(part, m.parts[j].extra))
        return err;
    }
    if (auto err = extra_field(where, m.extra))
      return err;
    for (size_t j = 0; j < m.tool_calls.size(); ++j) {
      auto call = where + ".tool_calls[" + std::to_string(j) + "]";
      auto& tc = m.tool_calls[j];
      for (auto [field, text] : {std::pair{".id", &tc.id},
                                 std::pair{".type", &tc.type},
                                 std::pair{".function.name", &tc.name},
                                 std::pair{".function.arguments",
                                           &tc.arguments}})
        if (auto err = utf8_field(call + field, *text))
          return err;
    }
    if (auto err = utf8_field(where + ".tool_call_id", m.tool_call_id))
      return err;
    if (auto err = utf8_field(where + ".name", m.name))
      return err;
  }
  for (size_t k = 0; k < req.stop.size(); ++k)
    if (auto err = utf8_field("stop[" + std::to_string(k) + "]", req.stop[k]))
      return err;
  if (auto err = utf8_field("user", req.user))
    return err;
  if (req.n && *req.n != 1)
    return invalid("n: only 1 choice per call is supported (got "
                   + std::to_string(*req.n) + ")");
  if (auto err = check_json_field(req.tools, "tools", {json::kind::array},
                                  "a JSON array of tools"))
    return err;
  if (auto err = check_json_field(req.tool_choice, "tool_choice",
                                  {json::kind::string, json::kind::object},
                                  "\"none\", \"auto\", \"required\" or an object"))
    return err;
  if (auto err = check_json_field(req.response_format, "response_format",
                                  {json::kind::object}, "a JSON object"))
    return err;
  if (req.temperature
      && !(std::isfinite(*req.temperature) && *req.temperature >= 0
           && *req.temperature <= 2))
    return invalid("temperature: must be a number in [0, 2]");
  if (req.top_p
      && !(std::isfinite(*req.top_p) && *req.top_p >= 0 && *req.top_p <= 1))
    return invalid("top_p: must be a number in [0, 1]");
  if (req.max_tokens && *req.max_tokens < 1)
    return invalid("max_tokens: must be at least 1");
  if (req.deadline_s && !(std::isfinite(*req.deadline_s) && *req.deadline_s > 0))
    return invalid("deadline_s: must be a finite number of seconds > 0");
  if (req.deadline_s && *req.deadline_s > max_duration_s)
    return invalid("deadline_s: must be at most 2592000 seconds (30 days)");
  if (!req.reasoning_effort.empty() && !valid_effort(req.reasoning_effort))
    return invalid("reasoning_effort: must be one of none, low, medium, high");
  if (!req.extra_body.empty()) {
    auto obj = parse_object(req.extra_body, error_code::invalid_request,
                            "extra_body");
    if (!obj)
      return std::move(obj.error());
  }
  return {};
}

caf::expected<std::string> build_chat_body(const chat_request& req,
                                           const source_config& src,
                                           bool stream) {
  auto& profile = src.profile;
  json::object body;
  body["model"] = src.model;
  // Its place in the key order; the value is set once, last (below).
  body["messages"] = nullptr;
  if (req.temperature)
    body["temperature"] = *req.temperature;
  if (req.top_p)
    body["top_p"] = *req.top_p;
  if (req.max_tokens) {
    const std::string field = profile.max_tokens_field.empty()
                                ? std::string("max_tokens")
                                : profile.max_tokens_field;
    set_path(body, field, *req.max_tokens);
  }
  if (!req.stop.empty()) {
    json::array stop;
    for (auto& s : req.stop)
      stop.push_back(json::string(s));
    body["stop"] = std::move(stop);
  }
  auto pass_json = [&body](const char* key, const std::string& text) {
    json::error_code ec;
    if (!text.empty())
      if (auto v = parse_json(text, ec); !ec)
        body[key] = std::move(v);
  };
  pass_json("tools", req.tools);
  pass_json("tool_choice", req.tool_choice);
  pass_json("response_format", req.response_format);
  if (req.parallel_tool_calls)
    body["parallel_tool_calls"] = *req.parallel_tool_calls;
  if (req.seed)
    body["seed"] = *req.seed;
  if (!req.user.empty())
    body["user"] = req.user;
  body["stream"] = stream;
  if (stream && profile.stream_usage)
    body["stream_options"] = json::object{{"include_usage", true}};
  if (!req.reasoning_effort.empty() && !profile.effort_field.empty()) {
    auto i = profile.effort_values.find(req.reasoning_effort);
    if (i != profile.effort_values.end()) {
      // The table holds JSON value text; a bare word that is not JSON
      // ("low" without quotes) is taken as a string.
      json::error_code ec;
      auto value = parse_json(i->second, ec);
      if (ec)
        value = json::string(i->second);
      set_path(body, profile.effort_field, std::move(value));
    }
  }
  auto overlay = overlay_of(src);
  if (!overlay)
    return std::move(overlay.error());
  if (*overlay != nullptr)
    deep_merge(body, **overlay);
  if (!req.extra_body.empty()) {
    auto extra = parse_object(req.extra_body, error_code::invalid_request,
                              "extra_body");
    if (!extra)
      return std::move(extra.error());
    deep_merge(body, *extra);
  }
  // OVERLAY and extra_body may override any field except these: the model is
  // the source's MODEL (the one it is accounted and priced under), the
  // streaming mode is the one the transport reads the answer in, and the
  // messages are the caller's prompt. `stream_options` is dropped when not
  // streaming (upstreams reject it there).
  body["model"] = src.model;
  body["stream"] = stream;
  body["messages"] = build_messages(req.messages);
  if (!stream)
    body.erase("stream_options");
  // Structured output: the rung's response_format and instructions go last,
  // so the format sent is the one the ladder chose.
  if (!req.schema.empty())
    if (auto err = apply_structured(body, req.schema, req.strategy))
      return err;
  // Plain decimal: an OVERLAY temperature 0.2 reaches the upstream as 0.2.
  return json_text(body);
}

// -- non-streaming answer -----------------------------------------------------

void decode_chat_completion(const std::string& body, attempt_result& out) {
  auto malformed = [&out] {
    out.kind = outcome::result_invalid;
    out.reason = "malformed_body";
  };
  json::error_code ec;
  auto v = parse_json(body, ec);
  if (ec || !v.is_object())
    return malformed();
  auto& obj = v.get_object();
  if (auto e = obj.if_contains("error"); e && !e->is_null()) {
    classify_stream_error(json::serialize(*e), out);
    return;
  }
  out.model = string_member(obj, "model");
  auto usage = read_usage(obj.if_contains("usage"), out.prompt_tokens,
                          out.completion_tokens);
  out.usage_reported = usage == usage_read::ok;
  out.usage_rejected = usage == usage_read::rejected;
  auto choices = obj.if_contains("choices");
  if (choices == nullptr || !choices->is_array())
    return malformed();
  auto choice_ptr = first_choice(choices->get_array());
  if (choice_ptr == nullptr)
    return malformed();
  auto& choice = *choice_ptr;
  auto message = choice.if_contains("message");
  if (message == nullptr || !message->is_object())
    return malformed();
  auto& msg = message->get_object();
  out.content = text_member(msg, "content");
  out.reasoning_content = reasoning_member(msg);
  out.finish_reason = string_member(choice, "finish_reason");
  tool_call_assembler calls;
  add_tool_calls(msg, calls);
  if (out.content.empty() && out.reasoning_content.empty() && calls.empty()) {
    out.kind = outcome::result_invalid;
    out.reason = "empty_answer";
    return;
  }
  if (!finish_tool_calls(calls, out))
    return;
  out.kind = outcome::ok;
  out.reason = "ok";
}

// -- streamed answer ----------------------------------------------------------

stream_accumulator::step stream_accumulator::on_event(const sse_event& ev) {
  // Once an error event decided the attempt, later events change nothing.
  if (error_result_)
    return step::error;
  std::string_view data = ev.data;
  while (!data.empty() && (data.back() == ' ' || data.back() == '\t'))
    data.remove_suffix(1);
  while (!data.empty() && (data.front() == ' ' || data.front() == '\t'))
    data.remove_prefix(1);
  if (data == "[DONE]")
    return step::done;
  json::error_code ec;
  auto v = parse_json({data.data(), data.size()}, ec);
  auto fail = [this](const std::string& error_json) {
    error_result_ = std::make_unique<attempt_result>();
    classify_stream_error(error_json, *error_result_);
    return step::error;
  };
  if (ec || !v.is_object()) {
    // An event named `error` is an error whatever its data looks like.
    if (ev.event == "error")
      return fail(std::string(data));
    ++malformed_;
    return step::more;
  }
  auto& obj = v.get_object();
  if (auto e = obj.if_contains("error"); e && !e->is_null())
    return fail(json::serialize(*e));
  if (ev.event == "error")
    return fail(json::serialize(obj));
  if (auto m = string_member(obj, "model"); !m.empty())
    model_ = std::move(m);
  switch (read_usage(obj.if_contains("usage"), prompt_tokens_,
                     completion_tokens_)) {
    case usage_read::ok:
      usage_reported_ = true;
      break;
    case usage_read::rejected:
      // One absurd report spoils the usage for good: counts are unknown.
      usage_rejected_ = true;
      break;
    case usage_read::none:
      break;
  }
  auto choices = obj.if_contains("choices");
  if (choices == nullptr || choices->is_null())
    return step::more;
  if (!choices->is_array()) {
    ++malformed_;
    return step::more;
  }
  auto choice_ptr = first_choice(choices->get_array());
  if (choice_ptr == nullptr)
    return step::more;
  auto& choice = *choice_ptr;
  bool non_empty = false;
  auto delta = choice.if_contains("delta");
  if (delta == nullptr)
    delta = choice.if_contains("message");
  if (delta != nullptr && delta->is_object()) {
    auto& d = delta->get_object();
    auto content = text_member(d, "content");
    auto reasoning = reasoning_member(d);
    bool tools = false;
    // Deltas after the finish_reason are not part of the answer.
    if (!finished()) {
      if (!tool_calls_
          && (d.contains("tool_calls") || d.contains("function_call")))
        tool_calls_ = std::make_unique<tool_call_assembler>();
      if (tool_calls_)
        tools = add_tool_calls(d, *tool_calls_,
                               delta_ ? &delta_->tool_calls : nullptr);
      content_ += content;
      reasoning_ += reasoning;
      if (delta_) {
        delta_->content += content;
        delta_->reasoning_content += reasoning;
      }
    }
    non_empty = !content.empty() || !reasoning.empty() || tools;
    if (content_.size() + reasoning_.size()
          + (tool_calls_ ? tool_calls_->bytes() : 0)
        > max_answer_bytes_) {
      // Over MAX_RESPONSE_BYTES: the buffers go now, the source is done.
      content_ = std::string{};
      reasoning_ = std::string{};
      tool_calls_.reset();
      if (delta_)
        *delta_ = stream_delta{};
      error_result_ = std::make_unique<attempt_result>();
      error_result_->kind = outcome::source_rejected;
      error_result_->reason = reason_response_too_large;
      error_result_->error_message
        = "answer exceeds MAX_RESPONSE_BYTES="
          + std::to_string(max_answer_bytes_);
      return step::error;
    }
  }
  if (non_empty && !finished())
    ++progress_;
  if (auto fr = string_member(choice, "finish_reason");
      !fr.empty() && !finished()) {
    finish_reason_ = std::move(fr);
    ++progress_;
    // `finish` gives a call without arguments `{}`: the live stream too.
    if (delta_ && tool_calls_)
      tool_calls_->close_empty_arguments(delta_->tool_calls);
  }
  if (non_empty && !first_token_) {
    first_token_ = true;
    return step::first_token;
  }
  return step::more;
}

void stream_accumulator::finish(attempt_result& out) const {
  out.content = content_;
  out.reasoning_content = reasoning_;
  out.finish_reason = finish_reason_;
  out.model = model_;
  out.usage_reported = usage_reported_ && !usage_rejected_;
  out.usage_rejected = usage_rejected_;
  out.prompt_tokens = prompt_tokens_;
  out.completion_tokens = completion_tokens_;
  out.malformed_events = malformed_;
  if (error_result_) {
    out.kind = error_result_->kind;
    out.reason = error_result_->reason;
    out.error_code = error_result_->error_code;
    out.error_message = error_result_->error_message;
    return;
  }
  if (!finished()) {
    out.kind = outcome::transient;
    out.reason = "stream_cut";
    return;
  }
  if (content_.empty() && reasoning_.empty()
      && (!tool_calls_ || tool_calls_->empty())) {
    out.kind = outcome::result_invalid;
    out.reason = "empty_answer";
    // Empty because what came could not be read (invalid UTF-8, say): the
    // caller's line says so.
    if (malformed_ > 0)
      out.error_message = std::to_string(malformed_)
                          + " stream event(s) were not valid JSON";
    return;
  }
  if (tool_calls_ && !finish_tool_calls(*tool_calls_, out))
    return;
  out.kind = outcome::ok;
  out.reason = "ok";
}

} // namespace pgw
