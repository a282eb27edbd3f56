#include "actors/gateway.hpp"

#include "actors/call_supervisor.hpp"
#include "transport/chat_codec.hpp"
#include "transport/httplib_transport.hpp"

#include <caf/actor_system.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace pgw {

namespace {

using self_ptr = gateway_actor::stateful_pointer<gateway_state>;

double seconds_until(caf::actor_clock::time_point from,
                     caf::actor_clock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

caf::timespan to_timespan(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(std::max(0.0, seconds)));
}

std::string new_call_id(self_ptr self) {
  auto& st = self->state;
  return fmt::format("{}-{:08x}-{}", st.scope->name,
                     static_cast<uint32_t>(st.rng()), ++st.next_call);
}

admit_result admit(self_ptr self, const admit_request& req) {
  auto& st = self->state;
  auto n = st.sources.size();
  std::vector<int32_t> in_flight(n), failures(n, 0);
  for (size_t i = 0; i < n; ++i) {
    in_flight[i] = st.sources[i].in_flight;
    if (auto f = req.failures.find(st.sources[i].config->name);
        f != req.failures.end())
      failures[i] = f->second;
  }
  std::vector<size_t> order;
  try {
    order = st.picker->order(in_flight, st.rng);
  } catch (...) {
    // An error inside the selector never fails a call (SPEC §7).
    order.resize(n);
    std::iota(order.begin(), order.end(), size_t{0});
  }
  demote_failed(order, failures);
  auto now = self->clock().now();
  admit_result out;
  std::optional<caf::actor_clock::time_point> earliest;
  for (auto i : order) {
    auto& src = st.sources[i];
    auto& name = src.config->name;
    if (std::find(req.exclude.begin(), req.exclude.end(), name)
        != req.exclude.end())
      continue;
    if (src.cool_until > now) {
      out.skipped[name] = "cooling";
      if (!earliest || src.cool_until < *earliest)
        earliest = src.cool_until;
      continue;
    }
    out.admitted = true;
    out.source = name;
    ++src.in_flight;
    ++src.attempts;
    return out;
  }
  out.refusal = out.skipped.empty() ? "none" : "cooling";
  if (earliest)
    out.retry_after_s = seconds_until(now, *earliest);
  return out;
}

void on_report(self_ptr self, const attempt_report& rep) {
  auto& st = self->state;
  auto i = st.index.find(rep.source);
  if (i == st.index.end())
    return;
  auto& src = st.sources[i->second];
  if (src.in_flight > 0)
    --src.in_flight;
  switch (rep.kind) {
    case outcome::ok:
      ++src.ok;
      break;
    case outcome::rate_limited:
      ++src.rate_limited;
      if (rep.retry_after_s && *rep.retry_after_s > 0) {
        auto until = self->clock().now() + to_timespan(*rep.retry_after_s);
        src.cool_until = std::max(src.cool_until, until);
      }
      break;
    case outcome::cancelled:
    case outcome::hedge_cancelled:
      break;
    default:
      ++src.failed;
      break;
  }
  try {
    st.picker->feed(i->second, rep.kind);
  } catch (...) {
    // Selector errors never fail anything.
  }
}

/// Makes sure a tick comes no later than the earliest armed timer.
void schedule_tick(self_ptr self) {
  auto& st = self->state;
  auto next = st.timers.next();
  if (!next || (st.tick_at && *st.tick_at <= *next))
    return;
  st.tick_at = *next;
  auto now = self->clock().now();
  self->delayed_send(self, *next > now ? *next - now : caf::timespan{0},
                     atom::timer_v);
}

void on_tick(self_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  if (st.tick_at && *st.tick_at <= now)
    st.tick_at.reset();
  for (auto& f : st.timers.take_due(now))
    self->send(caf::actor_cast<call_supervisor_actor>(f.owner), atom::timer_v,
               f.tag);
  schedule_tick(self);
}

gateway_status status_of(self_ptr self) {
  auto& st = self->state;
  gateway_status out;
  out.scope = st.scope->name;
  out.selector = st.scope->selector;
  out.calls_started = st.calls_started;
  out.calls_ok = st.calls_ok;
  out.calls_failed = st.calls_failed;
  out.calls_active = static_cast<int64_t>(st.calls.size());
  out.timers_armed = static_cast<int64_t>(st.timers.size());
  auto now = self->clock().now();
  for (auto& src : st.sources) {
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
    out.sources.push_back(std::move(s));
  }
  return out;
}

} // namespace

