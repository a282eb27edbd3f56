#include "transport/embed_codec.hpp"

#include "config/json_text.hpp"
#include "transport/classify.hpp"

#include <boost/json.hpp>

#include <cmath>
#include <limits>

namespace pgw {

namespace {

namespace json = boost::json;

void invalid(attempt_result& out, const char* reason, std::string message) {
  out.kind = outcome::result_invalid;
  out.reason = reason;
  out.error_message = std::move(message);
}

/// A non-negative integer that fits `limit`, or -1.
int64_t index_of(const json::value& v, size_t limit) {
  int64_t i = -1;
  if (v.is_int64())
    i = v.get_int64();
  else if (v.is_uint64() && v.get_uint64() < limit)
    i = static_cast<int64_t>(v.get_uint64());
  return i >= 0 && static_cast<size_t>(i) < limit ? i : -1;
}

} // namespace

std::string build_embed_body(const source_config& src,
                             const std::vector<std::string>& inputs,
                             size_t begin, size_t end) {
  json::object body;
  boost::system::error_code ec;
  auto overlay = parse_json(src.overlay, ec);
  if (!ec && overlay.is_object())
    for (auto& kv : overlay.as_object())
      body[kv.key()] = kv.value();
  body["model"] = src.model;
  json::array input;
  input.reserve(end - begin);
  for (auto i = begin; i < end; ++i)
    input.emplace_back(inputs[i]);
  body["input"] = std::move(input);
  if (!body.contains("encoding_format"))
    body["encoding_format"] = "float";
  return json_text(body);
}

void decode_embeddings(const std::string& body, size_t expected,
                       std::vector<std::vector<float>>& vectors,
                       attempt_result& out) {
  boost::system::error_code ec;
  auto doc = json::parse(body, ec);
  if (ec || !doc.is_object())
    return invalid(out, "malformed_body", "the answer is not a JSON object");
  auto& obj = doc.as_object();
  if (auto e = obj.if_contains("error"); e && !e->is_null()) {
    classify_stream_error(json::serialize(*e), out);
    return;
  }
  auto data = obj.if_contains("data");
  if (data == nullptr || !data->is_array())
    return invalid(out, "malformed_body", "the answer has no data list");
  auto& items = data->as_array();
  if (items.size() != expected)
    return invalid(out, "wrong_count",
                   "the answer has " + std::to_string(items.size())
                     + " vectors for " + std::to_string(expected)
                     + " inputs");
  std::vector<std::vector<float>> got(expected);
  std::vector<bool> seen(expected, false);
  size_t dim = 0;
  for (size_t n = 0; n < items.size(); ++n) {
    auto item = items[n].if_object();
    if (item == nullptr)
      return invalid(out, "malformed_body", "a data item is not an object");
    auto idx = item->if_contains("index");
    auto i = idx != nullptr ? index_of(*idx, expected)
                            : static_cast<int64_t>(n);
    if (i < 0 || seen[static_cast<size_t>(i)])
      return invalid(out, "malformed_body",
                     "a data item has a missing or repeated index");
    seen[static_cast<size_t>(i)] = true;
    auto emb = item->if_contains("embedding");
    if (emb == nullptr || !emb->is_array() || emb->as_array().empty())
      return invalid(out, "malformed_body",
                     "a data item has no embedding list");
    auto& vec = got[static_cast<size_t>(i)];
    vec.reserve(emb->as_array().size());
    for (auto& x : emb->as_array()) {
      if (!x.is_number())
        return invalid(out, "malformed_body",
                       "an embedding holds a value that is not a number");
      auto d = x.to_number<double>();
      if (!std::isfinite(d))
        return invalid(out, "malformed_body",
                       "an embedding holds a value that is not finite");
      // A double past float's range would become infinity as a float (and
      // the cast is undefined behaviour).
      if (std::fabs(d) > std::numeric_limits<float>::max())
        return invalid(out, "malformed_body",
                       "an embedding holds a value outside float's range");
      vec.push_back(static_cast<float>(d));
    }
    if (n == 0)
      dim = vec.size();
    else if (vec.size() != dim)
      return invalid(out, "ragged_vectors",
                     "the answer's vectors have different lengths");
  }
  vectors = std::move(got);
  if (auto m = obj.if_contains("model"); m && m->is_string())
    out.model = std::string(m->as_string());
  if (auto u = obj.if_contains("usage"); u && u->is_object()) {
    auto& usage = u->as_object();
    auto tokens = usage.if_contains("prompt_tokens");
    if (tokens == nullptr || !tokens->is_int64())
      tokens = usage.if_contains("total_tokens");
    if (tokens != nullptr && tokens->is_int64() && tokens->get_int64() >= 0
        && tokens->get_int64() <= 1000000000) {
      out.usage_reported = true;
      out.prompt_tokens = tokens->get_int64();
      out.completion_tokens = 0;
    }
  }
}

int64_t estimate_embed_tokens(const std::string& input) {
  return static_cast<int64_t>(input.size() / 4) + 1;
}

} // namespace pgw
