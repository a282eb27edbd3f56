#include "actors/gateway.hpp"

#include "actors/admission.hpp"
#include "actors/breaker.hpp"
#include "actors/call_supervisor.hpp"
#include "actors/embed_start.hpp"
#include "actors/limiter.hpp"
#include "config/support/log.hpp"
#include "actors/ocr_start.hpp"
#include "config/keys.hpp"
#include "config/limits.hpp"
#include "actors/cache.hpp"
#include "backends/cache_key.hpp"
#include "transport/chat_codec.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pgw {

namespace {

using self_ptr = gateway_actor::stateful_pointer<gateway_state>;

double seconds_until(caf::actor_clock::time_point from,
                     caf::actor_clock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

caf::timespan to_timespan(double seconds) {
  return saturating_duration(seconds);
}

/// Seconds as text to the millisecond, without trailing zeros ("0.25",
/// "3599.988", "86400"): never "0" for a fraction of a second.
std::string seconds_text(double s) {
  return detail::format_number(std::round(s * 1000) / 1000);
}

std::string new_call_id(self_ptr self) {
  auto& st = self->state;
  // A random 64-bit part per call: ids stay unique across gateways and
  // nodes that share one telemetry database.
  return fmt::format("{}-{:016x}-{}", st.scope->name, st.rng(),
                     ++st.next_call);
}

void on_report(self_ptr self, const attempt_report& rep) {
  auto& st = self->state;
  auto i = st.index.find(rep.source);
  if (i == st.index.end())
    return;
  auto& src = st.sources[i->second];
  if (src.in_flight > 0)
    --src.in_flight;
  ++src.outcomes[to_string(rep.kind)];
  switch (rep.kind) {
    case outcome::ok:
      ++src.ok;
      src.consecutive_429 = 0;
      break;
    case outcome::rate_limited: {
      // Every 429 cools its source down, so the call moves on at once
      // (SPEC §12).
      ++src.rate_limited;
      auto now = self->clock().now();
      // A 429 that comes back while the source is cooling was sent before
      // the cooldown began (the same burst): it does not double it again.
      if (src.cool_until <= now || src.consecutive_429 == 0)
        ++src.consecutive_429;
      auto cap = breaker_settings_of(*st.scope, *src.config).max_cooldown_s;
      // Capped (SPEC §12): a far-future Retry-After must not bench a
      // source for years. Said once per source: a source that keeps
      // answering 429 would flood the log.
      if (rep.retry_after_s && *rep.retry_after_s > cap
          && !src.retry_after_cap_logged) {
        src.retry_after_cap_logged = true;
        log::warn("gateway", "source {} sent a Retry-After of {} s; capped "
                  "at BREAKER__MAX_COOLDOWN_S={} (said once per source)",
                  rep.source, seconds_text(*rep.retry_after_s),
                  detail::format_number(cap));
      }
      auto cool_s = rate_limit_cooldown_s(src.consecutive_429,
                                          rep.retry_after_s, cap);
      auto until = now + to_timespan(cool_s);
      src.cool_until = std::max(src.cool_until, until);
      log::info("gateway", "source {}/{} cools down for {:.1f} s after 429 #{}",
                st.scope->name, src.config->name, cool_s, src.consecutive_429);
      break;
    }
    case outcome::cancelled:
    case outcome::hedge_cancelled:
      break;
    default:
      ++src.failed;
      if (rep.kind != outcome::result_invalid) {
        // "unauthorized 401", "http_503", "connect_error".
        auto status = std::to_string(rep.http_status);
        src.last_failure = rep.reason;
        if (rep.http_status != 0 && rep.reason != "http_" + status)
          src.last_failure += " " + status;
      }
      break;
  }
  if (!rep.feeds_health)
    return;
  try {
    st.picker->feed(i->second, rep.kind);
  } catch (...) {
    // Selector errors never fail anything.
  }
}

/// Drops the call of supervisor `sup` from its requester's list; stops
/// watching a requester that has no live call left.
void forget_requester(self_ptr self, const caf::actor_addr& sup) {
  auto& st = self->state;
  auto p = st.pending.find(sup);
  if (p == st.pending.end())
    return;
  auto& untyped = static_cast<caf::response_promise&>(p->second);
  auto addr = caf::actor_cast<caf::actor_addr>(untyped.source());
  auto r = st.calls_of.find(addr);
  if (r == st.calls_of.end())
    return;
  auto& sups = r->second;
  sups.erase(std::remove(sups.begin(), sups.end(), sup), sups.end());
  if (sups.empty()) {
    self->demonitor(addr);
    st.calls_of.erase(r);
  }
}

/// Makes sure a tick comes no later than the earliest armed timer.
void schedule_tick(self_ptr self) {
  auto& st = self->state;
  auto next = st.timers.next();
  if (!next || (!st.ticks.empty() && *st.ticks.begin() <= *next))
    return;
  st.ticks.insert(*next);
  auto now = self->clock().now();
  self->delayed_send(self, *next > now ? *next - now : caf::timespan{0},
                     atom::timer_v);
}

void on_tick(self_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  // One entry per tick on its way; they come in the order of their times,
  // each no earlier than the time it was sent for: this one is the first.
  if (!st.ticks.empty())
    st.ticks.erase(st.ticks.begin());
  // The owner is a call supervisor, an embedding or an OCR call: all take
  // `(atom::timer, kind, id)`.
  for (auto& f : st.timers.take_due(now))
    self->send(caf::actor_cast<timer_owner_actor>(f.owner), atom::timer_v,
               f.kind, f.id);
  schedule_tick(self);
}

gateway_status status_of(self_ptr self) {
  auto& st = self->state;
  gateway_status out;
  out.scope = st.scope->name;
  out.selector = to_string(st.scope->selector);
  out.calls_started = st.calls_started;
  out.calls_ok = st.calls_ok;
  out.calls_failed = st.calls_failed;
  out.calls_active = static_cast<int64_t>(st.calls.size()
                                         + st.side_calls.size());
  out.timers_armed = static_cast<int64_t>(st.timers.size());
  auto now = self->clock().now();
  for (size_t i = 0; i < st.sources.size(); ++i) {
    auto& src = st.sources[i];
    source_status s;
    s.name = src.config->name;
    s.model = src.config->model;
    s.in_flight = src.in_flight;
    s.cooling_s = src.cool_until > now ? seconds_until(now, src.cool_until)
                                       : 0.0;
    s.attempts = src.attempts;
    s.ok = src.ok;
    s.failed = src.failed;
    s.rate_limited = src.rate_limited;
    s.outcomes = src.outcomes;
    s.ewma = st.picker->ewma(i);
    s.structured_rung = to_string(
      st.ladder->rung_for(*src.config, schema_strategy::auto_select));
    out.sources.push_back(std::move(s));
  }
  return out;
}

/// Answers `status` after asking every source's limiter and breaker.
void collect_status(self_ptr self,
                    caf::typed_response_promise<gateway_status> rp) {
  auto& st = self->state;
  auto out = std::make_shared<gateway_status>(status_of(self));
  auto pending = std::make_shared<size_t>(2 * st.sources.size()
                                          + (st.opts.telemetry ? 1 : 0));
  auto failed = std::make_shared<bool>(false);
  if (*pending == 0) {
    rp.deliver(std::move(*out));
    return;
  }
  auto done = [out, pending, failed, rp](caf::error* err) mutable {
    if (*failed)
      return;
    if (err != nullptr) {
      *failed = true;
      rp.deliver(std::move(*err));
      return;
    }
    if (--*pending == 0)
      rp.deliver(std::move(*out));
  };
  if (st.opts.telemetry)
    self->request(st.opts.telemetry, caf::infinite, atom::status_v)
      .then([out, done](telemetry_status& ts) mutable {
              out->telemetry = std::move(ts);
              done(nullptr);
            },
            [done](caf::error& err) mutable { done(&err); });
  // A limiter or breaker whose backend cannot be read (Redis down) still
  // gives the source a status, saying why: status is what an operator
  // looks at during an outage, so it must not fail with it.
  for (size_t i = 0; i < st.sources.size(); ++i) {
    auto src = st.sources[i].config;
    self->request(st.sources[i].limiter, caf::infinite, atom::status_v)
      .then([out, i, done](limiter_status& ls) mutable {
              out->sources[i].limiter = std::move(ls);
              done(nullptr);
            },
            [out, i, src, done](caf::error& err) mutable {
              auto& ls = out->sources[i].limiter;
              ls = limiter_status_of(limits_of(*src));
              ls.unavailable = describe(err);
              done(nullptr);
            });
    self->request(st.sources[i].breaker, caf::infinite, atom::status_v)
      .then([out, i, done](breaker_status& bs) mutable {
              out->sources[i].breaker = std::move(bs);
              done(nullptr);
            },
            [out, i, src, done](caf::error& err) mutable {
              auto& bs = out->sources[i].breaker;
              bs.source = src->name;
              bs.state = "unknown";
              bs.unavailable = describe(err);
              done(nullptr);
            });
  }
}

/// The checks of a chat call before anything starts; sets a call id when
/// the request has none. A default (empty) error when it may start.
caf::error check_chat(self_ptr self, chat_request& req) {
  auto& st = self->state;
  if (st.stop_reason)
    return make_error(error_code::cancelled, "the gateway is shutting down");
  if (auto err = check_request(req))
    return err;
  if (auto kind = st.scope->sources.front().kind; kind != source_kind::chat)
    return make_error(error_code::invalid_request,
                      "scope " + st.scope->name + " serves KIND="
                        + to_string(kind)
                        + ", not chat");
  if (!req.source.empty() && st.call_sources->count(req.source) == 0)
    return make_error(error_code::invalid_request,
                      st.scope->unknown_source(req.source));
  if (req.call_id.empty())
    req.call_id = new_call_id(self);
  else if (st.calls.count(req.call_id) != 0)
    return make_error(error_code::invalid_request,
                      "call_id " + req.call_id + " is already running");
  return caf::error{};
}

/// Starts a chat call: checks it, spawns its supervisor and answers the
/// requester with its single result; `sink` (may be invalid) receives a
/// live call's deltas and terminal event (also for a refused call).
caf::result<chat_response> start_chat(self_ptr self, chat_request& req,
                                      caf::actor sink) {
  auto& st = self->state;
  if (auto err = check_chat(self, req)) {
    if (sink)
      // anon_send: a typed actor cannot send() this.
      caf::anon_send(sink, atom::stream_end_v, err);
    return err;
  }
  call_args args;
  args.scope = st.scope;
  args.sources = st.call_sources;
  args.gateway = self;
  args.transport = st.transport;
  args.stream = req.stream ? *req.stream : st.scope->stream;
  if (req.deadline_s)
    args.deadline_s = *req.deadline_s;
  else if (st.scope->call_deadline_s)
    args.deadline_s = *st.scope->call_deadline_s;
  args.seed = st.rng();
  args.telemetry = st.opts.telemetry;
  args.prices = st.opts.prices;
  args.wall_offset_ms = st.opts.wall_offset_ms;
  args.telemetry_content = st.opts.telemetry_content;
  args.ladder = st.ladder;
  args.check_runner = st.opts.check_runner;
  args.sink = std::move(sink);
  if (st.opts.cache && st.scope->cache.enabled) {
    args.cache = st.opts.cache;
    args.cache_key = cache_key(st.scope->name, req, st.cache_sources);
  }
  args.request = std::make_shared<const chat_request>(std::move(req));
  auto id = args.request->call_id;
  auto sup = self->spawn(call_supervisor, std::move(args));
  self->monitor(sup);
  auto addr = sup.address();
  st.calls.emplace(id, sup);
  st.call_of.emplace(addr, std::move(id));
  ++st.calls_started;
  auto rp = self->make_response_promise<chat_response>();
  st.pending.emplace(addr, rp);
  // make_response_promise took the sender from the current message.
  auto& sender = static_cast<caf::response_promise&>(rp).source();
  if (sender) {
    auto& sups = st.calls_of[caf::actor_cast<caf::actor_addr>(sender)];
    if (sups.empty())
      self->monitor(sender);
    sups.push_back(addr);
  }
  self->request(sup, caf::infinite, atom::start_v)
    .then(
      [self, addr](chat_response& resp) {
        auto& st = self->state;
        forget_requester(self, addr);
        if (auto p = st.pending.find(addr); p != st.pending.end()) {
          ++st.calls_ok;
          p->second.deliver(std::move(resp));
          st.pending.erase(p);
        }
      },
      [self, addr](caf::error& err) {
        auto& st = self->state;
        forget_requester(self, addr);
        if (auto p = st.pending.find(addr); p != st.pending.end()) {
          ++st.calls_failed;
          p->second.deliver(std::move(err));
          st.pending.erase(p);
        }
      });
  return rp;
}

/// How long a gateway told to exit waits for its cancelled calls to answer
/// (each closes its connections and settles; far less in practice).
constexpr auto stop_grace = std::chrono::seconds(5);

/// The answer for the caller of call `id`, whose `who` (its supervisor, or
/// the embedding or OCR call) ended without answering (it should not).
caf::error unanswered(const std::string& id, const char* who) {
  error_detail detail;
  detail.message = std::string{who} + " ended without an answer";
  detail.call_id = id;
  return make_error(error_code::internal, std::move(detail));
}

/// A monitored call (supervisor, embedding or OCR call) or requester went.
void on_down(self_ptr self, caf::down_msg& msg) {
  auto& st = self->state;
  if (auto r = st.calls_of.find(msg.source); r != st.calls_of.end()) {
    // A requester went away: its calls are cancelled.
    for (auto& sup : r->second)
      if (auto i = st.call_of.find(sup); i != st.call_of.end())
        if (auto c = st.calls.find(i->second); c != st.calls.end())
          self->send(c->second, atom::cancel_v);
    st.calls_of.erase(r);
    return;
  }
  auto i = st.call_of.find(msg.source);
  if (i == st.call_of.end())
    return;
  auto id = i->second;
  st.timers.drop(msg.source);
  st.calls.erase(id);
  if (auto s = st.side_calls.find(id); s != st.side_calls.end()) {
    // An embedding or OCR call that vanished without answering (killed):
    // its caller still gets exactly one answer.
    ++st.calls_failed;
    s->second.fail(unanswered(id, "call"));
    st.side_calls.erase(s);
  }
  st.call_of.erase(i);
  forget_requester(self, msg.source);
  if (auto p = st.pending.find(msg.source); p != st.pending.end()) {
    // The supervisor vanished without answering (it should not): the
    // caller still gets exactly one answer.
    ++st.calls_failed;
    p->second.deliver(unanswered(id, "call supervisor"));
    st.pending.erase(p);
  }
}

/// Told to exit: refuse new calls and cancel the live ones, which answer
/// their callers and settle their permits while the limiters (linked to
/// this actor) still run; quit once they have gone (the down handler), or
/// at once when none runs, or at a second exit (the grace's end).
void on_exit(self_ptr self, caf::error reason) {
  auto& st = self->state;
  if (st.stop_reason || (st.calls.empty() && st.side_calls.empty())) {
    // A call still running would never end: its timers live here (nor
    // would it close its connections). The exit stops it; it settles in
    // its attempts' exit handlers.
    for (auto& call : st.calls)
      self->send_exit(call.second, reason);
    for (auto& call : st.side_calls)
      self->send_exit(call.second.actor, reason);
    // Their callers would not hear of them again: this actor goes now.
    for (auto& entry : st.pending)
      entry.second.deliver(make_error(error_code::cancelled,
                                      "the gateway shut down"));
    st.pending.clear();
    for (auto& call : st.side_calls)
      call.second.fail(make_error(error_code::cancelled,
                                  "the gateway shut down"));
    st.side_calls.clear();
    self->quit(reason);
    return;
  }
  st.stop_reason = reason;
  for (auto& call : st.calls)
    self->send(call.second, atom::cancel_v);
  for (auto& call : st.side_calls)
    caf::anon_send(call.second.actor, atom::cancel_v);
  caf::delayed_anon_send(caf::actor_cast<caf::actor>(self), stop_grace,
                         caf::exit_msg{self->address(), std::move(reason)});
}

} // namespace

gateway_actor::behavior_type gateway(self_ptr self, scope_ptr scope,
                                     transport_ptr transport,
                                     gateway_options opts) {
  auto& st = self->state;
  st.scope = std::move(scope);
  st.transport = std::move(transport);
  st.opts = opts;
  // A telemetry actor made for this gateway ends with it (its sink flushes).
  if (opts.own_telemetry && opts.telemetry)
    self->link_to(opts.telemetry);
  st.rng.seed(opts.seed != 0 ? opts.seed : std::random_device{}());
  std::vector<selector::source_entry> entries;
  std::map<std::string, call_source> call_sources;
  for (auto& src : st.scope->sources) {
    std::shared_ptr<const source_config> ptr{st.scope, &src};
    st.index.emplace(src.name, st.sources.size());
    source_runtime rt;
    rt.config = ptr;
    auto lim = opts.make_limiter ? opts.make_limiter(*st.scope, src)
                                 : make_memory_limiter(limits_of(src));
    auto brk = opts.make_breaker
                 ? opts.make_breaker(*st.scope, src)
                 : make_memory_breaker(breaker_settings_of(*st.scope, src));
    auto pair = opts.make_governance_pair
                  ? opts.make_governance_pair(*st.scope, src)
                  : nullptr;
    rt.paired = pair != nullptr;
    rt.breaker = self->spawn<caf::linked>(
      breaker, std::shared_ptr<breaker_backend>{std::move(brk)},
      opts.governance_pool);
    rt.limiter = self->spawn<caf::linked>(
      governed_limiter, std::shared_ptr<limiter_backend>{std::move(lim)},
      opts.governance_pool, std::move(pair), rt.breaker);
    call_sources[src.name] = call_source{ptr, rt.limiter, rt.breaker};
    st.sources.push_back(std::move(rt));
    entries.push_back({src.name, src.priority});
  }
  st.picker.emplace(st.scope->selector, std::move(entries));
  if (opts.cache && st.scope->cache.enabled)
    st.cache_sources = cache_sources_id(*st.scope);
  st.call_sources = std::make_shared<const std::map<std::string, call_source>>(
    std::move(call_sources));
  self->set_down_handler([self](caf::down_msg& msg) {
    on_down(self, msg);
    auto& st = self->state;
    if (st.stop_reason && st.calls.empty() && st.side_calls.empty())
      self->quit(st.stop_reason); // every call has answered and settled
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (msg.reason == caf::exit_reason::normal)
      return; // a linked actor that ended normally, as CAF's default
    on_exit(self, std::move(msg.reason));
  });
  return {
    [self](atom::chat, chat_request& req) -> caf::result<chat_response> {
      return start_chat(self, req, caf::actor{});
    },
    [self](atom::chat, chat_request& req,
           caf::actor& sink) -> caf::result<chat_response> {
      return start_chat(self, req, std::move(sink));
    },
    [self](atom::embed, embed_request& req) -> caf::result<embed_response> {
      return detail::start_embed(self, std::move(req));
    },
    [self](atom::ocr, ocr_request& req) -> caf::result<ocr_response> {
      return detail::start_ocr(self, std::move(req));
    },
    [self](atom::admit, admit_request& req) -> caf::result<admit_result> {
      auto rp = self->make_response_promise<admit_result>();
      detail::admit(self, std::move(req), rp);
      return rp;
    },
    [self](atom::abandon, const admit_result& admitted) {
      detail::abandon(self, admitted);
    },
    [self](atom::report, attempt_report& rep) { on_report(self, rep); },
    [self](atom::cancel, std::string& call_id) {
      auto& st = self->state;
      if (auto i = st.calls.find(call_id); i != st.calls.end())
        self->send(i->second, atom::cancel_v);
      if (auto e = st.side_calls.find(call_id); e != st.side_calls.end())
        caf::anon_send(e->second.actor, atom::cancel_v);
    },
    [self](atom::status) -> caf::result<gateway_status> {
      auto rp = self->make_response_promise<gateway_status>();
      collect_status(self, rp);
      return rp;
    },
    [self](atom::timer, timer_kind kind, uint64_t id, caf::timespan delay) {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || st.call_of.count(caf::actor_cast<caf::actor_addr>(sender))
                       == 0)
        return; // only live calls arm timers
      st.timers.arm(sender, kind, id, self->clock().now() + delay);
      schedule_tick(self);
    },
    [self](atom::timer) { on_tick(self); },
  };
}

