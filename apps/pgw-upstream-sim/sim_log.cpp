// The simulator's request log: one row per request (`GET /_sim/log`),
// cleared with the per-model counters by `POST /_sim/reset`.

#include "apps/pgw-upstream-sim/sim_internal.hpp"

namespace pgw::sim {

const char* to_string(action a) {
  switch (a) {
    case action::ok: return "ok";
    case action::error: return "error";
    case action::hang: return "hang";
    case action::reset: return "reset";
    case action::cut: return "cut";
    case action::stall: return "stall";
    case action::malformed: return "malformed";
    case action::nodone: return "nodone";
  }
  return "ok";
}

void server::impl::log_rejected(const std::string& model, int status,
                                bool stream, bool auth) {
  std::lock_guard<std::mutex> guard(log_mu);
  if (entries.size() >= opts.log_limit) {
    ++dropped;
    return;
  }
  double now = ms_between(epoch, clock_type::now());
  auto& e = entries.emplace_back();
  e.model = &*unknown_names.insert(model.substr(0, 256)).first;
  e.arrived_ms = now;
  e.ended_ms = now;
  e.act = action::error;
  e.status = static_cast<uint16_t>(status);
  e.stream = stream;
  e.auth = auth;
}

void server::impl::mark_status(const ticket& t, int status) {
  std::lock_guard<std::mutex> guard(log_mu);
  if (t.generation == generation && t.index != npos)
    entries[t.index].status = static_cast<uint16_t>(status);
}

void server::impl::finish(const ticket& t, int status, bool client_closed,
                          uint32_t tokens_sent) {
  std::lock_guard<std::mutex> guard(log_mu);
  if (t.generation != generation || t.index == npos)
    return;
  auto& e = entries[t.index];
  e.ended_ms = ms_between(epoch, clock_type::now());
  e.status = static_cast<uint16_t>(status);
  e.client_closed = client_closed;
  e.tokens_sent = tokens_sent;
}

std::string server::impl::log_json() const {
  std::deque<log_entry> copy;
  uint64_t dropped_copy;
  {
    std::lock_guard<std::mutex> guard(log_mu);
    copy = entries;
    dropped_copy = dropped;
  }
  std::string out;
  out.reserve(copy.size() * 190 + 64);
  out += R"({"requests":[)";
  bool first = true;
  for (auto& e : copy) {
    if (!first)
      out += ',';
    first = false;
    out += R"({"model":)";
    append_json_string(out, *e.model);
    fmt::format_to(std::back_inserter(out),
                   R"(,"n":{},"arrived_ms":{:.3f},"action":"{}","status":{},"ended_ms":)",
                   e.n, e.arrived_ms, to_string(e.act), e.status);
    if (std::isnan(e.ended_ms))
      out += "null";
    else
      fmt::format_to(std::back_inserter(out), "{:.3f}", e.ended_ms);
    fmt::format_to(std::back_inserter(out),
                   R"(,"client_closed":{},"stream":{},"auth":{},"tokens_sent":{},)"
                   R"("prompt_tokens":{}}})",
                   e.client_closed, e.stream, e.auth, e.tokens_sent,
                   e.prompt_tokens);
  }
  fmt::format_to(std::back_inserter(out), R"(],"dropped":{}}})", dropped_copy);
  return out;
}

void server::impl::reset() {
  std::lock_guard<std::mutex> guard(log_mu);
  entries.clear();
  dropped = 0;
  counters.assign(counters.size(), 0);
  ++generation;
  epoch = clock_type::now();
}

} // namespace pgw::sim
