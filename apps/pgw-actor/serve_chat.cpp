// `pgw-actor serve`: the chat completions route.

#include "serve_app.hpp"
#include "serve_openai.hpp"

#include "actors/client.hpp"
#include "backends/cache_key.hpp"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>

namespace pgw::serve {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
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

void send_model_not_found(const context& ctx, httplib::Response& res,
                          const std::string& model) {
  // A known scope with an unknown source: say so and list its sources.
  auto slash = model.find('/');
  auto i = ctx.scopes.find(lower(model.substr(0, slash)));
  auto words = "the model '" + model.substr(0, 100) + "'";
  if (i != ctx.scopes.end() && slash != std::string::npos)
    words += ": "
             + i->second.config->unknown_source(lower(model.substr(slash + 1)));
  else
    words += " is not a scope of this gateway (GET /v1/models lists them; "
             "SCOPE/source pins a source)";
  send_error(res, 404, words, "invalid_request_error", "model_not_found");
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

// -- live streaming (issue 13) -------------------------------------------------

namespace {

/// The deltas of a live call, between the CAF thread that receives them and
/// the HTTP thread that writes them.
struct live_feed {
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<stream_delta> deltas;
  bool ended = false; ///< the call's result is set (after its last delta)
};

/// Everything the SSE writer of a live call needs after the handler
/// returned (httplib calls the content provider later).
struct live_state {
  context* ctx = nullptr;
  std::shared_ptr<in_flight_guard> guard;
  std::shared_ptr<live_feed> feed;
  std::unique_ptr<live_call> call;
  std::string call_id;
  std::string model;
  std::string scope;
  bool include_usage = false;
  long long created = 0;
  std::chrono::steady_clock::time_point started;
  int fd = -1; ///< the client's socket
  std::atomic<bool> cancelled{false};
  std::atomic<bool> client_left{false};
  /// Declared last: forgotten first, while `call` still lives.
  disconnect_watch::registration watching;

  /// Cancels the call once (the client left, or the drain time is over).
  void cancel() {
    if (!cancelled.exchange(true))
      call->cancel();
  }

  /// Waits for deltas or the call's end (woken by either); takes the deltas
  /// queued; `ended` = the call had ended when they were taken (none follow).
  std::deque<stream_delta> next(bool& ended) {
    std::deque<stream_delta> out;
    std::unique_lock<std::mutex> lock{feed->mtx};
    feed->cv.wait(lock, [this] { return !feed->deltas.empty() || feed->ended; });
    ended = feed->ended;
    out.swap(feed->deltas);
    return out;
  }

  /// Waits until the first delta is queued or the call ended (before its
  /// commit the call fails over invisibly, so this may take a while).
  void wait_first() {
    std::unique_lock<std::mutex> lock{feed->mtx};
    feed->cv.wait(lock, [this] { return !feed->deltas.empty() || feed->ended; });
  }

  bool ended() {
    std::lock_guard<std::mutex> lock{feed->mtx};
    return feed->ended;
  }
};

/// Writes the live call's SSE events as they come; a failure after the
/// first delta is one `data: {"error": …}` event, then the stream closes.
bool write_live(const std::shared_ptr<live_state>& ls, httplib::DataSink& sink) {
  auto write = [&sink](const std::string& text) {
    return sink.write(text.data(), text.size());
  };
  bool open = write(stream_open_sse(ls->call_id, ls->model, ls->created));
  for (bool ended = false; !ended;) {
    for (auto& d : ls->next(ended))
      if (open)
        open = write(delta_sse(d, ls->call_id, ls->model, ls->created));
    if (!open) {
      ls->client_left = true;
      ls->cancel();
    }
  }
  ls->watching.reset();
  auto result = ls->call->wait();
  double total_s = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - ls->started)
                     .count();
  if (result) {
    ls->ctx->stats.record_call(ls->scope, result->source, "ok", total_s,
                               &*result);
    if (open)
      write(stream_close_sse(*result, ls->model, ls->created,
                             ls->include_usage));
  } else {
    auto code = code_name(result.error());
    ls->ctx->stats.record_failure(ls->scope, result.error(), total_s);
    if (open)
      write(error_sse(result.error()));
    stream_outcome = code;
  }
  if (ls->client_left)
    stream_outcome = "client_gone";
  sink.done();
  return true;
}

/// Serves a streaming request live: waits (invisibly failing over) until
/// the first delta; an error before it is an ordinary HTTP error answer,
/// after it the rest goes out as SSE chunks while the source streams.
/// Takes `in.req` (the call's request).
void serve_live(context& ctx, httplib::Response& res,
                const std::shared_ptr<live_state>& ls, openai_request& in,
                const chat_start& st) {
  client cl{*ctx.sys, st.scope->gateway};
  auto call_req = std::move(in.req);
  auto feed = ls->feed;
  ls->call = std::make_unique<live_call>(cl.chat_stream(
    std::move(call_req),
    [feed](const stream_delta& d) {
      std::lock_guard<std::mutex> guard{feed->mtx};
      feed->deltas.push_back(d);
      feed->cv.notify_one();
    },
    [feed] {
      std::lock_guard<std::mutex> guard{feed->mtx};
      feed->ended = true;
      feed->cv.notify_one();
    }));
  // The callback runs only while `watching` (a member of *ls) lives.
  ls->watching = ctx.watch.watch(ls->fd, [raw = ls.get()](bool client_left) {
    if (client_left)
      raw->client_left = true;
    raw->cancel();
  });
  ls->wait_first();
  std::string source;
  bool cache_hit = false;
  {
    std::lock_guard<std::mutex> guard{feed->mtx};
    if (!feed->deltas.empty()) {
      source = feed->deltas.front().source;
      cache_hit = feed->deltas.front().cache_hit;
    }
  }
  if (source.empty() && ls->ended()) {
    // Before any delta: an ordinary answer (an error, or an answer without
    // deltas in the buffered form).
    auto result = ls->call->wait();
    return finish_chat(ctx, in, st, result, ls->client_left, res);
  }
  res.set_header("x-pgw-source", source);
  res.set_header("x-pgw-cache", cache_hit ? "hit" : "miss");
  res.set_header("x-pgw-stream-mode", "live");
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
    "text/event-stream",
    [ls](size_t, httplib::DataSink& sink) { return write_live(ls, sink); });
}

} // namespace

