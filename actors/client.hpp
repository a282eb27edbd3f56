#pragma once

/// A non-actor wrapper: plain C++ code makes blocking or future-returning
/// calls on a gateway.

#include "pgw/actors/interfaces.hpp"

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <future>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

class client {
public:
  client(caf::actor_system& sys, gateway_actor gateway);

  /// Runs one call and blocks until its single answer.
  caf::expected<chat_response> chat(chat_request req);

  /// Starts one call; the future holds its single answer.
  std::future<caf::expected<chat_response>> chat_async(chat_request req);

  /// Embeds `inputs` (one vector per input, in order) and blocks until the
  /// single answer; an empty list answers at once.
  caf::expected<embed_response> embed(std::vector<std::string> inputs);

  /// Starts one embedding call; the future holds its single answer.
  std::future<caf::expected<embed_response>> embed_async(embed_request req);

  /// The text in `image` (PNG, JPEG or PDF bytes), from an OCR scope.
  caf::expected<ocr_response> recognize_text(std::string image);

  /// The layout of `image`: markdown plus blocks.
  caf::expected<ocr_response> parse_layout(std::string image);

  /// Starts one OCR call; the future holds its single answer.
  std::future<caf::expected<ocr_response>> ocr_async(ocr_request req);

  /// Cancels the call with this id (set `chat_request::call_id` to use it).
  /// The call answers `cancelled` once its attempts are stopped.
  void cancel(const std::string& call_id);

  /// The gateway's live status.
  caf::expected<gateway_status> status();

  const gateway_actor& gateway() const {
    return gateway_;
  }

  struct requester;

private:
  caf::actor_system& sys_;
  gateway_actor gateway_;
  /// One long-lived actor that sends this client's chat requests (and its
  /// copies'): no actor is spawned and ended per call. It ends once the
  /// last copy is gone and its calls have answered.
  std::shared_ptr<requester> requester_;
};

} // namespace pgw
