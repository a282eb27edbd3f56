#include "apps/cli/cli.hpp"

#include "actors/quiet_clock.hpp"

#include "apps/node/node_builder.hpp"
#include "config/json_text.hpp"
#include "config/support/log.hpp"

#include "messages/registry.hpp"

#include <caf/io/middleman.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace pgw::cli {

namespace json = boost::json;

int exit_code_of(const caf::error& err) {
  auto code = code_of(err);
  if (!code)
    return exit_other;
  switch (*code) {
    case error_code::invalid_config:
    case error_code::invalid_request:
      return exit_usage;
    case error_code::request_rejected:
      return exit_rejected;
    case error_code::call_deadline_exceeded:
      return exit_deadline;
    case error_code::governance_unavailable:
      return exit_governance;
    default:
      return is_unavailable_family(*code) ? exit_unavailable : exit_other;
  }
}

system_config::system_config(bool with_io, boost::asio::io_context* loop) {
  if (with_io)
    load<caf::io::middleman>();
  pgw::add_message_types(*this);
  set("logger.file-verbosity", caf::atom("quiet"));
  set("logger.console-verbosity", caf::atom("quiet"));
  // Work sharing wakes an idle worker at once; the default work stealing
  // lets idle workers sleep, which adds ~100 us to a call from a thread.
  // Actors never block (HTTP runs on the transport's own threads), so one
  // scheduler thread is enough and saves hand-offs between workers;
  // PGW_SCHEDULER_THREADS overrides it.
  set("scheduler.policy", caf::atom("sharing"));
  size_t threads = 1;
  if (auto env = std::getenv("PGW_SCHEDULER_THREADS")) {
    auto n = std::strtoul(env, nullptr, 10);
    if (n >= 1 && n <= 256)
      threads = n;
  }
  set("scheduler.max-threads", threads);
  // The same work-sharing scheduler, with a clock that is not woken when an
  // actor that armed no timeout ends (issue 17).
  use_quiet_clock(*this, loop);
}

std::optional<settings> load(const std::optional<std::string>& env_file,
                             bool json_out) {
  auto failed = [json_out](const caf::error& err) {
    if (json_out)
      std::puts(error_json(err).c_str());
    else
      std::fprintf(stderr, "pgw-actor: %s\n", describe(err).c_str());
    return std::nullopt;
  };
  std::vector<std::string> file_warnings;
  auto env = load_environment(env_file, &file_warnings);
  if (!env)
    return failed(env.error());
  auto cfg = load_settings(*env, &file_warnings);
  auto print_warnings = [](const std::vector<std::string>& warnings) {
    for (auto& w : warnings)
      std::fprintf(stderr, "pgw-actor: warning: %s\n", w.c_str());
  };
  if (!cfg) {
    // An unknown key's "did you mean" may explain the error.
    print_warnings(file_warnings);
    return failed(cfg.error());
  }
  // The env file's warnings (a key set twice) join the settings' ones, so
  // that `config check` counts them too.
  cfg->warnings.insert(cfg->warnings.begin(), file_warnings.begin(),
                       file_warnings.end());
  print_warnings(cfg->warnings);
  // The logger and the scheduler read these two from the process
  // environment; one given only in the env file reaches them here (a value
  // in the environment was read first and wins). Both were checked above.
  for (const char* key : {"PGW_LOG", "PGW_SCHEDULER_THREADS"})
    if (auto i = env->find(key); i != env->end() && !std::getenv(key))
      ::setenv(key, i->second.c_str(), 0);
  if (auto i = env->find("PGW_LOG"); i != env->end())
    log::set_level(log::parse_level(i->second).value_or(log::level::warn));
  return std::move(*cfg);
}

namespace {

json::object stats_object(const call_stats& s) {
  return json::object{
    {"attempts", s.attempts},
    {"total_latency_ms", round_us(s.total_latency_ms)},
    {"generation_ms", round_us(s.generation_ms)},
    {"ttft_ms",
     s.ttft_ms ? json::value(round_us(*s.ttft_ms)) : json::value(nullptr)},
    {"hedges", s.hedges},
    {"hedge_won", s.hedge_won},
    {"cache_hit", s.cache_hit},
    {"source", s.source},
    {"model", s.model},
    {"prompt_tokens", s.prompt_tokens},
    {"completion_tokens", s.completion_tokens},
    {"usage_source", s.usage_source},
    {"cost_usd", s.cost_usd ? json::value(*s.cost_usd) : json::value(nullptr)},
    {"malformed_events", s.malformed_events},
  };
}

} // namespace

