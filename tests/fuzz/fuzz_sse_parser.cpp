// libFuzzer target: the SSE parser and the stream accumulator on upstream
// bytes. Beyond "no crash, no leak, no UB" it checks two properties:
//  - splitting: the events, the comment count and the failure flag do not
//    depend on how the bytes are cut into feeds (TCP may cut anywhere);
//  - the accumulator never calls a stream complete (`ok`) without a
//    finish_reason, and a stream_cut is never `ok`.

#include "transport/chat_codec.hpp"
#include "transport/sse_parser.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct parsed {
  std::vector<pgw::sse_event> events;
  size_t comments = 0;
  bool failed = false;
};

/// Feeds `data` in pieces whose sizes cycle through `cuts` (each 1..256).
parsed parse(const uint8_t* data, size_t size, const std::vector<size_t>& cuts,
             size_t max_line) {
  parsed out;
  pgw::sse_parser p{max_line};
  size_t at = 0;
  size_t k = 0;
  while (at < size) {
    auto n = cuts.empty() ? size - at : std::min(cuts[k++ % cuts.size()],
                                                 size - at);
    p.feed(reinterpret_cast<const char*>(data) + at, n, out.events);
    at += n;
  }
  p.finish(out.events);
  out.comments = p.comments();
  out.failed = p.failed();
  return out;
}

bool same(const parsed& a, const parsed& b) {
  if (a.failed != b.failed || a.comments != b.comments
      || a.events.size() != b.events.size())
    return false;
  for (size_t i = 0; i < a.events.size(); ++i)
    if (a.events[i].event != b.events[i].event
        || a.events[i].data != b.events[i].data)
      return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2)
    return 0;
  // The first byte picks the cut pattern, the second a small or the default
  // line limit; the rest is the stream.
  std::vector<size_t> cuts;
  for (int bit = 0; bit < 4; ++bit)
    cuts.push_back(1 + ((data[0] >> bit) & 0x0F) * ((bit % 2) ? 16 : 1));
  size_t max_line = (data[1] & 1) ? 64 : 4 * 1024 * 1024;
  data += 2;
  size -= 2;

  auto whole = parse(data, size, {}, max_line);
  auto pieces = parse(data, size, cuts, max_line);
  auto bytes = parse(data, size, {1}, max_line);
  if (!same(whole, pieces) || !same(whole, bytes))
    std::abort(); // the parse depends on where the bytes were cut

  pgw::stream_accumulator acc;
  bool over = false;
  for (auto& ev : whole.events) {
    if (over)
      break;
    auto step = acc.on_event(ev);
    over = step == pgw::stream_accumulator::step::done
           || step == pgw::stream_accumulator::step::error;
  }
  pgw::attempt_result res;
  res.stream = true;
  acc.finish(res);
  if (res.kind == pgw::outcome::ok && !acc.finished())
    std::abort(); // a stream without finish_reason returned as complete
  if (res.kind == pgw::outcome::ok && res.reason == "stream_cut")
    std::abort();
  return 0;
}
