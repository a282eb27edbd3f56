// The soak runner: drives N calls through one gateway with C callers, shows
// progress, and ends with a report whose invariants fail the run when broken.
// `pgw-actor soak` and the scenario runner (scenario_runner.cpp) both use it.

#include "apps/harness/soak.hpp"


#include "config/json_text.hpp"

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "apps/cli/status_publish.hpp"
#include "backends/telemetry.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pgw::cli {

namespace {

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

/// How long the report waits for the telemetry writer to commit or drop
/// the rows still queued (the sink's own shutdown grace is 2 s).
constexpr auto telemetry_flush_timeout = std::chrono::seconds(5);

/// What the callers saw: counters only, nothing per call.
struct tally {
  std::mutex mtx;
  /// Signalled on every answer and when a caller stops.
  std::condition_variable answered;
  latency_histogram latency_ms;
  std::map<std::string, int64_t> errors; ///< by error code
  std::map<std::string, int64_t> ok_by_source;
  int64_t ok = 0;
  int64_t answers = 0;
  int64_t made = 0;     ///< calls started, once the load is over
  int callers_left = 0; ///< callers still making calls
  int64_t hedges = 0;
  int64_t hedges_won = 0;
  double cost_usd = 0;
  int64_t priced = 0;
};

/// latency_histogram's buckets: the first starts at 1 µs, each is 0.1 %
/// wider than the one before, the last ends past 10^9 ms.
constexpr double histogram_min_ms = 1e-3;
constexpr double histogram_growth = 1.001;
const double histogram_log_growth = std::log(histogram_growth);
const size_t histogram_buckets = static_cast<size_t>(
  std::ceil(std::log(1e9 / histogram_min_ms) / histogram_log_growth)) + 1;

/// Reads the gateway status until every permit is settled and released and
/// nothing is in flight (attempts settle just after their call answers), or
/// two seconds pass.
/// The status once nothing is in flight and every permit is settled and
/// released, or after 5 s (settlements retried after a Redis outage need the
/// client's reconnect backoff, up to 2 s, plus the retry delay).
caf::expected<gateway_status> quiet_status(client& cl) {
  auto until = clock_type::now() + std::chrono::seconds(5);
  for (;;) {
    auto st = cl.status();
    if (!st)
      return st;
    bool quiet = st->calls_active == 0;
    // This node's permits: the backend's figures may be other nodes'.
    for (auto& s : st->sources)
      quiet = quiet && s.breaker.unavailable.empty() && s.in_flight == 0
              && permits_ended(s.limiter);
    if (quiet || clock_type::now() > until)
      return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The OCR image of soak call `n`: a PNG signature and the call number.
std::string soak_image(int64_t n) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + fmt::format("soak {}", n);
}

/// One call of the load by `params.operation`; an embeddings or OCR answer
/// comes back as a chat answer (source, stats, text) for the tally.
caf::expected<chat_response> soak_one_call(client& cl,
                                           const soak_params& params,
                                           int64_t n, int c) {
  if (params.operation == "embeddings") {
    embed_request req;
    for (int64_t i = 0; i < params.inputs; ++i)
      req.inputs.push_back(fmt::format("soak call {} input {}", n, i));
    req.deadline_s = params.deadline_s;
    auto inputs = params.embed_hook ? req.inputs : std::vector<std::string>{};
    auto res = cl.embed_async(std::move(req)).get();
    if (!res)
      return std::move(res.error());
    if (params.embed_hook)
      params.embed_hook(n, inputs, *res);
    chat_response out;
    out.source = res->stats.source;
    out.model = res->model;
    out.stats = res->stats;
    return out;
  }
  if (params.operation == "ocr_text" || params.operation == "ocr_layout") {
    ocr_request req;
    req.image = soak_image(n);
    req.layout = params.operation == "ocr_layout";
    req.deadline_s = params.deadline_s;
    auto res = cl.ocr_async(std::move(req)).get();
    if (!res)
      return std::move(res.error());
    chat_response out;
    out.content = std::move(res->text);
    out.source = res->source;
    out.model = res->model;
    out.stats = res->stats;
    return out;
  }
  chat_request req;
  req.messages.push_back(
    {"user", fmt::format("soak call {} from caller {}", n, c), {}});
  req.stream = params.stream;
  req.deadline_s = params.deadline_s;
  req.schema = params.schema;
  return cl.chat(std::move(req));
}

/// Records one answer (`ms` long) in the tally.
void record_answer(tally& t, const caf::expected<chat_response>& res,
                   double ms) {
  std::lock_guard<std::mutex> guard{t.mtx};
  ++t.answers;
  t.answered.notify_all();
  t.latency_ms.add(ms);
  if (res) {
    ++t.ok;
    ++t.ok_by_source[res->source];
    t.hedges += res->stats.hedges;
    t.hedges_won += res->stats.hedge_won ? 1 : 0;
    if (res->stats.cost_usd) {
      t.cost_usd += *res->stats.cost_usd;
      ++t.priced;
    }
  } else {
    auto code = code_of(res.error());
    ++t.errors[code ? to_string(*code) : "internal"];
  }
}

/// Shows progress until every caller stopped: one updating line on a
/// terminal, a plain line per interval else.
void show_progress(tally& t, const soak_params& params,
                   clock_type::time_point t0, bool tty) {
  const auto calls = params.calls;
  auto interval = std::chrono::duration<double>(
    params.progress_s ? *params.progress_s : tty ? 0.2 : 1.0);
  for (;;) {
    int64_t done, ok;
    bool stopped;
    {
      // Wakes at the interval, or at once when the last caller stops.
      std::unique_lock<std::mutex> guard{t.mtx};
      t.answered.wait_for(guard, interval,
                          [&] { return t.callers_left == 0; });
      done = t.answers;
      ok = t.ok;
      stopped = t.callers_left == 0;
    }
    auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    auto line = fmt::format("calls {}/{}  ok {:.2f}%  {:.0f} calls/s", done,
                            calls, done ? 100.0 * ok / done : 100.0,
                            secs > 0 ? done / secs : 0.0);
    if (tty)
      std::printf("\r%s   ", line.c_str());
    else
      std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (stopped)
      return;
  }
}

/// Runs the load: `params.concurrency` callers make `params.calls` calls
/// through `cl` (none starting after `params.seconds`), counted in `t`.
/// Returns the wall time (s).
double drive_load(client& cl, const soak_params& params,
                  const answer_hook& hook, tally& t) {
  const auto calls = params.calls;
  std::atomic<int64_t> next{0};
  auto t0 = clock_type::now();
  auto stop_at = clock_type::time_point::max();
  if (params.seconds)
    stop_at = t0 + std::chrono::duration_cast<clock_type::duration>(
                     std::chrono::duration<double>(*params.seconds));
  t.callers_left = params.concurrency;
  std::vector<std::thread> callers;
  for (int c = 0; c < params.concurrency; ++c) {
    callers.emplace_back([&, c] {
      for (;;) {
        auto start = clock_type::now();
        auto n = start < stop_at ? next.fetch_add(1) : calls;
        if (n >= calls)
          break;
        auto res = soak_one_call(cl, params, n, c);
        auto end = clock_type::now();
        auto ms = std::chrono::duration<double, std::milli>(end - start)
                    .count();
        if (hook)
          hook(n, std::chrono::duration<double>(start - t0).count(), res);
        record_answer(t, res, ms);
      }
      std::lock_guard<std::mutex> guard{t.mtx};
      --t.callers_left;
      t.answered.notify_all();
    });
  }
  bool tty = ::isatty(STDOUT_FILENO) != 0;
  show_progress(t, params, t0, tty);
  for (auto& th : callers)
    th.join();
  t.made = std::min(next.load(), calls);
  auto wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (tty)
    std::printf("\n");
  return wall_s;
}

/// The gateway status after the load, read as figures and invariants.
struct soak_figures {
  std::map<std::string, std::optional<bool>> invariants; ///< unset: unknown
  std::map<std::string, std::string> notes; ///< shown after an invariant
  int64_t attempts = 0;     ///< upstream attempts of every source
  int64_t rate_limited = 0; ///< of which 429s
  /// This node's permits whose lease ran out before their release, every
  /// source; unset when a limiter could not be read.
  std::optional<uint64_t> leases_expired;
  double p50 = 0, p95 = 0, p98 = 0, p99 = 0, p999 = 0; ///< latency, ms
};

soak_figures figures_of(const gateway_status& st, tally& t) {
  const auto calls = t.made;
  soak_figures f;
  for (auto& s : st.sources) {
    if (!s.limiter.unavailable.empty())
      std::fprintf(stderr, "pgw-actor soak: limiter of %s unreadable: %s\n",
                   s.name.c_str(), s.limiter.unavailable.c_str());
    for (auto& [name, n] : s.outcomes) {
      f.attempts += n;
      if (name == "rate_limited")
        f.rate_limited += n;
    }
  }
  auto p = node_permit_invariants(st);
  f.invariants["in_flight_zero"] = p.in_flight_zero;
  f.invariants["permits_settled_and_released"] = p.permits_ended;
  f.leases_expired = p.leases_expired;
  if (!p.unknown_why.empty()) {
    f.notes["permits_settled_and_released"] = p.unknown_why;
    if (!p.in_flight_zero)
      f.notes["in_flight_zero"] = p.unknown_why;
  } else if (p.leases_expired && *p.leases_expired > 0) {
    f.notes["permits_settled_and_released"]
      = fmt::format("{} ended by lease expiry", *p.leases_expired);
  }
  f.invariants["one_answer_per_call"]
    = t.answers == calls && st.calls_started == calls
      && st.calls_ok + st.calls_failed == calls;
  f.p50 = t.latency_ms.percentile(0.5);
  f.p95 = t.latency_ms.percentile(0.95);
  f.p98 = t.latency_ms.percentile(0.98);
  f.p99 = t.latency_ms.percentile(0.99);
  f.p999 = t.latency_ms.percentile(0.999);
  return f;
}

/// Prints the report; true when every invariant holds.
bool print_report(const soak_params& params, const tally& t,
                  const gateway_status& st, const soak_figures& f,
                  double wall_s) {
  const auto calls = t.made;
  auto rate = calls ? static_cast<double>(t.ok) / calls : 0.0;
  std::printf("\npgw soak report%s: scope %s, %lld calls, concurrency %d, "
              "%.1f s, %.0f calls/s\n",
              params.title.empty() ? "" : (" (" + params.title + ")").c_str(),
              params.scope.c_str(), static_cast<long long>(calls),
              params.concurrency, wall_s, calls / wall_s);
  if (calls < params.calls)
    std::printf("  stopped   after --seconds %g: %lld of the %lld calls "
                "asked were made\n",
                params.seconds.value_or(0), static_cast<long long>(calls),
                static_cast<long long>(params.calls));
  std::printf("  success   %lld / %lld = %.3f %%\n",
              static_cast<long long>(t.ok), static_cast<long long>(calls),
              100.0 * rate);
  for (auto& [code, n] : t.errors)
    std::printf("  failed    %-22s %lld\n", code.c_str(),
                static_cast<long long>(n));
  std::printf("  latency   p50 %.1f ms  p95 %.1f ms  p99 %.1f ms  p99.9 "
              "%.1f ms\n",
              f.p50, f.p95, f.p99, f.p999);
  std::printf("  attempts  %lld (%.3f per call), 429s seen %lld\n",
              static_cast<long long>(f.attempts),
              calls ? static_cast<double>(f.attempts) / calls : 0.0,
              static_cast<long long>(f.rate_limited));
  std::printf("  hedges    %lld fired, %lld won\n",
              static_cast<long long>(t.hedges),
              static_cast<long long>(t.hedges_won));
  if (t.priced > 0)
    std::printf("  cost      $%.6f for %lld priced answers (the winners; "
                "what losing legs cost is in telemetry)\n",
                t.cost_usd, static_cast<long long>(t.priced));
  else
    std::printf("  cost      n/a (no price for these models)\n");
  std::printf("  per source (share of attempts; outcomes; breaker):\n");
  for (auto& s : st.sources) {
    int64_t n = 0;
    std::string outcomes;
    for (auto& [name, k] : s.outcomes) {
      n += k;
      outcomes += fmt::format("{}={} ", name, k);
    }
    auto& b = s.breaker;
    std::printf("    %-12s %5.1f %%  %s| breaker %s, epoch %llu, opens %llu, "
                "probes %llu (%llu failed), streak %lld\n",
                s.name.c_str(), f.attempts ? 100.0 * n / f.attempts : 0.0,
                outcomes.c_str(), b.state.c_str(),
                static_cast<unsigned long long>(b.epoch),
                static_cast<unsigned long long>(b.opens),
                static_cast<unsigned long long>(b.probes),
                static_cast<unsigned long long>(b.probe_failures),
                static_cast<long long>(b.reopen_streak));
  }
  if (!st.telemetry.path.empty())
    std::printf("  telemetry %s: %llu rows written, %llu dropped%s\n",
                st.telemetry.path.c_str(),
                static_cast<unsigned long long>(st.telemetry.written),
                static_cast<unsigned long long>(st.telemetry.dropped),
                st.telemetry.healthy ? "" : " (database unwritable)");
  bool all_ok = true;
  std::printf("  invariants:\n");
  for (auto& [name, holds] : f.invariants) {
    all_ok = all_ok && holds == true;
    auto note = f.notes.find(name);
    if (!holds)
      std::printf("    %-30s unknown: %s\n", name.c_str(),
                  note == f.notes.end() ? "" : note->second.c_str());
    else
      std::printf("    %-30s %s%s\n", name.c_str(), *holds ? "ok" : "BROKEN",
                  note == f.notes.end()
                    ? ""
                    : (" (" + note->second + ")").c_str());
  }
  return all_ok;
}

/// What --json-report writes.
json::object report_json(const soak_params& params, const tally& t,
                         const gateway_status& st, const soak_figures& f,
                         double wall_s) {
  const auto calls = t.made;
  json::object by_source;
  for (auto& s : st.sources) {
    json::object o;
    for (auto& [name, k] : s.outcomes)
      o[name] = k;
    by_source[s.name] = std::move(o);
  }
  json::object invariants;
  for (auto& [name, holds] : f.invariants)
    invariants[name] = holds ? json::value(*holds) : json::value(nullptr);
  json::object breakers;
  for (auto& s : st.sources)
    breakers[s.name] = json::object{
      {"state", s.breaker.state},
      {"epoch", s.breaker.epoch},
      {"opens", s.breaker.opens},
      {"probes", s.breaker.probes},
      {"probe_failures", s.breaker.probe_failures},
      {"reopen_streak", s.breaker.reopen_streak},
    };
  json::object errors;
  for (auto& [code, n] : t.errors)
    errors[code] = n;
  json::object doc{
    {"calls", calls},
    {"calls_asked", params.calls},
    {"ok", t.ok},
    {"success_rate", calls ? static_cast<double>(t.ok) / calls : 0.0},
    {"attempts", f.attempts},
    {"rate_limited", f.rate_limited},
    {"leases_expired", f.leases_expired ? json::value(*f.leases_expired)
                                        : json::value(nullptr)},
    {"hedges", t.hedges},
    {"hedges_won", t.hedges_won},
    {"cost_usd", t.priced > 0 ? json::value(t.cost_usd) : json::value(nullptr)},
    {"errors", std::move(errors)},
    {"attempts_by_source", std::move(by_source)},
    {"breakers", std::move(breakers)},
    {"latency_ms", json::object{{"p50", round_us(f.p50)},
                                {"p95", round_us(f.p95)},
                                {"p98", round_us(f.p98)},
                                {"p99", round_us(f.p99)},
                                {"p999", round_us(f.p999)}}},
    {"wall_s", wall_s},
    {"invariants", std::move(invariants)},
  };
  if (!st.telemetry.path.empty())
    doc["telemetry"] = json::object{
      {"path", st.telemetry.path},
      {"queued", st.telemetry.queued},
      {"written", st.telemetry.written},
      {"dropped", st.telemetry.dropped},
      {"errors", st.telemetry.errors},
      {"healthy", st.telemetry.healthy},
    };
  return doc;
}

/// The gateway of the soak's scope (telemetry in ./pgw-telemetry.sqlite
/// unless PGW_TELEMETRY_DB says otherwise, SPEC §3), its status published
/// when asked; nullopt after saying why.
std::optional<gateway_actor> soak_gateway(caf::actor_system& sys,
                                          const settings& cfg,
                                          const soak_params& params,
                                          telemetry_sink_ptr& sink) {
  node_options gw_opts;
  gw_opts.default_telemetry_db = default_telemetry_db;
  gw_opts.telemetry_sink_out = &sink;
  auto gw = spawn_gateway(sys, cfg, params.scope, gw_opts);
  if (!gw) {
    std::fprintf(stderr, "pgw-actor soak: %s\n", describe(gw.error()).c_str());
    return std::nullopt;
  }
  if (params.publish) {
    auto& publish = *params.publish;
    auto port = publish_status(sys, *gw, publish);
    if (!port) {
      std::fprintf(stderr, "pgw-actor soak: cannot publish on %s: %s\n",
                   publish.c_str(), sys.render(port.error()).c_str());
      caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
      return std::nullopt;
    }
    std::printf("status published on %s:%u\n",
                publish.substr(0, publish.rfind(':')).c_str(), *port);
    std::fflush(stdout);
  }
  return *gw;
}

} // namespace

bool permits_ended(const limiter_status& st) {
  if (!st.unavailable.empty())
    return false;
  auto expired = st.own_expired;
  return st.own_pending == 0 && st.own_released + expired == st.own_acquired
         && st.own_settled <= st.own_acquired
         && st.own_acquired - st.own_settled <= expired;
}

permit_invariants node_permit_invariants(const gateway_status& st) {
  // This node's own figures only: a Redis limiter's counters and leases
  // are the whole namespace's (other nodes, earlier runs).
  permit_invariants out;
  bool in_flight_zero = st.calls_active == 0;
  bool ended = true;
  uint64_t expired = 0;
  for (auto& s : st.sources) {
    auto& l = s.limiter;
    in_flight_zero = in_flight_zero && s.in_flight == 0;
    if (!l.unavailable.empty()) {
      if (out.unknown_why.empty())
        out.unknown_why = fmt::format("limiter of {} unreadable: {}", s.name,
                                      l.unavailable);
      continue;
    }
    in_flight_zero = in_flight_zero
                     && l.own_acquired == l.own_released + l.own_expired;
    ended = ended && permits_ended(l);
    expired += l.own_expired;
  }
  if (out.unknown_why.empty()) {
    out.in_flight_zero = in_flight_zero;
    out.permits_ended = ended;
    out.leases_expired = expired;
  } else if (!in_flight_zero) {
    out.in_flight_zero = false; // what could be read is already broken
  }
  return out;
}

int run_soak(const settings& cfg, const soak_params& params, soak_result* out,
             const answer_hook& hook) {
  system_config sys_cfg{params.publish.has_value()};
  caf::actor_system sys{sys_cfg};
  telemetry_sink_ptr sink;
  auto gw = soak_gateway(sys, cfg, params, sink);
  if (!gw)
    return exit_usage;
  client cl{sys, *gw};
  tally t;
  auto wall_s = drive_load(cl, params, hook, t);
  auto st = quiet_status(cl);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  if (!st) {
    std::fprintf(stderr, "pgw-actor soak: status failed: %s\n",
                 describe(st.error()).c_str());
    return exit_other;
  }
  // The status saw every row queued (the calls are over); the report counts
  // them once the writer committed or dropped them all (an unwritable
  // database drops them at its next retry, within a second).
  if (sink) {
    sink->flush(telemetry_flush_timeout);
    st->telemetry = sink->status();
  }
  auto f = figures_of(*st, t);
  bool all_ok = print_report(params, t, *st, f, wall_s);
  if (out) {
    out->calls = t.made;
    out->ok = t.ok;
    out->wall_s = wall_s;
    out->ok_by_source = t.ok_by_source;
    out->status = *st;
    out->invariants = f.invariants;
    out->attempts = f.attempts;
    out->rate_limited = f.rate_limited;
    out->hedges = t.hedges;
    out->hedges_won = t.hedges_won;
    out->cost_usd = t.cost_usd;
    out->priced = t.priced;
    out->p50 = f.p50;
    out->p95 = f.p95;
    out->p98 = f.p98;
    out->p99 = f.p99;
    out->p999 = f.p999;
    out->report = report_json(params, t, *st, f, wall_s);
  }
  return all_ok ? exit_ok : exit_other;
}

void latency_histogram::add(double ms) {
  if (buckets_.empty())
    buckets_.assign(histogram_buckets, 0);
  size_t i = 0;
  if (ms > histogram_min_ms)
    i = std::min(histogram_buckets - 1,
                 static_cast<size_t>(std::log(ms / histogram_min_ms)
                                     / histogram_log_growth));
  ++buckets_[i];
  ++count_;
}

double latency_histogram::percentile(double q) const {
  if (count_ == 0)
    return 0;
  auto rank = std::min(count_ - 1,
                       static_cast<int64_t>(q * static_cast<double>(count_)));
  int64_t seen = 0;
  size_t i = 0;
  for (; i + 1 < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen > rank)
      break;
  }
  return histogram_min_ms
         * std::exp((static_cast<double>(i) + 0.5) * histogram_log_growth);
}

std::string report_path_problem(const std::string& path) {
  if (path.empty())
    return "the path is empty";
  struct stat sb {};
  if (::stat(path.c_str(), &sb) == 0) {
    if (S_ISDIR(sb.st_mode))
      return "it is a directory";
    // Opened without truncating (a regular file keeps its contents until
    // the report replaces them); anything else (a pipe, /dev/stdout) is
    // asked, not opened, so a reader sees no early end of file.
    if (!S_ISREG(sb.st_mode))
      return ::access(path.c_str(), W_OK) == 0 ? "" : std::strerror(errno);
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return std::strerror(errno);
    ::close(fd);
    return {};
  }
  if (errno != ENOENT)
    return std::strerror(errno);
  // Not there yet: create it to see that we can, and take it away again.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return std::strerror(errno);
  ::close(fd);
  ::unlink(path.c_str());
  return {};
}

int write_json_report(const std::string& path, const boost::json::value& doc) {
  std::ofstream out{path};
  out << json_text(doc) << "\n";
  if (out)
    return exit_ok;
  std::fprintf(stderr, "pgw-actor soak: cannot write %s\n", path.c_str());
  return exit_other;
}

} // namespace pgw::cli