bool start_chat(context& ctx, const httplib::Request& req, openai_request& in,
                httplib::Response& res, chat_start& out) {
  std::string source;
  out.scope = resolve(ctx, in.model, source);
  if (out.scope == nullptr) {
    send_model_not_found(ctx, res, in.model);
    return false;
  }
  if (auto problem = apply_cache_controls(req.get_header_value("Cache-Control"),
                                          req.get_header_value("x-pgw-cache"),
                                          in.req)) {
    send_error(res, 400, *problem, "invalid_request_error", "invalid_request");
    return false;
  }
  // Streaming requests are live unless the caller asks for the buffered
  // answer (full transparent failover, then the whole answer as chunks).
  out.mode = lower(req.get_header_value("x-pgw-stream-mode"));
  if (!out.mode.empty() && out.mode != "live" && out.mode != "buffered") {
    send_error(res, 400, "x-pgw-stream-mode must be live or buffered",
               "invalid_request_error", "invalid_request");
    return false;
  }
  // With auth on, each key has its own cache entries (the key's digest; the
  // key itself is never stored).
  if (!ctx.keys.empty())
    in.req.tenant = sha256_hex(req.get_header_value("Authorization"));
  res.set_header("x-pgw-scope", out.scope->config->name);
  in.req.source = source;
  in.req.call_id = ctx.call_prefix + std::to_string(++ctx.next_call);
  out.call_id = in.req.call_id;
  res.set_header("x-pgw-call-id", out.call_id);
  out.started = std::chrono::steady_clock::now();
  return true;
}

void finish_chat(context& ctx, const openai_request& in, const chat_start& st,
                 caf::expected<chat_response>& result, bool gone,
                 httplib::Response& res) {
  double total_s = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - st.started)
                     .count();
  auto created = static_cast<long long>(std::time(nullptr));
  const auto& scope_name = st.scope->config->name;
  if (!result) {
    ctx.stats.record_failure(scope_name, result.error(), total_s);
    return send_call_error(res, result.error(), gone);
  }
  ctx.stats.record_call(scope_name, result->source, "ok", total_s, &*result);
  res.set_header("x-pgw-source", result->source);
  res.set_header("x-pgw-cache", result->stats.cache_hit ? "hit" : "miss");
  if (!usage_known(*result))
    res.set_header("x-pgw-usage", "unavailable");
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

void handle_chat(context& ctx, const httplib::Request& req,
                 httplib::Response& res) {
  auto guard_ptr = std::make_shared<in_flight_guard>(ctx);
  if (guard_ptr->overloaded(res))
    return;
  openai_request in;
  if (auto problem = parse_request(req.body, in))
    return send_error(res, 400, *problem, "invalid_request_error",
                      "invalid_request");
  chat_start st;
  if (!start_chat(ctx, req, in, res, st))
    return;
  if (in.stream && st.mode != "buffered") {
    auto ls = std::make_shared<live_state>();
    ls->ctx = &ctx;
    ls->guard = std::move(guard_ptr);
    ls->feed = std::make_shared<live_feed>();
    ls->call_id = st.call_id;
    ls->model = in.model;
    ls->scope = st.scope->config->name;
    ls->include_usage = in.include_usage;
    ls->created = static_cast<long long>(std::time(nullptr));
    ls->started = st.started;
    ls->fd = client_socket;
    return serve_live(ctx, res, ls, in, st);
  }
  client& cl = *st.scope->chat;
  bool gone = false;
  auto result = await_call(
    ctx, cl, st.call_id, [&] { return cl.chat(std::move(in.req)); }, gone);
  finish_chat(ctx, in, st, result, gone, res);
}

} // namespace pgw::serve
