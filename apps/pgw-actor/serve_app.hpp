#pragma once

/// `pgw-actor serve`: what the HTTP handlers share.

#include "actors/interfaces.hpp"
#include "config/settings.hpp"
#include "serve_auth.hpp"
#include "serve_metrics.hpp"

#include <caf/actor_system.hpp>

#include <atomic>
#include <map>
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

/// Writes an OpenAI-shaped error (and Retry-After when given).
void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& code,
                long long retry_after_s = 0);

/// True when the client of `req` closed its connection (checked on the
/// socket; `fd` caches the socket once found, -1 = not looked up yet, -2 =
/// not found).
bool client_gone(const httplib::Request& req, int& fd);

} // namespace pgw::serve
