// `pgw-actor serve`: the chat completions route.

#include "serve_app.hpp"
#include "serve_openai.hpp"

#include "actors/client.hpp"
#include "backends/cache_key.hpp"

#include <httplib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>

namespace pgw::serve {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// The text form of a socket address, and its port.
bool address_of(const sockaddr_storage& sa, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf);
    port = ntohs(in.sin_port);
  } else if (sa.ss_family == AF_INET6) {
    auto& in = reinterpret_cast<const sockaddr_in6&>(sa);
    inet_ntop(AF_INET6, &in.sin6_addr, buf, sizeof buf);
    port = ntohs(in.sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

/// The process's socket connected to the request's client (httplib gives a
/// handler only the addresses): matched on both ends' address and port.
int find_socket(const httplib::Request& req) {
  auto dir = opendir("/proc/self/fd");
  if (dir == nullptr)
    return -2;
  int found = -2;
  while (auto entry = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0')
      continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    sockaddr_storage peer{};
    sockaddr_storage local{};
    socklen_t len = sizeof peer;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &len) != 0)
      continue;
    len = sizeof local;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &len) != 0)
      continue;
    std::string paddr, laddr;
    int pport = 0, lport = 0;
    if (!address_of(peer, paddr, pport) || !address_of(local, laddr, lport))
      continue;
    if (pport == req.remote_port && lport == req.local_port
        && paddr == req.remote_addr && laddr == req.local_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

} // namespace

const served_scope* resolve(context& ctx, const std::string& model,
                            std::string& source) {
  auto slash = model.find('/');
  auto scope_name = lower(model.substr(0, slash));
  auto i = ctx.scopes.find(scope_name);
  if (i == ctx.scopes.end())
    return nullptr;
  if (slash != std::string::npos) {
    source = lower(model.substr(slash + 1));
    if (i->second.config->find(source) == nullptr)
      return nullptr;
  }
  return &i->second;
}

in_flight_guard::in_flight_guard(context& c) : ctx(c), now(++c.in_flight) {
  ctx.stats.set_in_flight(now);
}

in_flight_guard::~in_flight_guard() {
  ctx.stats.set_in_flight(--ctx.in_flight);
}

bool in_flight_guard::overloaded(httplib::Response& res) const {
  auto limit = ctx.cfg->global.serve.max_inflight;
  if (now <= limit)
    return false;
  send_error(res, 503,
             "too many requests in flight (PGW_SERVE_MAX_INFLIGHT="
               + std::to_string(limit) + ")",
             "service_unavailable", "overloaded", 1);
  return true;
}

void send_model_not_found(httplib::Response& res, const std::string& model) {
  send_error(res, 404,
             "the model '" + model.substr(0, 100)
               + "' is not a scope of this gateway (GET /v1/models "
                 "lists them; SCOPE/source pins a source)",
             "invalid_request_error", "model_not_found");
}

void send_call_error(httplib::Response& res, const caf::error& err, bool gone) {
  auto reply = reply_for(err);
  res.status = reply.status;
  if (reply.retry_after_s)
    res.set_header("Retry-After", std::to_string(*reply.retry_after_s));
  res.set_content(reply.body, "application/json");
  if (gone)
    res.status = 499; // logged only: nobody reads it
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& code,
                long long retry_after_s) {
  res.status = status;
  if (retry_after_s > 0)
    res.set_header("Retry-After", std::to_string(retry_after_s));
  res.set_content(error_body(message, type, code), "application/json");
}

bool client_gone(const httplib::Request& req, int& fd) {
  if (fd == -1)
    fd = find_socket(req);
  if (fd < 0)
    return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void handle_chat(context& ctx, const httplib::Request& req,
                 httplib::Response& res) {
  in_flight_guard guard{ctx};
  if (guard.overloaded(res))
    return;
  openai_request in;
  if (auto problem = parse_request(req.body, in))
    return send_error(res, 400, *problem, "invalid_request_error",
                      "invalid_request");
  std::string source;
  auto scope = resolve(ctx, in.model, source);
  if (scope == nullptr)
    return send_model_not_found(res, in.model);
  if (auto problem = apply_cache_controls(req.get_header_value("Cache-Control"),
                                          req.get_header_value("x-pgw-cache"),
                                          in.req))
    return send_error(res, 400, *problem, "invalid_request_error",
                      "invalid_request");
  // With auth on, each key has its own cache entries (the key's digest; the
  // key itself is never stored).
  if (!ctx.keys.empty())
    in.req.tenant = sha256_hex(req.get_header_value("Authorization"));
  res.set_header("x-pgw-scope", scope->config->name);
  in.req.source = source;
  in.req.call_id = ctx.call_prefix + std::to_string(++ctx.next_call);
  const auto call_id = in.req.call_id;
  res.set_header("x-pgw-call-id", call_id);
  auto started = std::chrono::steady_clock::now();
  client cl = scope->chat ? *scope->chat : client{*ctx.sys, scope->gateway};
  auto pending = cl.chat_async(std::move(in.req));
  bool gone = false;
  auto result = await_call(ctx, req, cl, call_id, pending, gone);
  double total_s = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - started)
                     .count();
  auto created = static_cast<long long>(std::time(nullptr));
  const auto& scope_name = scope->config->name;
  if (!result) {
    ctx.stats.record_call(scope_name, {}, code_name(result.error()), total_s,
                          nullptr);
    return send_call_error(res, result.error(), gone);
  }
  ctx.stats.record_call(scope_name, result->source, "ok", total_s, &*result);
  res.set_header("x-pgw-source", result->source);
  res.set_header("x-pgw-cache", result->stats.cache_hit ? "hit" : "miss");
  if (in.stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(completion_sse(*result, in.model, created,
                                   in.include_usage),
                    "text/event-stream");
  } else {
    res.set_content(completion_json(*result, in.model, created),
                    "application/json");
  }
}

} // namespace pgw::serve