std::optional<gateway_actor> command_gateway(caf::actor_system& sys,
                                             const settings& cfg,
                                             const std::string& scope,
                                             bool json_out) {
  auto gw = spawn_gateway(sys, cfg, scope);
  if (gw)
    return *gw;
  if (json_out)
    std::puts(error_json(gw.error()).c_str());
  else
    std::fprintf(stderr, "pgw-actor: %s\n", describe(gw.error()).c_str());
  return std::nullopt;
}

bool wants_json(const std::vector<std::string>& args) {
  return std::find(args.begin(), args.end(), "--json") != args.end();
}

int usage_failure(const std::string& msg, bool json_out) {
  return report_call_error(make_error(error_code::invalid_request, msg),
                           json_out);
}

int report_call_error(const caf::error& err, bool json_out) {
  if (json_out)
    std::puts(error_json(err).c_str());
  else
    std::fputs(error_text(err).c_str(), stderr);
  return exit_code_of(err);
}

std::string call_stats_json(const call_stats& stats) {
  return json_text(stats_object(stats));
}

std::string response_json(const chat_response& resp) {
  json::object out{
    {"content", resp.content},
    {"source", resp.source},
    {"model", resp.model},
    {"finish_reason", resp.finish_reason},
    {"call_id", resp.call_id},
    {"usage",
     json::object{{"prompt_tokens", resp.usage.prompt_tokens},
                  {"completion_tokens", resp.usage.completion_tokens}}},
    {"call_stats", stats_object(resp.stats)},
  };
  if (!resp.reasoning_content.empty())
    out["reasoning_content"] = resp.reasoning_content;
  // Structured output: the validated value beside the raw content.
  if (!resp.parsed.empty()) {
    json::error_code ec;
    out["parsed"] = parse_json(resp.parsed, ec);
    out["call_stats"].as_object()["repaired"] = resp.stats.repaired;
    out["call_stats"].as_object()["reasks"] = resp.stats.reasks;
  }
  return json_text(out);
}

std::string error_json(const caf::error& err) {
  json::object e;
  auto code = code_of(err);
  e["code"] = code ? to_string(*code) : "internal";
  auto detail = detail_of(err);
  e["message"] = detail ? detail->message : to_string(err);
  e["retry_after_s"] = detail && detail->retry_after_s
                         ? json::value(*detail->retry_after_s)
                         : json::value(nullptr);
  json::object per_source;
  if (detail) {
    for (auto& [source, reason] : detail->per_source) {
      json::object entry{{"reason", reason}};
      if (auto e = detail->sources.find(source); e != detail->sources.end()) {
        if (e->second.http_status != 0)
          entry["status"] = e->second.http_status;
        if (!e->second.message.empty())
          entry["message"] = e->second.message;
        if (!e->second.doing.empty())
          entry["detail"] = e->second.doing;
      }
      per_source[source] = std::move(entry);
    }
    if (detail->upstream_status != 0)
      e["upstream_status"] = detail->upstream_status;
    if (!detail->upstream_code.empty())
      e["upstream_code"] = detail->upstream_code;
    if (!detail->upstream_message.empty())
      e["upstream_message"] = detail->upstream_message;
    if (!detail->call_id.empty())
      e["call_id"] = detail->call_id;
  }
  e["per_source"] = std::move(per_source);
  return json_text(json::object{{"error", std::move(e)}});
}

std::string error_text(const caf::error& err) {
  auto detail = detail_of(err);
  if (!detail || detail->sources.empty())
    return "pgw-actor: " + describe(err) + "\n";
  auto code = code_of(err);
  auto lines = describe(detail->sources);
  // The message ends with the same list on one line: print it one source a
  // line instead.
  auto msg = detail->message;
  auto suffix = ": " + lines;
  if (msg.size() >= suffix.size()
      && msg.compare(msg.size() - suffix.size(), suffix.size(), suffix) == 0)
    msg.resize(msg.size() - suffix.size());
  std::string out = "pgw-actor: ";
  out += code ? to_string(*code) : "internal";
  out += ": " + msg + "\n";
  for (auto& [source, e] : detail->sources)
    out += "  " + describe(source, e) + "\n";
  return out;
}

std::optional<double> parse_number(const std::string& text) {
  // Decimal only, as the env keys are: strtod would also read hex ("0x10",
  // "0x1p4"), and no decimal number has an x.
  if (text.empty() || text.find_first_of("xX") != std::string::npos)
    return std::nullopt;
  char* end = nullptr;
  auto x = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(x))
    return std::nullopt;
  return x;
}

} // namespace pgw::cli
