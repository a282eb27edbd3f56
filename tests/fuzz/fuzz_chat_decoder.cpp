// libFuzzer target: the decoder of a complete (non-streaming) upstream
// answer, on arbitrary bodies. Properties: the outcome is always one of
// ok / result_invalid / the classes an error body maps to, never left at its
// default without a reason; token counts are never negative; an `ok` carries
// reason "ok"; decoding is deterministic.

#include "transport/chat_codec.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body{reinterpret_cast<const char*>(data), size};
  pgw::attempt_result a;
  pgw::decode_chat_completion(body, a);
  pgw::attempt_result b;
  pgw::decode_chat_completion(body, b);
  if (a.reason.empty())
    std::abort(); // every decoded body says why it was judged so
  if (a.prompt_tokens < 0 || a.completion_tokens < 0)
    std::abort();
  if (a.kind == pgw::outcome::ok && a.reason != "ok")
    std::abort();
  if (a.kind != b.kind || a.reason != b.reason || a.content != b.content
      || a.finish_reason != b.finish_reason
      || a.prompt_tokens != b.prompt_tokens
      || a.completion_tokens != b.completion_tokens)
    std::abort();
  return 0;
}
