#pragma once

/// The `ocr_call` actor: one per logical OCR call (issue 16).

#include "actors/interfaces.hpp"
#include "actors/side_call.hpp"
#include "transport/ocr_codec.hpp"

#include <memory>

namespace pgw {

/// What an OCR call needs; built by its gateway.
struct ocr_call_args : side_call_args {
  std::shared_ptr<const ocr_request> request;
  image_type type = image_type::png;
  /// The image's pages (`page_count`), for a per-page price.
  int64_t pages = 1;
};

struct ocr_call_state : side_call_state_base<ocr_call_args, ocr_response> {
  static inline const char* name = "ocr_call";

  bool admitting = false;
  bool running = false;
  side_request req; ///< the running attempt
  side_retry retry;
};

/// Runs one OCR operation with the chat retry rules (MAX_ATTEMPTS budget,
/// backoff, 429 rounds free, `source_rejected` excludes the source,
/// `request_rejected` ends the call, one deadline for the call) and no
/// hedging. Each attempt is admitted through the gateway, sent as a vision
/// chat request (KIND=ocr_vision) or a MonkeyOCR multipart request
/// (KIND=ocr_monkey; HTTP 200 with `success:false` is a failure classified
/// from its message), and its permit settles 0 tokens on every path (OCR
/// has no tokens: 0 is a fact). Cancellation (caller, deadline) stops the
/// running attempt and settles 0 as well.
ocr_call_actor::behavior_type
ocr_call(ocr_call_actor::stateful_pointer<ocr_call_state> self,
         ocr_call_args args);

} // namespace pgw
