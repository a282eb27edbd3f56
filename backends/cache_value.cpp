#include "backends/cache_value.hpp"

#include "config/json_text.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>

#include <cmath>

namespace pgw {

namespace json = boost::json;

caf::expected<cache_mode> parse_cache_mode(const std::string& text) {
  if (text.empty() || text == "on")
    return cache_mode::on;
  if (text == "off")
    return cache_mode::off;
  if (text == "read_only" || text == "read-only")
    return cache_mode::read_only;
  if (text == "write_only" || text == "write-only")
    return cache_mode::write_only;
  return make_error(error_code::invalid_request,
                    "cache: '" + text.substr(0, 40)
                      + "' is not one of on, off, read_only, write_only");
}

bool cacheable(const chat_response& resp, std::string* why,
               bool store_length) {
  auto no = [why](const char* reason) {
    if (why)
      *why = reason;
    return false;
  };
  if (resp.finish_reason.empty())
    return no("no finish reason");
  if (resp.finish_reason == "length" && !store_length)
    return no("truncated (finish reason length)");
  for (const auto& c : resp.tool_calls) {
    if (c.name.empty())
      return no("a tool call without a name");
    json::error_code ec;
    json::parse(c.arguments, ec);
    if (ec)
      return no("tool-call arguments that are not JSON");
  }
  return true;
}

std::string encode_cached_answer(const cached_answer& x) {
  const auto& r = x.response;
  json::array calls;
  for (const auto& c : r.tool_calls)
    calls.push_back(json::object{{"id", c.id},
                                 {"type", c.type},
                                 {"name", c.name},
                                 {"arguments", c.arguments}});
  json::object doc{
    {"v", 1},
    {"stored_at_s", x.stored_at_s},
    {"content", r.content},
    {"reasoning_content", r.reasoning_content},
    {"finish_reason", r.finish_reason},
    {"source", r.source},
    {"model", r.model},
    {"prompt_tokens", r.usage.prompt_tokens},
    {"completion_tokens", r.usage.completion_tokens},
    {"usage_source", r.stats.usage_source},
    {"tool_calls", std::move(calls)},
  };
  if (r.stats.cost_usd)
    doc["cost_usd"] = *r.stats.cost_usd;
  return json_text(doc);
}

namespace {

struct reader {
  const json::object& obj;
  std::string error;

  std::string str(const char* name) {
    auto* v = obj.if_contains(name);
    if (!v || !v->is_string()) {
      fail(name, "a string");
      return {};
    }
    return std::string(v->get_string());
  }

  int64_t count(const char* name) {
    auto* v = obj.if_contains(name);
    if (v && v->is_int64() && v->get_int64() >= 0)
      return v->get_int64();
    if (v && v->is_uint64() && v->get_uint64() <= INT64_MAX)
      return static_cast<int64_t>(v->get_uint64());
    fail(name, "a count");
    return 0;
  }

  double number(const char* name) {
    auto* v = obj.if_contains(name);
    if (v && v->is_number()) {
      json::error_code ec;
      auto d = v->to_number<double>(ec);
      if (!ec && std::isfinite(d))
        return d;
    }
    fail(name, "a number");
    return 0;
  }

  void fail(const char* name, const char* what) {
    if (error.empty())
      error = std::string{"field '"} + name + "' is not " + what;
  }
};

} // namespace

caf::expected<cached_answer> decode_cached_answer(const std::string& text) {
  auto bad = [](const std::string& why) {
    return make_error(error_code::internal,
                      "cache: a stored value is corrupt: " + why);
  };
  json::error_code ec;
  auto v = parse_json(text, ec);
  if (ec)
    return bad("not JSON (" + ec.message() + ")");
  if (!v.is_object())
    return bad("not a JSON object");
  const auto& obj = v.get_object();
  auto* ver = obj.if_contains("v");
  if (!ver || !ver->is_int64() || ver->get_int64() != 1)
    return bad("unknown format version");
  reader rd{obj, {}};
  cached_answer x;
  auto& r = x.response;
  x.stored_at_s = rd.number("stored_at_s");
  r.content = rd.str("content");
  r.reasoning_content = rd.str("reasoning_content");
  r.finish_reason = rd.str("finish_reason");
  r.source = rd.str("source");
  r.model = rd.str("model");
  r.usage.prompt_tokens = rd.count("prompt_tokens");
  r.usage.completion_tokens = rd.count("completion_tokens");
  r.usage.total_tokens = r.usage.prompt_tokens + r.usage.completion_tokens;
  r.stats.usage_source = rd.str("usage_source");
  if (obj.contains("cost_usd"))
    r.stats.cost_usd = rd.number("cost_usd");
  auto* calls = obj.if_contains("tool_calls");
  if (!calls || !calls->is_array()) {
    rd.fail("tool_calls", "an array");
  } else {
    for (const auto& c : calls->get_array()) {
      if (!c.is_object()) {
        rd.fail("tool_calls", "an array of objects");
        break;
      }
      reader cr{c.get_object(), {}};
      tool_call tc{cr.str("id"), cr.str("type"), cr.str("name"),
                   cr.str("arguments")};
      if (!cr.error.empty())
        rd.fail("tool_calls", ("an array of tool calls: " + cr.error).c_str());
      r.tool_calls.push_back(std::move(tc));
    }
  }
  if (!rd.error.empty())
    return bad(rd.error);
  std::string why;
  if (!cacheable(r, &why, true))
    return bad("a stored answer that is not cacheable: " + why);
  return x;
}

chat_response hit_response(const cached_answer& stored,
                           const std::string& call_id) {
  auto r = stored.response;
  r.call_id = call_id;
  r.stats = call_stats{};
  r.stats.cache_hit = true;
  r.stats.attempts = 0;
  r.stats.generation_ms = 0;
  r.stats.source = r.source;
  r.stats.model = r.model;
  r.stats.prompt_tokens = r.usage.prompt_tokens;
  r.stats.completion_tokens = r.usage.completion_tokens;
  r.stats.usage_source = stored.response.stats.usage_source;
  // The hit itself costs nothing; what it saved is the original's cost.
  r.stats.cost_usd = 0.0;
  r.stats.cost_saved_usd = stored.response.stats.cost_usd;
  return r;
}

} // namespace pgw
