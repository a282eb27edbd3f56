// libFuzzer target: the usage an upstream reports, through both decoders
// (a complete body, and the same bytes as an SSE stream through the parser
// and the accumulator), into the settlement rule (SPEC 8, 12). Input: two
// bytes choose the estimate and the outcome class, the rest is the answer.
// Properties: reported usage is either unavailable or two counts in
// [0, 10^9] whose sum is at most 10^9; the settled amount is always in
// [0, 10^9 + est]; a rejected usage is never also reported.

#include "actors/settlement.hpp"
#include "config/limits.hpp"
#include "transport/chat_codec.hpp"
#include "transport/sse_parser.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void check(const pgw::attempt_result& r, int64_t est) {
  using pgw::max_reported_tokens;
  if (r.usage_reported && r.usage_rejected)
    std::abort();
  if (r.usage_reported
      && (r.prompt_tokens < 0 || r.completion_tokens < 0
          || r.prompt_tokens + r.completion_tokens > max_reported_tokens))
    std::abort();
  auto settled = pgw::settle_amount(r, est);
  auto bound = pgw::saturating_add(max_reported_tokens,
                                   std::max<int64_t>(est, 0));
  if (settled < 0 || settled > bound)
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2)
    return 0;
  // Estimates from tiny to absurd, negative included.
  static const int64_t ests[] = {0, 1, 1000, 1000000000, INT64_C(-5),
                                 INT64_MAX / 2, INT64_MAX, INT64_MIN};
  int64_t est = ests[data[0] % 8];
  auto kind = static_cast<pgw::outcome>(data[1] % 9);
  std::string body{reinterpret_cast<const char*>(data + 2), size - 2};

  pgw::attempt_result whole;
  pgw::decode_chat_completion(body, whole);
  check(whole, est);
  whole.kind = kind; // the rule holds for every class
  check(whole, est);

  pgw::sse_parser parser;
  pgw::stream_accumulator acc{4096};
  std::vector<pgw::sse_event> events;
  parser.feed(body.data(), body.size(), events);
  parser.finish(events);
  for (auto& ev : events)
    if (acc.on_event(ev) != pgw::stream_accumulator::step::more
        && acc.finished())
      break;
  pgw::attempt_result streamed;
  acc.finish(streamed);
  check(streamed, est);
  streamed.kind = kind;
  check(streamed, est);
  return 0;
}
