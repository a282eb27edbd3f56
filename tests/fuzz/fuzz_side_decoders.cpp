// libFuzzer target: the embeddings and OCR decoders (issue 16) on arbitrary
// upstream bodies, and the image checks on arbitrary bytes. The first byte
// picks how many vectors the embeddings answer must hold (1..8), the rest is
// the body. Properties: an `ok` embeddings answer has exactly that many
// vectors, all of one non-zero length, every value finite, usage never
// negative; every decoder's outcome says why (reason), and `ok` means
// reason "ok"; an OCR layout that decodes ok has a blocks list of objects
// with string type and text; decoding is deterministic; an image that sniffs
// as a type has at least one page; base64 round-trips.

#include "transport/embed_codec.hpp"
#include "transport/ocr_codec.hpp"

#include <boost/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using pgw::attempt_result;
using pgw::outcome;

void require(bool holds) {
  if (!holds)
    std::abort();
}

/// A transport success, as the call actors hand it to a decoder.
attempt_result transport_ok() {
  attempt_result r;
  r.kind = outcome::ok;
  r.reason = "ok";
  return r;
}

void check_embeddings(const std::string& body, size_t expected) {
  auto a = transport_ok();
  std::vector<std::vector<float>> va;
  pgw::decode_embeddings(body, expected, va, a);
  auto b = transport_ok();
  std::vector<std::vector<float>> vb;
  pgw::decode_embeddings(body, expected, vb, b);
  require(!a.reason.empty());
  require(a.kind == b.kind && a.reason == b.reason && va == vb
          && a.prompt_tokens == b.prompt_tokens && a.model == b.model);
  require(a.prompt_tokens >= 0 && a.completion_tokens >= 0);
  if (a.kind != outcome::ok)
    return;
  require(a.reason == "ok");
  require(va.size() == expected);
  for (auto& v : va) {
    require(!v.empty() && v.size() == va.front().size());
    for (auto x : v)
      require(std::isfinite(x));
  }
}

/// `blocks_json` of an ok layout: a list of {type, text, bbox?} objects.
void check_blocks(const std::string& blocks_json) {
  boost::system::error_code ec;
  auto doc = boost::json::parse(blocks_json, ec);
  require(!ec && doc.is_array());
  for (auto& b : doc.as_array()) {
    require(b.is_object());
    auto& o = b.as_object();
    require(o.contains("type") && o.at("type").is_string());
    require(o.contains("text") && o.at("text").is_string());
    if (auto box = o.if_contains("bbox"))
      require(box->is_array() && box->as_array().size() == 4);
  }
}

void check_ocr(const std::string& body) {
  auto t = transport_ok();
  pgw::decode_monkey_text(body, t);
  auto t2 = transport_ok();
  pgw::decode_monkey_text(body, t2);
  require(!t.reason.empty() && (t.kind != outcome::ok || t.reason == "ok"));
  require(t.kind == t2.kind && t.reason == t2.reason
          && t.content == t2.content);
  require(t.kind == outcome::ok || t.kind == outcome::result_invalid
          || t.kind == outcome::request_rejected
          || t.kind == outcome::transient);

  auto l = transport_ok();
  std::string blocks;
  pgw::decode_monkey_layout(body, l, blocks);
  require(!l.reason.empty());
  if (l.kind == outcome::ok) {
    require(l.reason == "ok");
    check_blocks(blocks);
  }

  auto v = transport_ok();
  v.content = body;
  std::string vblocks;
  pgw::decode_vision_layout(v, vblocks);
  require(v.kind == outcome::ok || v.reason == "layout_not_json");
  if (v.kind == outcome::ok)
    check_blocks(vblocks);
}

void check_image(const std::string& bytes) {
  pgw::image_type type;
  if (pgw::sniff_image(bytes, type)) {
    require(pgw::page_count(bytes, type) >= 1);
    pgw::image_type checked;
    require(!pgw::check_image(bytes, bytes.size(), checked));
    require(checked == type);
  }
  std::string decoded;
  require(pgw::base64_decode(pgw::base64_encode(bytes), decoded));
  require(decoded == bytes);
  // Text that decodes encodes back to text that decodes the same.
  std::string any, again;
  if (pgw::base64_decode(bytes, any)) {
    require(pgw::base64_decode(pgw::base64_encode(any), again));
    require(again == any);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  auto expected = static_cast<size_t>(data[0] % 8) + 1;
  std::string body{reinterpret_cast<const char*>(data) + 1, size - 1};
  check_embeddings(body, expected);
  check_ocr(body);
  check_image(body);
  return 0;
}
