#include "actors/attempt.hpp"

#include "actors/accounting.hpp"
#include "actors/backend_call.hpp"
#include "actors/settlement.hpp"
#include "config/support/log.hpp"
#include "transport/chat_codec.hpp"

#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace pgw {

namespace {

using self_ptr = attempt_actor::stateful_pointer<attempt_state>;

void report(self_ptr self, outcome kind, caf::optional<double> retry_after,
            const attempt_result* res = nullptr) {
  attempt_report rep;
  rep.source = self->state.args.source->name;
  rep.kind = kind;
  rep.retry_after_s = retry_after;
  if (res != nullptr) {
    rep.reason = res->reason;
    rep.http_status = res->http_status;
  }
  self->send(self->state.args.gateway, atom::report_v, std::move(rep));
}

/// Writes this attempt's telemetry row, when telemetry is on. `res` is null
/// when the attempt was stopped before its outcome.
void write_row(self_ptr self, outcome kind, const attempt_result* res,
               int64_t settled) {
  auto& args = self->state.args;
  if (!args.telemetry)
    return;
  auto& src = *args.source;
  auto now = self->clock().now();
  attempt_row row;
  row.call_id = args.call_id();
  row.attempt = args.leg;
  row.scope = src.scope;
  row.source = src.name;
  row.request_model = src.model;
  row.started_at_ms = wall_ms(self->state.started_at, args.wall_offset_ms);
  row.latency_ms = ms_between(self->state.started_at, now);
  row.outcome = to_string(kind);
  row.settled_tokens = settled;
  row.is_hedge = args.hedge;
  row.is_probe = args.probe;
  fill_result(row, kind, res);
  if (res != nullptr && args.telemetry_content)
    row.content = res->content;
  row.cost_usd = attempt_cost(args.prices.get(), src.scope, src.name,
                              res && !res->model.empty() ? res->model
                                                         : src.model,
                              kind, res, settled);
  self->send(args.telemetry, atom::record_v, std::move(row));
}

/// Structured output: an answer that is not schema-valid JSON is
/// `result_invalid`, decided before the row, the settlement and the
/// breaker feed (a mismatch is not the source's breaker failure). An
/// answer with tool calls is not checked: the schema is for content. The
/// check goes with the result (`parsed`, `repaired`, `schema_issues`):
/// the supervisor does not validate the answer again.
bool needs_check(self_ptr self, const attempt_result& res) {
  return self->state.args.schema && res.kind == outcome::ok
         && res.tool_calls.empty();
}

void apply_check(attempt_result& res, structured_check check) {
  res.parsed = std::move(check.json);
  res.repaired = check.repaired;
  if (check.valid)
    return;
  res.kind = outcome::result_invalid;
  res.reason = res.parsed.empty() ? "invalid_json" : "schema_mismatch";
  res.error_message = format_issues_line({check.issues.front()});
  res.schema_issues = std::move(check.issues);
}

/// PGW_LOG=debug: one line when the attempt ends (source, outcome, reason,
/// status, ms since it started).
void log_end(self_ptr self, outcome kind, const attempt_result* res) {
  if (log::current_level() > log::level::debug)
    return;
  auto& args = self->state.args;
  auto ms = std::chrono::duration<double, std::milli>(
              self->clock().now() - self->state.started_at)
              .count();
  log::debug("attempt", "{} #{} on {}/{} ended {} ({}), status {}, {:.1f} ms",
             args.call_id(), args.leg, args.source->scope, args.source->name,
             to_string(kind), res ? res->reason : std::string{"stopped"},
             res ? res->http_status : 0, ms);
}

/// Settles and releases the permit, exactly once per attempt.
void settle(self_ptr self, int64_t amount) {
  auto& args = self->state.args;
  auto& id = args.granted_permit.id;
  if (id.empty())
    return;
  self->send(args.limiter, atom::settle_v, id, amount, atom::release_v);
}

/// The end of an attempt that ran: settle, release and the outcome for the
/// breaker in one message to the limiter, which makes them one backend call
/// with a governance pair (issue 17). Without a permit the breaker hears it
/// directly.
void finish(self_ptr self, int64_t amount, outcome kind) {
  auto& args = self->state.args;
  if (args.granted_permit.id.empty()) {
    self->send(args.breaker, atom::record_v, args.epoch, kind);
    return;
  }
  self->send(args.limiter, atom::settle_v, args.granted_permit.id, amount,
             atom::release_v, args.epoch, kind);
}

/// The outcome is known: settle, feed the breaker, write the row, report
/// to the gateway and the supervisor, quit.
void complete(self_ptr self, attempt_result res) {
  auto& st = self->state;
  st.finished = true;
  auto amount = settle_amount(res, st.args.granted_permit.est);
  finish(self, amount, res.kind);
  write_row(self, res.kind, &res, amount);
  log_end(self, res.kind, &res);
  report(self, res.kind, res.retry_after_s, &res);
  self->send(st.args.supervisor, atom::done_v, st.args.leg, std::move(res));
  self->quit();
}

/// Checks the answer on the check runner (inside this actor without one),
/// then completes with the result. Stopped meanwhile, the attempt settles
/// the answer's amount (`checked_amount`) and the late result finds it
/// gone.
void check_then_complete(self_ptr self, attempt_result res) {
  auto& st = self->state;
  st.checking = true;
  st.checked_amount = settle_amount(res, st.args.granted_permit.est);
  detail::run(
    self, st.args.check_runner,
    [schema = st.args.schema, res = std::move(res)]() mutable {
      apply_check(res, check_answer(*schema, res.content));
      return std::move(res);
    },
    [self](attempt_result checked) {
      auto& st = self->state;
      if (st.finished)
        return;
      st.checking = false;
      complete(self, std::move(checked));
    });
}

} // namespace