double rate_limit_cooldown_s(int32_t consecutive,
                             caf::optional<double> retry_after_s,
                             double cap_s) {
  if (retry_after_s && *retry_after_s > 0)
    return std::min(*retry_after_s, cap_s);
  auto doublings = std::clamp(consecutive - 1, 0, 62);
  return std::min(std::ldexp(1.0, doublings), cap_s);
}

limiter_limits limits_of(const source_config& src) {
  limiter_limits out;
  out.source = src.name;
  out.rpm = src.rpm;
  out.tpm = src.tpm;
  out.max_concurrency = src.max_concurrency;
  out.lease_s = src.timeout_s + 10;
  return out;
}

breaker_settings breaker_settings_of(const scope_config& scope,
                                     const source_config& src) {
  auto& b = scope.breaker;
  breaker_settings out;
  out.source = src.name;
  out.threshold = effective_threshold(b.threshold, src.max_concurrency);
  out.cooldown_s = b.cooldown_s;
  out.min_calls = b.min_calls;
  out.fail_rate = b.fail_rate;
  out.window_s = b.window_s;
  out.max_cooldown_s = b.max_cooldown_s ? *b.max_cooldown_s
                                        : std::max(300.0, b.cooldown_s);
  out.probe_lease_s = src.timeout_s + 5;
  return out;
}

double wall_offset_ms(caf::actor_system& sys) {
  auto wall = std::chrono::duration<double, std::milli>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  auto actor = std::chrono::duration<double, std::milli>(
                 sys.clock().now().time_since_epoch())
                 .count();
  return wall - actor;
}

gateway_actor spawn_gateway(caf::actor_system& sys, scope_ptr scope,
                            transport_ptr transport, gateway_options opts) {
  return sys.spawn(gateway, std::move(scope), std::move(transport), opts);
}

} // namespace pgw
