// libFuzzer target: what `pgw-actor serve` reads from its callers — the
// HTTP/1.1 framing of a connection's bytes (apps/cli/request_frame.*) and the
// `POST /v1/chat/completions` body (serve_openai's parse_request, then the
// upstream body built from it). The first byte picks the part and its
// limits; the rest is the input.
//
// Framing properties:
//  - reading in pieces: framing each longer prefix as the front does (one
//    chunk cursor carried while the request is partial) ends as framing
//    the whole input at once: the same state, the same request size, head
//    size, trailer and close flag, the same refusal status;
//  - a whole request of B bytes frames the same from its first B bytes, and
//    every shorter prefix is partial (where a request ends never depends on
//    bytes after it, and a request is never judged before it is whole);
//  - 0 < head ≤ bytes ≤ input, the body within its limit, the head within
//    its own; a refusal is 400/413/431/501 with a printable reason;
//  - the absolute-form rewrite only shortens the request line.
//
// Body properties: decoding is deterministic; an accepted body names its
// model; one that also passes check_request builds an upstream body that is
// a JSON object with the source's model and the caller's messages (as many),
// and carries every passed-through field unchanged.

#include "apps/cli/request_frame.hpp"
#include "apps/pgw-actor/serve_openai.hpp"
#include "config/json_text.hpp"
#include "fuzz_require.hpp"
#include "transport/chat_codec.hpp"

#include <boost/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using pgw::cli::request_frame;
using state = request_frame::state;


void same_end(const request_frame& a, const request_frame& b) {
  FUZZ_REQUIRE(a.what == b.what);
  if (a.what == state::whole)
    FUZZ_REQUIRE(a.bytes == b.bytes && a.head_bytes == b.head_bytes
            && a.trailer_at == b.trailer_at && a.close == b.close
            && a.no_length == b.no_length);
  if (a.what == state::bad)
    FUZZ_REQUIRE(a.status == b.status);
}

void check_frame(std::string_view in, size_t max_head, size_t max_body,
                 const std::vector<size_t>& cuts) {
  auto once = pgw::cli::frame_request(in, max_head, max_body);
  auto again = pgw::cli::frame_request(in, max_head, max_body);
  same_end(once, again);
  FUZZ_REQUIRE(once.reason == again.reason);

  switch (once.what) {
    case state::whole:
      FUZZ_REQUIRE(once.head_bytes > 0 && once.head_bytes <= once.bytes
              && once.bytes <= in.size());
      FUZZ_REQUIRE(once.head_bytes <= max_head);
      FUZZ_REQUIRE(once.trailer_at == 0
              || (once.trailer_at >= once.head_bytes
                  && once.trailer_at <= once.bytes));
      // A Content-Length body within its limit (a chunked body's size on
      // the wire includes its framing).
      if (once.trailer_at == 0)
        FUZZ_REQUIRE(once.bytes - once.head_bytes <= max_body);
      FUZZ_REQUIRE(!once.expects_continue);
      break;
    case state::bad:
      FUZZ_REQUIRE(once.status == 400 || once.status == 413 || once.status == 431
              || once.status == 501);
      FUZZ_REQUIRE(!once.reason.empty() && printable(once.reason));
      break;
    case state::partial:
      break;
  }

  // In pieces, with the chunk cursor, as the front reads.
  pgw::cli::chunk_cursor cursor;
  request_frame piecewise;
  size_t at = 0;
  for (size_t k = 0; at < in.size(); ++k) {
    at = std::min(in.size(), at + cuts[k % cuts.size()]);
    piecewise = pgw::cli::frame_request(in.substr(0, at), max_head, max_body,
                                        &cursor);
    if (piecewise.what != state::partial)
      break;
  }
  same_end(piecewise, once);

  if (once.what == state::whole) {
    auto exact = pgw::cli::frame_request(in.substr(0, once.bytes), max_head,
                                         max_body);
    same_end(exact, once);
    // Every shorter prefix waits for more (checked at a few lengths: the
    // head's end and around it, and the body's pieces).
    for (size_t n : {once.head_bytes - 1, once.head_bytes, once.bytes - 1,
                     once.bytes / 2, once.head_bytes / 2}) {
      if (n >= once.bytes)
        continue;
      auto early = pgw::cli::frame_request(in.substr(0, n), max_head,
                                           max_body);
      FUZZ_REQUIRE(early.what == state::partial);
    }
    std::string copy{in.substr(0, once.bytes)};
    auto line = copy.find("\r\n");
    auto shorter = pgw::cli::to_origin_form(copy);
    FUZZ_REQUIRE(shorter < line);
    FUZZ_REQUIRE(copy.size() + shorter == once.bytes);
    FUZZ_REQUIRE(copy.compare(line - shorter, std::string::npos,
                         in.substr(line, once.bytes - line))
            == 0); // only the request line changed
  }
}