attempt_actor::behavior_type
attempt(attempt_actor::stateful_pointer<attempt_state> self, attempt_args args) {
  self->state.args = std::move(args);
  auto& st = self->state;
  st.started_at = self->clock().now();
  log::debug("attempt", "{} #{} starts on {}/{} (model {}{}{})",
             st.args.call_id(), st.args.leg, st.args.source->scope,
             st.args.source->name, st.args.source->model,
             st.args.hedge ? ", hedge" : "", st.args.probe ? ", probe" : "");
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    if (!st.finished) {
      st.finished = true;
      if (st.handle)
        st.handle->cancel();
      // The upstream may have generated tokens: settle the estimate unless
      // the request never left (no call, or the gate withheld it: by the
      // supervisor when it stopped this leg, or now). Waiting is not
      // death: no breaker feed.
      bool left = st.handle && !(st.args.gate && st.args.gate->withhold());
      auto amount = st.checking
                      ? st.checked_amount
                      : settle_cancelled(left, st.args.granted_permit.est);
      settle(self, amount);
      write_row(self, st.stop_label, nullptr, amount);
      log_end(self, st.stop_label, nullptr);
      if (st.args.probe)
        self->send(st.args.breaker, atom::release_v, st.args.epoch);
      report(self, st.stop_label, caf::none);
    }
    self->quit(msg.reason);
  });
  auto body = build_chat_body(*st.args.request, *st.args.source,
                              st.args.stream);
  if (!body) {
    // The gateway checked the request already; a body that still cannot be
    // built is the caller's input, so no source may run it.
    attempt_result res;
    res.kind = outcome::request_rejected;
    res.reason = "invalid_request";
    res.error_message = describe(body.error());
    self->send(self, atom::done_v, st.args.leg, std::move(res));
  } else {
    upstream_call call;
    call.source = st.args.source;
    call.body = std::move(*body);
    call.stream = st.args.stream;
    call.forward_deltas = st.args.forward_deltas;
    call.gate = st.args.gate;
    st.handle = st.args.transport->start(std::move(call),
                                         caf::actor_cast<caf::actor>(self),
                                         st.args.leg);
  }
  return {
    [self](atom::stop, outcome label) {
      self->state.stop_label = label == outcome::hedge_cancelled
                                 ? outcome::hedge_cancelled
                                 : outcome::cancelled;
    },
    [self](atom::first_token, uint64_t) {
      auto& st = self->state;
      if (!st.finished)
        self->send(st.args.supervisor, atom::first_token_v, st.args.leg);
    },
    [self](atom::delta, uint64_t, stream_delta& delta) {
      auto& st = self->state;
      if (!st.finished)
        self->send(st.args.supervisor, atom::delta_v, st.args.leg,
                   std::move(delta));
    },
    [self](atom::done, uint64_t, attempt_result& res) {
      auto& st = self->state;
      if (st.finished || st.checking)
        return;
      if (needs_check(self, res))
        return check_then_complete(self, std::move(res));
      complete(self, std::move(res));
    },
    [](atom::internal, std::shared_ptr<local_task>& task) { task->run(); },
  };
}

} // namespace pgw