gateway_actor::behavior_type gateway(self_ptr self, scope_ptr scope,
                                     transport_ptr transport,
                                     gateway_options opts) {
  auto& st = self->state;
  st.scope = std::move(scope);
  st.transport = std::move(transport);
  st.rng.seed(opts.seed != 0 ? opts.seed : std::random_device{}());
  std::vector<selector::source_entry> entries;
  for (auto& src : st.scope->sources) {
    std::shared_ptr<const source_config> ptr{st.scope, &src};
    st.index.emplace(src.name, st.sources.size());
    st.by_name.emplace(src.name, ptr);
    source_runtime rt;
    rt.config = ptr;
    st.sources.push_back(std::move(rt));
    entries.push_back({src.name, src.priority});
  }
  st.picker.emplace(selector::parse(st.scope->selector), std::move(entries));
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    auto i = st.call_of.find(msg.source);
    if (i == st.call_of.end())
      return;
    auto id = i->second;
    st.timers.drop(msg.source);
    st.calls.erase(id);
    st.call_of.erase(i);
    if (auto p = st.pending.find(id); p != st.pending.end()) {
      // The supervisor vanished without answering (it should not): the
      // caller still gets exactly one answer.
      ++st.calls_failed;
      error_detail detail;
      detail.message = "call supervisor ended without an answer";
      detail.call_id = id;
      p->second.deliver(make_error(error_code::internal, std::move(detail)));
      st.pending.erase(p);
    }
  });
  return {
    [self](atom::chat, chat_request& req) -> caf::result<chat_response> {
      auto& st = self->state;
      if (auto err = check_request(req))
        return err;
      if (req.call_id.empty())
        req.call_id = new_call_id(self);
      else if (st.calls.count(req.call_id) != 0)
        return make_error(error_code::invalid_request,
                          "call_id " + req.call_id + " is already running");
      call_args args;
      args.call_id = req.call_id;
      args.scope = st.scope;
      args.sources = st.by_name;
      args.gateway = self;
      args.transport = st.transport;
      args.stream = req.stream ? *req.stream : st.scope->stream;
      if (req.deadline_s)
        args.deadline_s = *req.deadline_s;
      else if (st.scope->call_deadline_s)
        args.deadline_s = *st.scope->call_deadline_s;
      args.seed = st.rng();
      args.request = std::make_shared<const chat_request>(std::move(req));
      auto id = args.call_id;
      auto sup = self->spawn(call_supervisor, std::move(args));
      self->monitor(sup);
      st.calls.emplace(id, sup);
      st.call_of.emplace(sup.address(), id);
      ++st.calls_started;
      auto rp = self->make_response_promise<chat_response>();
      st.pending.emplace(id, rp);
      self->request(sup, caf::infinite, atom::start_v)
        .then(
          [self, id](chat_response& resp) {
            auto& st = self->state;
            if (auto p = st.pending.find(id); p != st.pending.end()) {
              ++st.calls_ok;
              p->second.deliver(std::move(resp));
              st.pending.erase(p);
            }
          },
          [self, id](caf::error& err) {
            auto& st = self->state;
            if (auto p = st.pending.find(id); p != st.pending.end()) {
              ++st.calls_failed;
              p->second.deliver(std::move(err));
              st.pending.erase(p);
            }
          });
      return rp;
    },
    [self](atom::admit, admit_request& req) -> admit_result {
      return admit(self, req);
    },
    [self](atom::report, attempt_report& rep) { on_report(self, rep); },
    [self](atom::cancel, std::string& call_id) {
      auto& st = self->state;
      if (auto i = st.calls.find(call_id); i != st.calls.end())
        self->send(i->second, atom::cancel_v);
    },
    [self](atom::status) -> gateway_status { return status_of(self); },
    [self](atom::timer, uint64_t tag, caf::timespan delay) {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || st.call_of.count(caf::actor_cast<caf::actor_addr>(sender))
                       == 0)
        return; // only live calls arm timers
      st.timers.arm(sender, tag, self->clock().now() + delay);
      schedule_tick(self);
    },
    [self](atom::timer) { on_tick(self); },
  };
}

caf::expected<gateway_actor> spawn_gateway(caf::actor_system& sys,
                                           const settings& cfg,
                                           const std::string& scope_name,
                                           transport_ptr transport,
                                           gateway_options opts) {
  auto scope = cfg.find(scope_name);
  if (scope == nullptr) {
    std::string known;
    for (auto& [name, sc] : cfg.scopes)
      known += (known.empty() ? "" : ", ") + name;
    return make_error(error_code::invalid_config,
                      "scope " + scope_name + " has no sources (set "
                        + scope_name
                        + "__{PROVIDER}__{NAME}__BASE_URL and __MODEL)"
                        + (known.empty() ? "" : "; configured: " + known));
  }
  if (scope->sources.empty())
    return make_error(error_code::invalid_config,
                      "scope " + scope_name + " has no sources");
  if (!transport)
    transport = make_httplib_transport();
  return spawn_gateway(sys, std::make_shared<const scope_config>(*scope),
                       std::move(transport), opts);
}

gateway_actor spawn_gateway(caf::actor_system& sys, scope_ptr scope,
                            transport_ptr transport, gateway_options opts) {
  return sys.spawn(gateway, std::move(scope), std::move(transport), opts);
}

} // namespace pgw
