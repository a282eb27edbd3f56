#include "backends/cache_key.hpp"

#include "config/json_text.hpp"

#include <boost/json.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace pgw {

namespace json = boost::json;

namespace {

// -- canonical writer ---------------------------------------------------------

void write_string(std::string& out, json::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void write_number(std::string& out, double d) {
  if (!std::isfinite(d)) {
    // JSON has no such numbers; key them apart from every real one.
    write_string(out, std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity"));
    return;
  }
  // Integral values up to 2^53 are written as integers: 1 and 1.0 agree.
  if (d == std::floor(d) && std::fabs(d) <= 9007199254740992.0) {
    out += std::to_string(static_cast<int64_t>(d));
    return;
  }
  std::array<char, 64> buf;
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), d);
  out.append(buf.data(), res.ptr);
}

void write_value(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: out += "null"; break;
    case json::kind::bool_: out += v.get_bool() ? "true" : "false"; break;
    // Integers exactly, as the upstream gets them: beyond 2^53 two of them
    // can be one double (9007199254740992 and ...993).
    case json::kind::int64: out += std::to_string(v.get_int64()); break;
    case json::kind::uint64: out += std::to_string(v.get_uint64()); break;
    case json::kind::double_: write_number(out, v.get_double()); break;
    case json::kind::string: write_string(out, v.get_string()); break;
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v.get_array()) {
        if (!first)
          out += ',';
        first = false;
        write_value(out, e);
      }
      out += ']';
      break;
    }
    case json::kind::object: {
      const auto& obj = v.get_object();
      std::vector<const json::key_value_pair*> items;
      items.reserve(obj.size());
      for (const auto& kv : obj)
        items.push_back(&kv);
      std::sort(items.begin(), items.end(), [](auto* a, auto* b) {
        return a->key() < b->key();
      });
      out += '{';
      bool first = true;
      for (auto* kv : items) {
        if (!first)
          out += ',';
        first = false;
        write_string(out, kv->key());
        out += ':';
        write_value(out, kv->value());
      }
      out += '}';
      break;
    }
  }
}

// -- the request as a JSON value ----------------------------------------------

/// A JSON-text field: its parsed value, or a tagged string when it does not
/// parse (so it never matches a valid value's key).
json::value json_field(const std::string& text) {
  if (text.empty())
    return nullptr;
  json::error_code ec;
  auto v = parse_json(text, ec);
  if (ec)
    return json::object{{"unparsed", text}};
  return v;
}

template <class T>
json::value opt(const caf::optional<T>& x) {
  if (!x)
    return nullptr;
  return json::value(*x);
}

json::value message_value(const chat_message& m) {
  json::array parts;
  for (const auto& p : m.parts)
    parts.push_back(json::object{{"type", p.type},
                                 {"text", p.text},
                                 {"image_url", p.image_url},
                                 {"detail", p.detail},
                                 {"extra", json_field(p.extra)}});
  json::array calls;
  for (const auto& c : m.tool_calls)
    calls.push_back(json::object{{"id", c.id},
                                 {"type", c.type},
                                 {"name", c.name},
                                 // As sent: the model sees the text.
                                 {"arguments", c.arguments}});
  return json::object{{"role", m.role},
                      {"content", m.content},
                      {"parts", std::move(parts)},
                      {"tool_calls", std::move(calls)},
                      {"tool_call_id", m.tool_call_id},
                      {"name", m.name},
                      {"extra", json_field(m.extra)}};
}

} // namespace

std::string canonical_json_text(const std::string& text) {
  std::string out;
  json::error_code ec;
  auto v = parse_json(text, ec);
  if (ec)
    write_string(out, text);
  else
    write_value(out, v);
  return out;
}

std::string cache_sources_id(const scope_config& scope) {
  std::vector<const source_config*> sources;
  for (const auto& src : scope.sources)
    sources.push_back(&src);
  std::sort(sources.begin(), sources.end(),
            [](auto* a, auto* b) { return a->name < b->name; });
  json::array list;
  for (auto* src : sources)
    list.push_back(json::object{{"name", src->name},
                                {"provider", src->provider},
                                {"kind", to_string(src->kind)},
                                {"base_url", src->base_url},
                                {"model", src->model},
                                {"overlay", json_field(src->overlay)}});
  std::string out;
  write_value(out, list);
  return sha256_hex(out);
}

std::string cache_key_material(const std::string& scope,
                               const chat_request& req,
                               const std::string& sources_id) {
  json::array messages;
  for (const auto& m : req.messages)
    messages.push_back(message_value(m));
  json::array stop;
  for (const auto& s : req.stop)
    stop.push_back(json::value(s));
  json::object body{
    {"version", cache_key_version},
    {"scope", scope},
    {"sources", sources_id},
    {"tenant", req.tenant},
    {"messages", std::move(messages)},
    {"source", req.source},
    {"temperature", opt(req.temperature)},
    {"top_p", opt(req.top_p)},
    {"max_tokens", opt(req.max_tokens)},
    {"stop", std::move(stop)},
    {"seed", opt(req.seed)},
    {"n", opt(req.n)},
    {"tools", json_field(req.tools)},
    {"tool_choice", json_field(req.tool_choice)},
    {"parallel_tool_calls", opt(req.parallel_tool_calls)},
    {"response_format", json_field(req.response_format)},
    {"reasoning_effort", req.reasoning_effort},
    {"extra_body", json_field(req.extra_body)},
    // Structured output: the schema the answer was validated against and
    // the rung that was forced (it changes what the model is asked).
    {"schema", json_field(req.schema)},
    {"strategy", to_string(req.strategy)},
  };
  std::string out;
  write_value(out, body);
  return out;
}

std::string cache_key(const std::string& scope, const chat_request& req,
                      const std::string& sources_id) {
  return sha256_hex(cache_key_material(scope, req, sources_id));
}

std::vector<const void*> cache_key_excluded_fields(const chat_request& req) {
  return {
    &req.stream,     // delivery only: a hit is replayed in either mode
    &req.deadline_s, // a bound, not an input
    &req.call_id,    // an id
    &req.user,       // the end user's id for the provider's abuse monitoring
    &req.cache,      // the cache's own controls
    &req.max_age_s,
  };
}

std::string sha256_hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                             EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1
      || EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1
      || EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1)
    throw std::runtime_error("sha256: OpenSSL EVP failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned i = 0; i < len; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 0xf];
  }
  return out;
}

} // namespace pgw
