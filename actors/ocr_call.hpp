#pragma once

/// The `ocr_call` actor: one per logical OCR call (issue 16).

#include "actors/call_supervisor.hpp"
#include "actors/interfaces.hpp"
#include "transport/ocr_codec.hpp"

#include <caf/actor_clock.hpp>
#include <caf/typed_response_promise.hpp>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace pgw {

/// What an OCR call needs; built by its gateway.
struct ocr_call_args {
  std::string call_id;
  std::shared_ptr<const ocr_request> request;
  image_type type = image_type::png;
  scope_ptr scope;
  std::shared_ptr<const std::map<std::string, call_source>> sources;
  gateway_actor gateway;
  transport_ptr transport;
  caf::optional<double> deadline_s;
  uint64_t seed = 0;
  /// Who asked: when it goes away, the call is cancelled.
  caf::strong_actor_ptr requester;
  /// Where each attempt's row goes; invalid = nowhere.
  telemetry_actor telemetry;
  double wall_offset_ms = 0;
};

struct ocr_call_state {
  static inline const char* name = "ocr_call";

  ocr_call_args args;
  caf::typed_response_promise<ocr_response> promise;
  bool started = false;
  bool finishing = false;
  bool delivered = false;
  bool admitting = false;
  bool running = false;
  caf::error failure;
  ocr_response response;
  // -- the running attempt --
  uint64_t tag = 0;
  admit_result admitted;
  std::shared_ptr<call_handle> handle;
  caf::actor_clock::time_point sent_at;
  // -- the retry loop --
  uint64_t retry_gen = 0;
  int64_t budget_used = 0;
  int64_t rounds_failed = 0;
  std::map<std::string, int32_t> failures;
  std::vector<std::string> excluded;
  std::map<std::string, std::string> last_reason;
  caf::optional<attempt_result> last_rejection;
  caf::actor_clock::time_point started_at;
  std::mt19937_64 rng;
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
