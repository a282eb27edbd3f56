#pragma once

/// `pgw-actor serve`: what the HTTP handlers share.

#include "actors/client.hpp"
#include "apps/cli/line_writer.hpp"
#include "actors/interfaces.hpp"
#include "config/settings.hpp"
#include "serve_auth.hpp"
#include "serve_metrics.hpp"

#include <caf/actor_system.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace pgw::serve {

/// The socket of the connection this HTTP worker thread serves (set when
/// the thread takes the connection, before any handler runs; -1 = none).
extern thread_local int client_socket;

/// How a streamed answer ended when it did not end well (for the access
/// log line, whose status went out before): "stream_interrupted" (or the
/// call's other error code) after the first chunk, "client_gone" when the
/// client left mid-stream; empty otherwise. Per HTTP worker thread.
extern thread_local std::string stream_outcome;

/// Watches the sockets of the clients whose calls run, on one thread
/// (epoll): when a client hangs up, its call is cancelled at once, so the
/// HTTP threads only wait for their call's own events.
class disconnect_watch {
public:
  /// Cancels a call; `client_left` = its client hung up (else the drain
  /// time is over). Runs on the watch thread: it must not block.
  using cancel_fn = std::function<void(bool client_left)>;

  /// Ends the watch of one socket when destroyed (before the socket closes).
  class registration {
  public:
    registration() = default;
    registration(disconnect_watch* w, uint64_t id) : watch_(w), id_(id) {}
    registration(registration&& other) noexcept
      : watch_(std::exchange(other.watch_, nullptr)), id_(other.id_) {}
    registration& operator=(registration&& other) noexcept;
    ~registration() { reset(); }
    void reset();

  private:
    disconnect_watch* watch_ = nullptr;
    uint64_t id_ = 0;
  };

  disconnect_watch();
  ~disconnect_watch();
  disconnect_watch(const disconnect_watch&) = delete;
  disconnect_watch& operator=(const disconnect_watch&) = delete;

  /// Runs `cancel(true)` once when the peer of `fd` hangs up, or
  /// `cancel(false)` at `cancel_all`, while the registration lives; at once
  /// when `cancel_all` already ran.
  registration watch(int fd, cancel_fn cancel);

  /// The drain time is over: cancels every watched call and every later one.
  void cancel_all();

private:
  void run();
  void forget(uint64_t id);

  int epoll_fd_ = -1;
  int wake_fd_ = -1; ///< eventfd: ends the thread
  std::mutex mtx_;
  std::unordered_map<uint64_t, std::pair<int, cancel_fn>> calls_;
  uint64_t next_id_ = 1;
  bool all_cancelled_ = false;
  std::thread thread_;
};

/// One scope served: its configuration and gateway.
struct served_scope {
  const scope_config* config = nullptr;
  gateway_actor gateway;
  /// The chat calls' client, shared by every request (its one requester
  /// actor sends the calls: no actor per request); always set.
  std::shared_ptr<client> chat;
};

struct context {
  caf::actor_system* sys = nullptr;
  const settings* cfg = nullptr;
  /// Lower-case scope name → scope.
  std::map<std::string, served_scope> scopes;
  key_set keys;
  metrics stats;
  std::atomic<int64_t> in_flight{0};
  std::atomic<uint64_t> next_call{0};
  /// Cancels the calls of clients that hang up, and all at the drain's end.
  disconnect_watch watch;
  std::string call_prefix; ///< "serve-<pid>-"
  /// The writer thread of serve's stderr lines from its loop (the access
  /// lines at the info level, the front's warnings), while the level is
  /// warn or lower: a line never waits on stderr (the front writes its
  /// lines on the thread that runs every actor). Bounded; a line that finds
  /// 10,000 waiting is dropped and counted.
  std::unique_ptr<cli::line_writer> access_log;
};

/// Counts a request in serve's metrics and, at PGW_LOG=info (serve's
/// default), queues its access line for stderr: method, path, status (and
/// `outcome` when a stream ended badly after its 200), scope, source, ms
/// since `started`, call id.
void log_request(context& ctx, const httplib::Request& req,
                 const httplib::Response& res,
                 std::chrono::steady_clock::time_point started,
                 const std::string& outcome);

/// `POST /v1/chat/completions`.
void handle_chat(context& ctx, const httplib::Request& req,
                 httplib::Response& res);

struct openai_request;

/// A chat request checked and ready to call (serve_chat.cpp).
struct chat_start {
  const served_scope* scope = nullptr;
  std::string call_id;
  std::string mode; ///< x-pgw-stream-mode, lower case ("" = live)
  std::chrono::steady_clock::time_point started;
};

