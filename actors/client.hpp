#pragma once

/// A non-actor wrapper: plain C++ code makes blocking or future-returning
/// calls on a gateway.

#include "pgw/actors/interfaces.hpp"

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pgw {

/// A live chat call started by `client::chat_stream` (issue 13). Destroying
/// it, or `cancel`, cancels the call: its upstream connections close and
/// its permits are settled (SPEC §8).
class live_call {
public:
  live_call(live_call&&) noexcept = default;
  live_call& operator=(live_call&& other) noexcept;
  ~live_call();

  /// Blocks until the terminal event: the whole answer (its deltas came
  /// before it) or the error — `stream_interrupted` when the stream broke
  /// after its first delta, `cancelled` after `cancel`. May be called again
  /// (the same answer), unless the answer was taken from `result()`.
  caf::expected<chat_response> wait();

  /// The terminal event as a future (for waiting with a timeout).
  std::future<caf::expected<chat_response>>& result() {
    return result_;
  }

  /// Cancels the call; the result becomes `cancelled` unless it was
  /// already decided, once the call's attempts are stopped and settled
  /// (its upstream connections closed). Safe to call more than once.
  void cancel();

private:
  friend class client;
  live_call(caf::actor helper,
            std::future<caf::expected<chat_response>> result);

  caf::actor helper_;
  std::future<caf::expected<chat_response>> result_;
  /// The answer once `wait` took it from `result_`.
  std::optional<caf::expected<chat_response>> answer_;
};

class client {
public:
  client(caf::actor_system& sys, gateway_actor gateway);

  /// Runs one call and blocks until its single answer.
  caf::expected<chat_response> chat(chat_request req);

  /// Starts one call; the future holds its single answer.
  std::future<caf::expected<chat_response>> chat_async(chat_request req);

  /// Starts one call; `done` gets its single answer, on a CAF thread (it
  /// must return quickly and never block), or an `internal` error if the
  /// client's requester stops first. An exception `done` throws is logged
  /// and goes no further.
  void chat_then(chat_request req,
                 std::function<void(caf::expected<chat_response>)> done);

  /// Starts a live call: `on_delta` gets each piece of the answer as the
  /// source streams it (only from the source that produced the first token
  /// first; the first delta names it), then the returned handle's result
  /// holds the terminal event. `on_delta` runs on a CAF thread, one call at
  /// a time, in order; it must return quickly. An `on_delta` that throws
  /// cancels the call (as `cancel` does): the result is `cancelled`, naming
  /// what it threw. `on_end`, when given, runs (on a CAF thread, after the
  /// last `on_delta`) once the result is set.
  live_call chat_stream(chat_request req,
                        std::function<void(const stream_delta&)> on_delta,
                        std::function<void()> on_end = {});

  /// Embeds `inputs` (one vector per input, in order) and blocks until the
  /// single answer; an empty list answers at once.
  caf::expected<embed_response> embed(std::vector<std::string> inputs);

  /// Starts one embedding call; the future holds its single answer.
  std::future<caf::expected<embed_response>> embed_async(embed_request req);

  /// Starts one embedding call; `done` gets its single answer on a CAF
  /// thread (it must return quickly and never block).
  void embed_then(embed_request req,
                  std::function<void(caf::expected<embed_response>)> done);

  /// The text in `image` (PNG, JPEG or PDF bytes), from an OCR scope.
  caf::expected<ocr_response> recognize_text(std::string image);

  /// The layout of `image`: markdown plus blocks.
  caf::expected<ocr_response> parse_layout(std::string image);

  /// Starts one OCR call; the future holds its single answer.
  std::future<caf::expected<ocr_response>> ocr_async(ocr_request req);

  /// Starts one OCR call; `done` gets its single answer on a CAF thread.
  void ocr_then(ocr_request req,
                std::function<void(caf::expected<ocr_response>)> done);

  /// Cancels the call with this id (set `chat_request::call_id` to use it).
  /// The call answers `cancelled` once its attempts are stopped. A call
  /// (chat, embed or OCR) started on this client before the cancel is
  /// reached by it, however soon after.
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
