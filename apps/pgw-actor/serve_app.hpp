#pragma once

/// `pgw-actor serve`: what the HTTP handlers share.

#include "actors/client.hpp"
#include "actors/interfaces.hpp"
#include "config/settings.hpp"
#include "serve_auth.hpp"
#include "serve_metrics.hpp"

#include <caf/actor_system.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace pgw::serve {

/// One scope served: its configuration and gateway.
struct served_scope {
  const scope_config* config = nullptr;
  gateway_actor gateway;
  /// The chat calls' client, shared by every request (its one requester
  /// actor sends the calls: no actor per request); null = one per request.
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
  /// Set when the drain time is over: running calls are cancelled.
  std::atomic<bool> cancel_all{false};
  std::string call_prefix; ///< "serve-<pid>-"
};

/// `POST /v1/chat/completions`.
void handle_chat(context& ctx, const httplib::Request& req,
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

/// The 404 `model_not_found` answer for `model`.
void send_model_not_found(httplib::Response& res, const std::string& model);

/// The answer for a failed call (status, OpenAI error body, Retry-After);
/// 499 (logged only) when the client is gone.
void send_call_error(httplib::Response& res, const caf::error& err, bool gone);

/// Writes an OpenAI-shaped error (and Retry-After when given).
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& code,
                long long retry_after_s = 0);

/// True when the client of `req` closed its connection (checked on the
/// socket; `fd` caches the socket once found, -1 = not looked up yet, -2 =
/// not found).
bool client_gone(const httplib::Request& req, int& fd);

/// Waits for `pending`; cancels call `call_id` once when the client goes
/// (`gone` set) or the drain time is over.
template <class T>
T await_call(context& ctx, const httplib::Request& req, client& cl,
             const std::string& call_id, std::future<T>& pending, bool& gone) {
  int fd = -1;
  bool cancelled = false;
  while (pending.wait_for(std::chrono::milliseconds(5))
         != std::future_status::ready) {
    if (cancelled)
      continue;
    gone = client_gone(req, fd);
    if (gone || ctx.cancel_all) {
      cl.cancel(call_id);
      cancelled = true;
    }
  }
  return pending.get();
}

} // namespace pgw::serve