/// JSON equality with numbers compared by value: pgw writes a double that
/// is a whole number as one ("1", not "1.0"), which reads back as an
/// integer; JSON does not tell the two apart.
bool same_json(const boost::json::value& a, const boost::json::value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_double() || b.is_double())
      return a.to_number<double>() == b.to_number<double>();
    return a == b; // int64 and uint64 compare by value
  }
  if (a.kind() != b.kind())
    return false;
  if (a.is_array()) {
    auto& x = a.get_array();
    auto& y = b.get_array();
    if (x.size() != y.size())
      return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!same_json(x[i], y[i]))
        return false;
    return true;
  }
  if (a.is_object()) {
    auto& x = a.get_object();
    auto& y = b.get_object();
    if (x.size() != y.size())
      return false;
    for (auto& kv : x) {
      auto* other = y.if_contains(kv.key());
      if (other == nullptr || !same_json(kv.value(), *other))
        return false;
    }
    return true;
  }
  return a == b;
}

std::vector<size_t> cut_pattern(uint8_t seed) {
  std::vector<size_t> cuts;
  for (int bit = 0; bit < 4; ++bit)
    cuts.push_back(1 + ((seed >> bit) & 0x0F) * ((bit % 2) ? 16 : 1));
  return cuts;
}

void check_body(const std::string& body) {
  pgw::serve::openai_request a;
  auto pa = pgw::serve::parse_request(body, a);
  pgw::serve::openai_request b;
  auto pb = pgw::serve::parse_request(body, b);
  FUZZ_REQUIRE(pa.has_value() == pb.has_value());
  if (pa) {
    FUZZ_REQUIRE(*pa == *pb && !pa->empty());
    return;
  }
  FUZZ_REQUIRE(!a.model.empty() && a.model == b.model && a.stream == b.stream
          && a.req.messages.size() == b.req.messages.size()
          && a.req.extra_body == b.req.extra_body);
  if (pgw::check_request(a.req) || !a.req.schema.empty())
    return; // refused before anything is built, or a schema's own path
  pgw::source_config src;
  src.name = "fuzz";
  src.model = "fuzz-model";
  for (bool stream : {false, true}) {
    auto built = pgw::build_chat_body(a.req, src, stream);
    FUZZ_REQUIRE(static_cast<bool>(built));
    boost::json::error_code ec;
    auto v = pgw::parse_json(*built, ec);
    FUZZ_REQUIRE(!ec && v.is_object());
    auto& obj = v.get_object();
    auto* model = obj.if_contains("model");
    FUZZ_REQUIRE(model && model->is_string() && model->get_string() == "fuzz-model");
    auto* messages = obj.if_contains("messages");
    FUZZ_REQUIRE(messages && messages->is_array()
            && messages->get_array().size() == a.req.messages.size());
    auto* streamed = obj.if_contains("stream");
    FUZZ_REQUIRE(streamed && streamed->is_bool() && streamed->get_bool() == stream);
    if (a.req.extra_body.empty())
      continue;
    // Each passed-through field holds what the caller wrote (read as
    // written, not as Boost.JSON's own parse rounds numbers).
    auto caller = pgw::parse_json(body, ec);
    FUZZ_REQUIRE(!ec && caller.is_object());
    auto extra = pgw::parse_json(a.req.extra_body, ec);
    FUZZ_REQUIRE(!ec && extra.is_object());
    for (auto& kv : extra.get_object()) {
      auto* written = caller.get_object().if_contains(kv.key());
      FUZZ_REQUIRE(written && same_json(*written, kv.value()));
      if (kv.key() == "model" || kv.key() == "stream" || kv.key() == "messages"
          || kv.key() == "stream_options")
        continue;
      auto* sent = obj.if_contains(kv.key());
      FUZZ_REQUIRE(sent && same_json(*sent, kv.value()));
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2)
    return 0;
  auto mode = data[0];
  auto cuts = cut_pattern(data[1]);
  std::string_view in{reinterpret_cast<const char*>(data) + 2, size - 2};
  if (mode & 1) {
    check_body(std::string{in});
    return 0;
  }
  // Small limits reach the refusals; the defaults (64 KiB head, 8 MiB
  // body) the paths a real request takes.
  size_t max_head = (mode & 2) ? 64 : 64 * 1024;
  size_t max_body = (mode & 4) ? 16 : 8 * 1024 * 1024;
  check_frame(in, max_head, max_body, cuts);
  return 0;
}
