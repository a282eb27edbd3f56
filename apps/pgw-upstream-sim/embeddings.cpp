#include "apps/pgw-upstream-sim/embeddings.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace pgw::sim::detail {

namespace json = boost::json;

std::string parse_request_head(const std::string& body, json::value& doc,
                               std::string& model) {
  json::error_code ec;
  doc = json::parse(body, ec);
  if (ec)
    return "We could not parse the JSON body of your request.";
  if (!doc.is_object())
    return "The request body must be a JSON object.";
  auto* m = doc.get_object().if_contains("model");
  if (!m || !m->is_string())
    return "you must provide a model parameter";
  model = std::string(m->get_string());
  return {};
}

std::string parse_embed(const std::string& body, embed_request& out) {
  json::value doc;
  if (auto err = parse_request_head(body, doc, out.model); !err.empty())
    return err;
  auto& obj = doc.get_object();
  if (auto* f = obj.if_contains("encoding_format");
      f && !(f->is_string() && f->get_string() == "float"))
    return "'encoding_format' must be \"float\" here";
  auto* input = obj.if_contains("input");
  if (input && input->is_string()) {
    out.inputs.emplace_back(input->get_string());
  } else if (input && input->is_array()) {
    for (auto& x : input->get_array()) {
      if (!x.is_string())
        return "'input' must be a string or an array of strings";
      out.inputs.emplace_back(x.get_string());
    }
  } else {
    return "'input' must be a string or an array of strings";
  }
  if (out.inputs.empty())
    return "'input' must not be empty";
  size_t chars = 0;
  for (auto& in : out.inputs) {
    if (in.empty())
      return "'input' must not contain an empty string";
    chars += in.size();
  }
  out.prompt_tokens = static_cast<int>(std::max<size_t>(1, chars / 4));
  return {};
}

namespace {

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

} // namespace

std::vector<float> embed_vector(const std::string& input, size_t dim) {
  // FNV-1a of the text seeds a splitmix64 sequence.
  uint64_t state = fnv1a(input);
  std::vector<float> out;
  out.reserve(dim);
  for (size_t i = 0; i < dim; ++i) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    // 24 bits → a float in [-1, 1) that prints exactly.
    out.push_back(static_cast<float>(z >> 40) / 8388608.0f - 1.0f);
  }
  return out;
}

std::string embeddings_body(const embed_request& req, size_t dim,
                            bool usage) {
  json::array data;
  data.reserve(req.inputs.size());
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    json::array vec;
    for (auto x : embed_vector(req.inputs[i], dim))
      vec.emplace_back(static_cast<double>(x));
    data.emplace_back(json::object{{"object", "embedding"},
                                   {"index", i},
                                   {"embedding", std::move(vec)}});
  }
  json::object out{{"object", "list"},
                   {"data", std::move(data)},
                   {"model", req.model}};
  if (usage)
    out["usage"] = json::object{{"prompt_tokens", req.prompt_tokens},
                                {"total_tokens", req.prompt_tokens}};
  return json::serialize(out);
}

bool multipart_file(const std::string& body, std::string& out) {
  auto eol = body.find("\r\n");
  if (body.rfind("--", 0) != 0 || eol == std::string::npos || eol < 3)
    return false;
  auto boundary = body.substr(0, eol);
  auto start = body.find("\r\n\r\n", eol);
  if (start == std::string::npos)
    return false;
  start += 4;
  auto end = body.find("\r\n" + boundary, start);
  if (end == std::string::npos)
    return false;
  out = body.substr(start, end - start);
  return true;
}

std::string ocr_text_of(const std::string& file) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(fnv1a(file)));
  return std::string{"Recognised text of image "} + hex;
}

std::string ocr_body(const std::string& file, bool layout) {
  auto text = ocr_text_of(file);
  if (!layout)
    return json::serialize(json::object{{"success", true},
                                        {"task_type", "text"},
                                        {"content", text},
                                        {"message", "ok"}});
  json::array blocks;
  blocks.emplace_back(json::object{{"type", "title"},
                                   {"text", "Simulated page"},
                                   {"bbox", json::array{10, 10, 200, 40}}});
  blocks.emplace_back(json::object{{"type", "text"},
                                   {"text", text},
                                   {"bbox", json::array{10, 50, 200, 90}}});
  return json::serialize(json::object{
    {"success", true},
    {"content", "# Simulated page\n\n" + text},
    {"content_list", std::move(blocks)},
    {"files", json::array{}}});
}

bool data_url_bytes(const std::string& url, std::string& out) {
  auto comma = url.find(";base64,");
  if (url.rfind("data:", 0) != 0 || comma == std::string::npos)
    return false;
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (auto i = comma + 8; i < url.size(); ++i) {
    char c = url[i];
    int v = c >= 'A' && c <= 'Z'   ? c - 'A'
            : c >= 'a' && c <= 'z' ? c - 'a' + 26
            : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+'             ? 62
            : c == '/'             ? 63
                                   : -1;
    if (c == '=')
      break;
    if (v < 0)
      return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
}

std::string ocr_failure_body(const std::string& message) {
  return json::serialize(json::object{{"success", false},
                                      {"task_type", "text"},
                                      {"content", ""},
                                      {"message", message}});
}

} // namespace pgw::sim::detail
