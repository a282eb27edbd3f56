#pragma once

/// A scriptable transport for deterministic actor tests. Each source has a
/// script of steps (the last repeats); answers are scheduled on the actor
/// clock, so under the test coordinator they arrive in virtual time.

#include "transport/transport.hpp"

#include <caf/actor_addr.hpp>
#include <caf/actor_clock.hpp>
#include <caf/optional.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pgw::test {

/// What one call on a source does.
struct fake_step {
  attempt_result result;
  /// Virtual time until `done` is sent.
  caf::timespan delay{0};
  /// Streaming: virtual time until `first_token` is sent.
  caf::optional<caf::timespan> first_token_after;
  /// Never sends `done` (a hang); a first token may still come.
  bool hang = false;
  /// The request never leaves (a connect or TLS handshake that hangs): the
  /// call's `send_gate` stays open for whoever stops the call; nothing is
  /// ever sent back.
  bool unsent = false;
  /// When set, fills the result from the request body (embeddings).
  std::function<void(const std::string& body, attempt_result&)> respond;
  /// Live streaming: with `upstream_call::forward_deltas`, each piece is
  /// sent as a content delta, the first with the first token, the next
  /// ones `chunk_gap` apart.
  std::vector<std::string> chunks;
  caf::timespan chunk_gap{0};

  static fake_step ok(std::string content = "hello", int64_t prompt = 10,
                      int64_t completion = 5);
  static fake_step http(int status, outcome kind, std::string code = "");
  /// `source_rejected` with a transport's reason (`response_too_large`,
  /// `redirect`): the upstream's fault.
  static fake_step unusable(int status, std::string reason);
  static fake_step rate_limited(caf::optional<double> retry_after_s);
  static fake_step transient(std::string reason);
  static fake_step never();
  /// Hangs before its request leaves (see `unsent`).
  static fake_step connecting();
  fake_step& after(caf::timespan d);
  fake_step& token_after(caf::timespan d);
  /// Streams `pieces` (first token after `first`, then one per `gap`);
  /// `done` comes one gap after the last piece. The result is ok with the
  /// whole text unless changed afterwards (e.g. `cut()`).
  static fake_step streamed(std::vector<std::string> pieces,
                            caf::timespan first, caf::timespan gap);
  /// The stream ends without a finish_reason: transient `stream_cut`.
  fake_step& cut();
};

/// One call the fake saw.
struct fake_call {
  std::string source;
  std::string body;
  bool stream = false;
  upstream_kind kind = upstream_kind::chat;
  uint64_t tag = 0;
  caf::actor_clock::time_point started;
  bool cancelled = false;
  bool forward_deltas = false;
  /// Who the results go to (the attempt, or an embedding or OCR call).
  caf::actor_addr sink;
};

class fake_transport : public transport {
public:
  /// Sets the script of `source`.
  void script(const std::string& source, std::vector<fake_step> steps);

  std::shared_ptr<call_handle>
  start(upstream_call call, caf::actor sink, uint64_t tag) override;

  /// Every call so far, in start order.
  std::vector<fake_call> calls() const;
  /// The source of each call so far, in order.
  std::vector<std::string> sources_called() const;

  /// Calls made on `source`.
  size_t count(const std::string& source) const;

  void mark_cancelled(size_t index);

private:
  mutable std::mutex mtx_;
  std::map<std::string, std::vector<fake_step>> scripts_;
  std::map<std::string, size_t> next_;
  std::vector<fake_call> calls_;
};

} // namespace pgw::test