/// What `handle_chat` does once the body is decoded and before the call:
/// checks the model, the cache controls and the stream mode, and sets the
/// call's source, tenant and id in `in.req` and the `x-pgw-scope` /
/// `x-pgw-call-id` headers in `res`; false when `res` holds an error answer.
bool start_chat(context& ctx, const httplib::Request& req, openai_request& in,
                httplib::Response& res, chat_start& out);

/// Counts a finished non-live call and sets `res` to its answer (JSON, or
/// SSE chunks for a buffered stream), or to its error (499 when `gone`).
void finish_chat(context& ctx, const openai_request& in, const chat_start& st,
                 caf::expected<chat_response>& result, bool gone,
                 httplib::Response& res);

/// `POST /v1/embeddings` (serve_side.cpp).
void handle_embeddings(context& ctx, const httplib::Request& req,
                       httplib::Response& res);

/// OpenAI's embeddings response (vectors as float arrays, or base64 of
/// their little-endian float32 bytes) plus `call_id` and `call_stats`;
/// `model` as the caller named it.
std::string embeddings_json(const embed_response& resp,
                            const std::string& model, bool base64);

/// `POST /v1/ocr` (serve_side.cpp).
void handle_ocr(context& ctx, const httplib::Request& req,
                httplib::Response& res);

/// Writes a side call's answer, or its error (499 when `gone`), into `res`.
using side_answer = std::function<void(httplib::Response& res, bool gone)>;

/// An embeddings or OCR call checked and ready to start.
struct side_start {
  const served_scope* scope = nullptr;
  std::string call_id;
  std::chrono::steady_clock::time_point started;
  /// Starts the call on `cl` (`client::embed_then` / `ocr_then`); `done`
  /// gets, once, on a CAF thread, the writer of its answer (the call
  /// counted in the metrics when the writer runs).
  std::function<void(client& cl, std::function<void(side_answer)> done)> launch;
};

/// What the side handlers do before the call (`req.path` names the
/// route): decodes and checks the body, picks the scope, sets
/// `x-pgw-scope` / `x-pgw-call-id`; false when `res` holds an error answer.
bool start_side(context& ctx, const httplib::Request& req,
                httplib::Response& res, side_start& out);

/// Counts a request in flight while it lives.
struct in_flight_guard {
  context& ctx;
  int64_t now;
  explicit in_flight_guard(context& c);
  ~in_flight_guard();
  /// True (and a 503 `overloaded` sent) when more than
  /// PGW_SERVE_MAX_INFLIGHT requests are running.
  bool overloaded(httplib::Response& res) const;
};

/// Resolves `model`: a scope name (any case) or `SCOPE/source` (sets
/// `source`); null when it names neither.
const served_scope* resolve(context& ctx, const std::string& model,
                            std::string& source);

/// The 404 `model_not_found` answer for `model`: not a scope, or (for
/// `SCOPE/source`) a source not in the scope, listing its sources.
void send_model_not_found(const context& ctx, httplib::Response& res,
                          const std::string& model);

/// The answer for a failed call (status, OpenAI error body, Retry-After);
/// 499 (logged only) when the client is gone.
void send_call_error(httplib::Response& res, const caf::error& err, bool gone);

/// Writes an OpenAI-shaped error (and Retry-After when given).
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& code,
                long long retry_after_s = 0);

/// Runs `call()` (a blocking call of call `call_id`) and returns its answer;
/// cancels the call when the client goes (`gone` set) or the drain time is
/// over. For chat, `call` is `client::chat`, which waits on an answer slot
/// the CAF thread sets with one futex call (a std::future's promise costs
/// two; issue 13).
template <class Call>
auto await_call(context& ctx, client& cl, const std::string& call_id,
                Call call, bool& gone) -> decltype(call()) {
  std::atomic<bool> left{false};
  std::optional<decltype(call())> answer;
  {
    // The callback runs only while `reg` lives.
    auto reg = ctx.watch.watch(client_socket,
                               [&cl, &call_id, &left](bool client_left) {
                                 if (client_left)
                                   left = true;
                                 cl.cancel(call_id);
                               });
    answer.emplace(call());
  }
  gone = left;
  return std::move(*answer);
}

/// Waits for `pending` (see above).
template <class T>
T await_call(context& ctx, client& cl, const std::string& call_id,
             std::future<T>& pending, bool& gone) {
  return await_call(
    ctx, cl, call_id, [&pending] { return pending.get(); }, gone);
}

} // namespace pgw::serve
