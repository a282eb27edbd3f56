#include "config/json_numbers.hpp"
#include "config/json_text.hpp"
#include "serve_openai.hpp"

#include "backends/cache_value.hpp"
#include "transport/chat_codec.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <mutex>

namespace pgw::serve {

namespace json = boost::json;

namespace {

// -- decoding -------------------------------------------------------------------

using problem = std::optional<std::string>;

problem bad(const std::string& where, const std::string& rule) {
  return where + ": " + rule;
}

/// The members of `obj` other than `known`, as a JSON object's text; ""
/// when there are none.
std::string others(const json::object& obj,
                   std::initializer_list<const char*> known) {
  json::object rest;
  for (auto& kv : obj)
    if (std::none_of(known.begin(), known.end(),
                     [&](const char* k) { return kv.key() == k; }))
      rest.emplace(kv.key(), kv.value());
  return rest.empty() ? std::string{} : json_text(rest);
}

/// Message content: a string, null, or content parts (text, image_url).
problem read_content(const json::value& v, const std::string& where,
                     chat_message& m) {
  if (v.is_null())
    return {};
  if (v.is_string()) {
    m.content = std::string(v.get_string());
    return {};
  }
  if (!v.is_array())
    return bad(where, "must be a string, null or an array of parts");
  auto& parts = v.get_array();
  for (size_t j = 0; j < parts.size(); ++j) {
    auto at = where + "[" + std::to_string(j) + "]";
    if (!parts[j].is_object())
      return bad(at, "must be an object");
    auto& p = parts[j].get_object();
    content_part part;
    if (auto t = p.if_contains("type"); t && t->is_string())
      part.type = std::string(t->get_string());
    if (part.type == "text") {
      if (auto t = p.if_contains("text"); t && t->is_string())
        part.text = std::string(t->get_string());
    } else if (part.type == "image_url") {
      auto u = p.if_contains("image_url");
      if (u && u->is_string()) {
        part.image_url = std::string(u->get_string());
      } else if (u && u->is_object()) {
        auto& image = u->get_object();
        if (auto url = image.if_contains("url"); url && url->is_string())
          part.image_url = std::string(url->get_string());
        if (auto d = image.if_contains("detail"); d && d->is_string())
          part.detail = std::string(d->get_string());
      }
    } else {
      return bad(at + ".type", "must be text or image_url");
    }
    // Anything else the part carries (cache_control, say) goes upstream.
    part.extra = others(p, {"type", "text", "image_url"});
    m.parts.push_back(std::move(part));
  }
  return {};
}

problem read_tool_calls(const json::value& v, const std::string& where,
                        chat_message& m) {
  if (v.is_null())
    return {};
  if (!v.is_array())
    return bad(where, "must be an array");
  auto& arr = v.get_array();
  for (size_t j = 0; j < arr.size(); ++j) {
    auto at = where + "[" + std::to_string(j) + "]";
    if (!arr[j].is_object())
      return bad(at, "must be an object");
    auto& c = arr[j].get_object();
    tool_call call;
    if (auto x = c.if_contains("id"); x && x->is_string())
      call.id = std::string(x->get_string());
    if (auto x = c.if_contains("type"); x && x->is_string())
      call.type = std::string(x->get_string());
    auto f = c.if_contains("function");
    if (f == nullptr || !f->is_object())
      return bad(at + ".function", "must be an object");
    auto& fo = f->get_object();
    if (auto x = fo.if_contains("name"); x && x->is_string())
      call.name = std::string(x->get_string());
    if (auto x = fo.if_contains("arguments")) {
      if (x->is_string())
        call.arguments = std::string(x->get_string());
      else
        call.arguments = json_text(*x);
    }
    m.tool_calls.push_back(std::move(call));
  }
  return {};
}

problem read_messages(const json::value& v, chat_request& req) {
  if (!v.is_array())
    return bad("messages", "must be an array");
  auto& arr = v.get_array();
  for (size_t i = 0; i < arr.size(); ++i) {
    auto where = "messages[" + std::to_string(i) + "]";
    if (!arr[i].is_object())
      return bad(where, "must be an object");
    auto& o = arr[i].get_object();
    chat_message m;
    if (auto r = o.if_contains("role"); r && r->is_string())
      m.role = std::string(r->get_string());
    else
      return bad(where + ".role", "must be a string");
    if (auto c = o.if_contains("content"))
      if (auto p = read_content(*c, where + ".content", m))
        return p;
    if (auto t = o.if_contains("tool_calls"))
      if (auto p = read_tool_calls(*t, where + ".tool_calls", m))
        return p;
    if (auto x = o.if_contains("tool_call_id"); x && x->is_string())
      m.tool_call_id = std::string(x->get_string());
    if (auto x = o.if_contains("name"); x && x->is_string())
      m.name = std::string(x->get_string());
    // Members pgw does not read (prefix, cache_control, reasoning_content)
    // go upstream unchanged, as the body's do.
    m.extra = others(o, {"role", "content", "tool_calls", "tool_call_id",
                         "name"});
    req.messages.push_back(std::move(m));
  }
  return {};
}

bool number_of(const json::value& v, double& out) {
  if (v.is_double())
    out = v.get_double();
  else if (v.is_int64())
    out = static_cast<double>(v.get_int64());
  else if (v.is_uint64())
    out = static_cast<double>(v.get_uint64());
  else
    return false;
  return std::isfinite(out);
}

/// Whether `v` holds a double Boost.JSON may have read from a literal it
/// could not carry as written (see config/json_numbers.hpp): one that is not
/// finite, or of a magnitude of 2^63 or more (an integer literal that large
/// fits int64 or uint64 only up to there). The body is then read again
/// (`unheld_number`) to tell 1e20, a double as written, from
/// 100000000000000000001, an integer that would be rounded.
bool may_hold_unheld_number(const json::value& v) {
  if (v.is_double()) {
    auto d = v.get_double();
    return !std::isfinite(d) || std::fabs(d) >= 9223372036854775808.0;
  }
  if (v.is_object()) {
    for (auto& kv : v.get_object())
      if (may_hold_unheld_number(kv.value()))
        return true;
  } else if (v.is_array()) {
    for (auto& x : v.get_array())
      if (may_hold_unheld_number(x))
        return true;
  }
  return false;
}

/// The largest magnitude of an integer field: integers are read through a
/// double, which holds every integer only up to 2^53.
constexpr int64_t max_integer = 9'000'000'000'000'000;

/// Reads the integer field `key` of at least `min`; a message naming the
/// field, and the range when the value is a number outside it.
problem read_integer(const std::string& key, const json::value& v,
                     int64_t min, int64_t& out) {
  if (!v.is_number())
    return bad(key, "must be an integer");
  double d = 0;
  // The range first: what is wrong with 1e30 is its size (as a double it is
  // a whole number). Not finite: a literal beyond a double's range.
  if (!number_of(v, d) || d < static_cast<double>(min)
      || d > static_cast<double>(max_integer))
    return bad(key, "out of range (an integer from " + std::to_string(min)
                      + " to " + std::to_string(max_integer) + ")");
  if (std::floor(d) != d)
    return bad(key, "must be an integer");
  out = static_cast<int64_t>(d);
  return {};
}

// -- encoding -------------------------------------------------------------------

json::array tool_calls_json(const std::vector<tool_call>& calls,
                            bool with_index) {
  json::array out;
  for (size_t i = 0; i < calls.size(); ++i) {
    json::object c{{"id", calls[i].id},
                   {"type", calls[i].type},
                   {"function", json::object{{"name", calls[i].name},
                                             {"arguments", calls[i].arguments}}}};
    if (with_index)
      c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

/// The answer's usage, or null when the upstream reported none: usage is
/// never guessed (SPEC §8), and zeros would read as a count.
json::value usage_json(const chat_response& resp) {
  if (!usage_known(resp))
    return nullptr;
  return json::object{{"prompt_tokens", resp.usage.prompt_tokens},
                      {"completion_tokens", resp.usage.completion_tokens},
                      {"total_tokens", resp.usage.total_tokens}};
}

/// Splits text into pieces of about `size` bytes without cutting a UTF-8
/// sequence.
std::vector<std::string> pieces(const std::string& text, size_t size) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.size(), pos + size);
    while (end < text.size()
           && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
      ++end;
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

} // namespace

bool usage_known(const chat_response& resp) {
  return resp.stats.usage_source == "reported";
}

std::optional<std::string> parse_body_object(const std::string& body,
                                             json::value& v) {
  if (body.empty()) // no Content-Length on a POST is an empty body
    return std::string("the body is empty (a JSON object is expected)");
  // It tells how far it got (the README promises messages that say where a
  // body went wrong), and keeps the numbers passed on as the caller wrote
  // them.
  json::error_code ec;
  size_t consumed = 0;
  v = parse_json(body, ec, &consumed);
  if (ec) {
    // Boost.JSON calls invalid UTF-8 a syntax error; say what it is.
    if (auto bad_byte = invalid_utf8_at(body); bad_byte && *bad_byte <= consumed)
      return "the body is not valid UTF-8 at byte offset "
             + std::to_string(*bad_byte);
    return "the body is not valid JSON (" + ec.message() + " at byte offset "
           + std::to_string(consumed) + ")";
  }
  if (!v.is_object())
    return std::string("the body must be a JSON object");
  return {};
}

std::optional<std::string> parse_request(const std::string& body,
                                         openai_request& out) {
  json::value v;
  if (auto problem = parse_body_object(body, v))
    return problem;
  auto& obj = v.get_object();
  auto& req = out.req;
  json::object extra;
  for (auto& kv : obj) {
    auto key = std::string(kv.key());
    auto& val = kv.value();
    if (key == "model") {
      if (!val.is_string())
        return bad("model", "must be a string naming a scope");
      out.model = std::string(val.get_string());
    } else if (key == "messages") {
      if (auto p = read_messages(val, req))
        return p;
    } else if (key == "stream") {
      if (!val.is_bool() && !val.is_null())
        return bad("stream", "must be true or false");
      out.stream = val.is_bool() && val.get_bool();
    } else if (key == "stream_options") {
      if (val.is_object())
        if (auto u = val.get_object().if_contains("include_usage"); u && u->is_bool())
          out.include_usage = u->get_bool();
    } else if (key == "temperature" || key == "top_p") {
      double d = 0;
      if (val.is_null())
        continue;
      if (val.is_double() && !std::isfinite(val.get_double()))
        return bad(key, key == "temperature"
                          ? "number out of range (a number in [0, 2])"
                          : "number out of range (a number in [0, 1])");
      if (!number_of(val, d))
        return bad(key, "must be a number");
      (key == "temperature" ? req.temperature : req.top_p) = d;
    } else if (key == "max_tokens" || key == "max_completion_tokens") {
      int64_t n = 0;
      if (val.is_null())
        continue;
      if (auto p = read_integer(key, val, 1, n))
        return p;
      req.max_tokens = n;
    } else if (key == "n" || key == "seed") {
      int64_t n = 0;
      if (val.is_null())
        continue;
      if (auto p = read_integer(key, val, -max_integer, n))
        return p;
      (key == "n" ? req.n : req.seed) = n;
    } else if (key == "stop") {
      if (val.is_string())
        req.stop.push_back(std::string(val.get_string()));
      else if (val.is_array())
        for (auto& s : val.get_array()) {
          if (!s.is_string())
            return bad("stop", "must be a string or an array of strings");
          req.stop.push_back(std::string(s.get_string()));
        }
      else if (!val.is_null())
        return bad("stop", "must be a string or an array of strings");
    } else if (key == "tools") {
      req.tools = json_text(val);
    } else if (key == "tool_choice") {
      req.tool_choice = json_text(val);
    } else if (key == "response_format") {
      // A JSON Schema format is honoured as structured output: the answer
      // is validated (repaired, re-asked) and the source's ladder picks the
      // format sent upstream. Other formats pass through.
      auto* fmt_obj = val.if_object();
      auto* type = fmt_obj ? fmt_obj->if_contains("type") : nullptr;
      if (type && type->is_string() && type->get_string() == "json_schema") {
        auto* spec = fmt_obj->if_contains("json_schema");
        auto* schema = spec && spec->is_object()
                         ? spec->get_object().if_contains("schema")
                         : nullptr;
        if (schema == nullptr || !schema->is_object())
          return bad("response_format.json_schema.schema",
                     "must be a JSON Schema object");
        req.schema = json_text(*schema);
      } else {
        req.response_format = json_text(val);
      }
    } else if (key == "parallel_tool_calls") {
      if (!val.is_bool())
        return bad(key, "must be true or false");
      req.parallel_tool_calls = val.get_bool();
    } else if (key == "user") {
      if (!val.is_string())
        return bad(key, "must be a string");
      req.user = std::string(val.get_string());
    } else if (key == "cache") {
      if (!val.is_string() || !parse_cache_mode(std::string(val.get_string())))
        return bad(key, "must be one of on, off, read_only, write_only");
      req.cache = std::string(val.get_string());
    } else if (key == "max_age_s") {
      double d = 0;
      if (!number_of(val, d) || !(d >= 0))
        return bad(key, "must be a number of seconds >= 0");
      req.max_age_s = d;
    } else if (key == "reasoning_effort") {
      if (!val.is_string())
        return bad(key, "must be a string");
      req.reasoning_effort = std::string(val.get_string());
    } else {
      extra[key] = val; // passed through unchanged
    }
  }
  if (out.model.empty())
    return bad("model", "missing (name a scope, e.g. \"LLM\")");
  if (may_hold_unheld_number(v))
    if (auto p = unheld_number(body))
      return p;
  if (!extra.empty())
    req.extra_body = json_text(extra);
  req.stream = caf::none; // the scope's STREAM decides how upstreams answer
  return {};
}

std::optional<std::string> apply_cache_controls(const std::string& cache_control,
                                                const std::string& x_pgw_cache,
                                                chat_request& req) {
  if (!x_pgw_cache.empty()) {
    if (!parse_cache_mode(x_pgw_cache))
      return std::string{"header x-pgw-cache: must be one of on, off, "
                         "read_only, write_only"};
    req.cache = x_pgw_cache;
  }
  auto mode = parse_cache_mode(req.cache);
  bool reads = mode && cache_reads(*mode);
  bool writes = mode && cache_writes(*mode);
  auto lower = cache_control;
  for (auto& ch : lower)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.find("no-cache") != std::string::npos)
    reads = false;
  if (lower.find("no-store") != std::string::npos)
    writes = false;
  req.cache = reads && writes ? "on"
              : reads         ? "read_only"
              : writes        ? "write_only"
                              : "off";
  return {};
}

namespace {

/// The answer's text: for a structured call the validated JSON (after
/// repair: no fences or surrounding words), else the content as it came.
const std::string& answer_text(const chat_response& resp) {
  return resp.parsed.empty() ? resp.content : resp.parsed;
}

} // namespace

std::string completion_json(const chat_response& resp, const std::string& model,
                            long long created) {
  json::object message{{"role", "assistant"}};
  if (resp.content.empty() && !resp.tool_calls.empty())
    message["content"] = nullptr;
  else
    message["content"] = answer_text(resp);
  if (!resp.reasoning_content.empty())
    message["reasoning_content"] = resp.reasoning_content;
  if (!resp.tool_calls.empty())
    message["tool_calls"] = tool_calls_json(resp.tool_calls, false);
  json::object out{
    {"id", "chatcmpl-" + resp.call_id},
    {"object", "chat.completion"},
    {"created", created},
    {"model", model},
    {"choices", json::array{json::object{{"index", 0},
                                         {"message", std::move(message)},
                                         {"finish_reason", resp.finish_reason},
                                         {"logprobs", nullptr}}}},
    {"usage", usage_json(resp)},
    {"system_fingerprint", nullptr},
  };
  return json_text(out);
}

namespace {

/// One `chat.completion.chunk` SSE event.
std::string chunk_sse(const std::string& call_id, const std::string& model,
                      long long created, json::object delta,
                      json::value finish) {
  json::object c{{"id", "chatcmpl-" + call_id},
                 {"object", "chat.completion.chunk"},
                 {"created", created},
                 {"model", model},
                 {"choices", json::array{json::object{
                               {"index", 0},
                               {"delta", std::move(delta)},
                               {"finish_reason", std::move(finish)}}}}};
  return "data: " + json_text(c) + "\n\n";
}

} // namespace

std::string stream_open_sse(const std::string& call_id,
                            const std::string& model, long long created) {
  return chunk_sse(call_id, model, created,
                   json::object{{"role", "assistant"}, {"content", ""}},
                   nullptr);
}

std::string delta_sse(const stream_delta& delta, const std::string& call_id,
                      const std::string& model, long long created) {
  std::string out;
  if (!delta.reasoning_content.empty())
    out += chunk_sse(call_id, model, created,
                     json::object{{"reasoning_content",
                                   delta.reasoning_content}},
                     nullptr);
  if (!delta.content.empty())
    out += chunk_sse(call_id, model, created,
                     json::object{{"content", delta.content}}, nullptr);
  for (auto& t : delta.tool_calls) {
    json::object fn{{"arguments", t.arguments}};
    if (!t.name.empty())
      fn["name"] = t.name;
    json::object c{{"index", t.index}, {"function", std::move(fn)}};
    if (!t.id.empty())
      c["id"] = t.id;
    if (!t.type.empty())
      c["type"] = t.type;
    out += chunk_sse(call_id, model, created,
                     json::object{{"tool_calls", json::array{std::move(c)}}},
                     nullptr);
  }
  return out;
}

std::string stream_close_sse(const chat_response& resp,
                             const std::string& model, long long created,
                             bool include_usage) {
  auto out = chunk_sse(resp.call_id, model, created, json::object{},
                       json::string(resp.finish_reason));
  if (include_usage) {
    json::object u{{"id", "chatcmpl-" + resp.call_id},
                   {"object", "chat.completion.chunk"},
                   {"created", created},
                   {"model", model},
                   {"choices", json::array{}},
                   {"usage", usage_json(resp)}};
    out += "data: " + json_text(u) + "\n\n";
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string error_sse(const caf::error& err) {
  return "data: " + reply_for(err).body + "\n\n";
}

std::string completion_sse(const chat_response& resp, const std::string& model,
                           long long created, bool include_usage) {
  auto out = stream_open_sse(resp.call_id, model, created);
  auto chunk = [&](json::object delta) {
    out += chunk_sse(resp.call_id, model, created, std::move(delta), nullptr);
  };
  // Pieces of 4 KiB: the answer is all here, so more chunks would only
  // multiply the bytes (each chunk's envelope is ~150 bytes).
  for (auto& piece : pieces(resp.reasoning_content, 4096))
    chunk(json::object{{"reasoning_content", piece}});
  for (auto& piece : pieces(answer_text(resp), 4096))
    chunk(json::object{{"content", piece}});
  if (!resp.tool_calls.empty()) {
    // One chunk per call: id and name, then its arguments.
    auto calls = tool_calls_json(resp.tool_calls, true);
    for (auto& c : calls)
      chunk(json::object{{"tool_calls", json::array{c}}});
  }
  return out + stream_close_sse(resp, model, created, include_usage);
}

namespace {

json::object error_object(const std::string& message, const std::string& type,
                          const std::string& code) {
  return {{"message", message},
          {"type", type},
          {"param", nullptr},
          {"code", code}};
}

/// A `stream_interrupted` error's usage so far, as a usage chunk would
/// carry it; null when the upstream had not reported it.
json::value usage_so_far(const error_detail& d) {
  if (!d.usage_reported)
    return nullptr;
  return json::object{{"prompt_tokens", d.prompt_tokens},
                      {"completion_tokens", d.completion_tokens},
                      {"total_tokens", d.prompt_tokens + d.completion_tokens}};
}

} // namespace

std::string error_body(const std::string& message, const std::string& type,
                       const std::string& code) {
  return json_text(
    json::object{{"error", error_object(message, type, code)}});
}

std::string code_name(const caf::error& err) {
  auto code = code_of(err);
  return code ? to_string(*code) : "internal";
}

namespace {

std::mutex shutdown_mtx;
std::string shutdown_cause; ///< set_shutdown_cause's

} // namespace

void set_shutdown_cause(const std::string& why) {
  std::lock_guard<std::mutex> guard{shutdown_mtx};
  shutdown_cause = why;
}

error_reply reply_for(const caf::error& err) {
  error_reply out;
  auto code = code_of(err);
  auto c = code ? *code : error_code::internal;
  std::string type = "api_error";
  switch (c) {
    case error_code::invalid_request:
    case error_code::request_rejected:
      out.status = 400;
      type = "invalid_request_error";
      break;
    case error_code::quota_exhausted:
      out.status = 429;
      type = "rate_limit_error";
      break;
    case error_code::retry_exhausted:
    case error_code::stalled:
    case error_code::circuit_open:
    case error_code::governance_unavailable:
    case error_code::cancelled:
      out.status = 503;
      type = "service_unavailable";
      break;
    case error_code::call_deadline_exceeded:
      out.status = 504;
      type = "timeout";
      break;
    case error_code::result_invalid:
      // The upstreams answered, but nothing usable (an answer over
      // MAX_RESPONSE_BYTES, no schema match): a bad gateway, not the
      // caller's request and not pgw failing.
      out.status = 502;
      break;
    default:
      out.status = 500;
  }
  if (out.status == 429 || out.status == 503) {
    double after = 1;
    if (auto d = detail_of(err); d && d->retry_after_s)
      after = std::max(1.0, std::ceil(std::min(*d->retry_after_s, 86400.0)));
    out.retry_after_s = static_cast<long long>(after);
  }
  // The message names each source's cause, as the CLI's lines do (its
  // status and what it said, scrubbed): "every source rejected the
  // request" alone does not say whether it was a redirect or a context
  // length. Once: the gateway's message often names them already, and
  // may already start with the code.
  auto message = describe(err);
  auto* d = detail_of(err);
  if (d && d->message.rfind(std::string(to_string(c)) + ": ", 0) == 0)
    message = d->message;
  if (d && !d->sources.empty()) {
    auto sources = describe(d->sources);
    if (message.find(sources) == std::string::npos)
      message += " — " + sources;
  }
  if (c == error_code::cancelled) {
    std::lock_guard<std::mutex> guard{shutdown_mtx};
    if (!shutdown_cause.empty())
      message = std::string(to_string(c)) + ": " + shutdown_cause;
  }
  auto e = error_object(message, type, to_string(c));
  // The error event ends the stream: it carries the usage so far, no
  // usage chunk can follow it.
  if (c == error_code::stream_interrupted && d)
    e["usage"] = usage_so_far(*d);
  out.body = json_text(json::object{{"error", std::move(e)}});
  return out;
}

} // namespace pgw::serve
