#include "actors/accounting.hpp"

#include "config/scrub.hpp"
#include "messages/chat.hpp"
#include "messages/errors.hpp"
#include "messages/telemetry.hpp"

namespace pgw {

caf::optional<double> attempt_cost(const price_table* prices,
                                   const std::string& scope,
                                   const std::string& source,
                                   const std::string& model, outcome kind,
                                   const attempt_result* res,
                                   int64_t settled_tokens) {
  if (prices == nullptr)
    return caf::none;
  std::optional<double> cost;
  if (res != nullptr && res->usage_reported)
    cost = prices->cost(scope, source, model, res->prompt_tokens,
                        res->completion_tokens);
  else if (kind == outcome::hedge_cancelled)
    cost = prices->cost(scope, source, model, 0, settled_tokens);
  if (!cost)
    return caf::none;
  return *cost;
}

double wall_ms(caf::actor_clock::time_point at, double wall_offset_ms) {
  return std::chrono::duration<double, std::milli>(at.time_since_epoch())
           .count()
         + wall_offset_ms;
}

double ms_between(caf::actor_clock::time_point from,
                  caf::actor_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

const char* usage_source_of(const attempt_result* res) {
  return res != nullptr && res->usage_reported ? "reported" : "unavailable";
}

void fill_result(attempt_row& row, outcome kind, const attempt_result* res) {
  row.usage_source = usage_source_of(res);
  if (res == nullptr) {
    row.reason = to_string(kind);
    return;
  }
  row.response_model = res->model;
  row.ttft_ms = res->ttft_ms;
  row.generation_ms = res->latency_ms;
  row.reason = res->reason;
  row.http_status = res->http_status;
  row.error_code = res->error_code;
  row.error_message = scrub(res->error_message);
  if (row.error_message.empty() && res->malformed_events > 0)
    row.error_message = std::to_string(res->malformed_events)
                        + " stream event(s) skipped: not valid JSON";
  if (res->usage_reported) {
    row.input_tokens = res->prompt_tokens;
    row.output_tokens = res->completion_tokens;
  } else if (res->usage_rejected) {
    row.usage_source = "rejected"; // absurd numbers (SPEC §12)
  }
}

void fill_ok_call(call_row& row, const call_stats& s) {
  // The row's columns repeat call_stats one by one (duplicates pairs this
  // with call_supervisor's succeed()): two types, each filled in one place.
  row.outcome = "ok";
  row.hedge_won = s.hedge_won;
  row.cache_hit = s.cache_hit;
  row.generation_ms = s.generation_ms;
  row.source = s.source;
  row.model = s.model;
  row.input_tokens = s.prompt_tokens;
  row.output_tokens = s.completion_tokens;
  row.cost_usd = s.cost_usd;
  row.cost_saved_usd = s.cost_saved_usd;
}

terminal_failure_row fail_call(call_row& row, const caf::error& failure) {
  auto code = code_of(failure);
  row.outcome = code ? to_string(*code) : "internal";
  terminal_failure_row fail_row;
  fail_row.call_id = row.call_id;
  fail_row.scope = row.scope;
  fail_row.at_ms = row.started_at_ms + row.latency_ms;
  fail_row.error_code = row.outcome;
  if (auto d = detail_of(failure)) {
    fail_row.message = d->message;
    fail_row.retry_after_s = d->retry_after_s;
    fail_row.upstream_status = d->upstream_status;
    fail_row.upstream_code = d->upstream_code;
    std::string per = "{";
    for (auto& [source, reason] : d->per_source) {
      if (per.size() > 1)
        per += ",";
      per += "\"" + source + "\":\"" + reason + "\"";
    }
    fail_row.per_source_json = per + "}";
    // After the commit the caller got part of one source's answer: the
    // call is that source's, with the usage it reported so far.
    row.source = d->stream_source;
    if (d->usage_reported) {
      row.input_tokens = d->prompt_tokens;
      row.output_tokens = d->completion_tokens;
    }
  }
  return fail_row;
}

} // namespace pgw
