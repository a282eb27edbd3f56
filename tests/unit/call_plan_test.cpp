/// `call_plan` without actors: each row sets a call up, feeds one event and
/// compares the decisions (written as short lines) with what it expects.

#include "actors/call_plan.hpp"
#include "actors/selector.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace pgw;
using namespace std::chrono_literals;

namespace {

using tp = call_plan::time_point;
using act = call_decision::act;

const tp t0 = tp{} + 1000s;

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

/// One decision as a short line: "admit hedge -a", "start 2 b hedge",
/// "timer retry 1 250ms", "stop 1 hedge_cancelled", "fail stalled", ...
std::string line(const call_decision& d) {
  switch (d.what) {
    case act::ask_admission: {
      std::string s = d.hedge ? "admit hedge" : "admit";
      if (!d.admission.exclude.empty())
        s += " -" + join(d.admission.exclude);
      if (!d.admission.demote.empty())
        s += " demote=" + join(d.admission.demote);
      return s;
    }
    case act::start_leg:
      return "start " + std::to_string(d.leg) + " " + d.admitted.source
             + (d.hedge ? " hedge" : "");
    case act::give_back:
      return "give_back " + d.admitted.source;
    case act::arm_timer:
      return std::string{"timer "} + to_string(d.timer) + " "
             + std::to_string(d.timer_id) + " "
             + std::to_string(
               std::chrono::duration_cast<std::chrono::milliseconds>(d.delay)
                 .count())
             + "ms";
    case act::commit:
      return "commit " + std::to_string(d.leg);
    case act::stop_leg:
      return "stop " + std::to_string(d.leg) + " " + to_string(d.label);
    case act::decide_later:
      return "decide " + std::to_string(d.leg);
    case act::succeed:
      return "succeed " + std::to_string(d.leg);
    case act::fail:
      return std::string{"fail "} + to_string(d.code);
  }
  return "?";
}

std::vector<std::string> lines(const call_decisions& ds) {
  std::vector<std::string> out;
  for (auto& d : ds)
    out.push_back(line(d));
  return out;
}

/// What a row changes in the scope and the call.
struct setup {
  int64_t max_attempts = 3;
  double stall_window_s = 300;
  std::optional<double> hedge_after_s;
  int64_t max_extra = 1;
  refusal_policy on_quota_full = refusal_policy::wait;
  refusal_policy on_circuit_open = refusal_policy::fail;
  int64_t max_reasks = 2;
  caf::optional<double> deadline_s;
  std::vector<std::string> sources{"a", "b", "c"};
  bool live = false;
  bool structured = false;
  bool lower_rung = false; ///< the structured hook moves the rung down
};

call_plan make(const setup& s) {
  auto scope = std::make_shared<scope_config>();
  scope->name = "LLM";
  scope->max_attempts = s.max_attempts;
  scope->stall_window_s = s.stall_window_s;
  scope->hedge.after_s = s.hedge_after_s;
  scope->hedge.max_extra = s.max_extra;
  scope->on_quota_full = s.on_quota_full;
  scope->on_circuit_open = s.on_circuit_open;
  scope->structured_max_reasks = s.max_reasks;
  call_plan_args a;
  a.call_id = "c1";
  a.scope = scope;
  for (auto& name : s.sources) {
    source_config src;
    src.scope = "LLM";
    src.name = name;
    src.model = "m-" + name;
    scope->sources.push_back(std::move(src));
  }
  a.live = s.live;
  a.structured = s.structured;
  a.deadline_s = s.deadline_s;
  a.seed = 7;
  a.cost = [](const plan_leg&) { return std::optional<double>{0.001}; };
  bool lower = s.lower_rung;
  a.lower_rung = [lower](const plan_leg& l) {
    return lower && l.result().kind == outcome::source_rejected;
  };
  a.note_mismatch = [](const plan_leg&) { return std::string{"- /x: bad"}; };
  return call_plan{std::move(a)};
}

admit_result ok(const std::string& source) {
  admit_result r;
  r.admitted = true;
  r.source = source;
  r.granted_permit.est = 100;
  return r;
}

admit_result refusal(admission_refusal why,
                     std::map<std::string, skip_reason> skipped = {},
                     double retry_in = 2) {
  admit_result r;
  r.refusal = why;
  r.skipped = skipped;
  for (auto& entry : skipped)
    r.retry_in[entry.first] = retry_in;
  r.retry_after_s = retry_in;
  return r;
}

attempt_result res(outcome kind, std::string reason = {},
                   int32_t status = 0) {
  attempt_result r;
  r.kind = kind;
  r.reason = reason.empty() ? to_string(kind) : std::move(reason);
  r.http_status = status;
  return r;
}

const attempt_result ok_res = res(outcome::ok, "ok", 200);
const attempt_result http_503 = res(outcome::transient, "http_503", 503);
const attempt_result http_429 = res(outcome::rate_limited, "http_429", 429);

/// A call that began and runs leg 1 on `a` (and, with `hedged`, leg 2 on
/// `b` as its hedge).
void running(call_plan& p, bool hedged = false) {
  p.start(t0, {});
  p.begin(t0);
  p.admitted(ok("a"), false, t0);
  if (hedged) {
    p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
    p.admitted(ok("b"), true, t0 + 2s);
  }
}

/// The first backoff of a call seeded 7 (the plan's jitter, drawn the same way).
std::string first_backoff() {
  std::mt19937_64 rng{7};
  std::uniform_real_distribution<double> u01{0.0, 1.0};
  auto s = backoff_delay(1, 0.5, 30, u01(rng));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::ceil<caf::timespan>(std::chrono::duration<double>(s)))
              .count();
  return "timer retry 1 " + std::to_string(ms) + "ms";
}

struct row {
  const char* name;
  setup s;
  /// Sets the call up and feeds the event whose decisions are compared.
  std::function<call_decisions(call_plan&)> event;
  std::vector<std::string> expected;
  /// A few words the failure's message must contain (when it fails).
  std::string message = {};
};

void run(const std::vector<row>& rows) {
  for (auto& r : rows) {
    CAPTURE(r.name);
    auto p = make(r.s);
    auto ds = r.event(p);
    CHECK(lines(ds) == r.expected);
    if (!r.message.empty()) {
      REQUIRE(!ds.empty());
      auto& f = ds.front().what == act::fail ? ds.front() : ds.back();
      CHECK(f.detail.message.find(r.message) != std::string::npos);
    }
  }
}

} // namespace

TEST_CASE("call_plan: start, admission and the first leg") {
  setup pinned;
  pinned.sources = {"a", "b"};
  setup hedged;
  hedged.hedge_after_s = 2;
  hedged.max_extra = 2;
  setup deadline;
  deadline.deadline_s = 10;
  run({
    {"begin arms the stall timer and admits", {},
     [](call_plan& p) { p.start(t0, {}); return p.begin(t0); },
     {"timer stall 0 300000ms", "admit"}},
    {"a deadline is armed for what is left of it", deadline,
     [](call_plan& p) { p.start(t0, {}); return p.begin(t0 + 3s); },
     {"timer stall 0 300000ms", "timer deadline 0 7000ms", "admit"}},
    {"a pinned call excludes every other source", pinned,
     [](call_plan& p) { p.start(t0, "b"); return p.begin(t0); },
     {"timer stall 0 300000ms", "admit -a"}},
    {"admitted: the primary starts", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.begin(t0);
       return p.admitted(ok("a"), false, t0);
     },
     {"start 1 a"}},
    {"HEDGE__MAX_EXTRA 2: leg k may start at k x AFTER_S", hedged,
     [](call_plan& p) {
       p.start(t0, {});
       p.begin(t0);
       return p.admitted(ok("a"), false, t0);
     },
     {"timer hedge 1 2000ms", "timer hedge 1 4000ms", "start 1 a"}},
    {"an unknown source is given back and fails the call", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.begin(t0);
       return p.admitted(ok("z"), false, t0);
     },
     {"give_back z", "fail internal"}, "unknown source"},
    {"an admission that comes after the call ended is given back", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.begin(t0);
       p.cancel();
       return p.admitted(ok("a"), false, t0);
     },
     {"give_back a"}},
    {"a down governance backend fails the call", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.begin(t0);
       return p.admission_error(make_error(error_code::governance_unavailable,
                                           "redis down"),
                                false);
     },
     {"fail governance_unavailable"}},
    {"any other admission error fails a primary", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.begin(t0);
       return p.admission_error(make_error(error_code::internal, "x"), false);
     },
     {"fail internal"}, "admission failed"},
    {"a cache miss begins the call", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.consulting_cache();
       return p.cache_answered(false, t0);
     },
     {"timer stall 0 300000ms", "admit"}},
    {"a cache error fails the call", {},
     [](call_plan& p) {
       p.start(t0, {});
       p.consulting_cache();
       return p.cache_failed(error_code::call_deadline_exceeded, "waited");
     },
     {"fail call_deadline_exceeded"}, "waited"},
  });
}

TEST_CASE("call_plan: refusals wait or fail by the scope's policies") {
  setup quota_fail;
  quota_fail.on_quota_full = refusal_policy::fail;
  setup circuit_wait;
  circuit_wait.on_circuit_open = refusal_policy::wait;
  setup short_window;
  short_window.stall_window_s = 1;
  setup one;
  one.sources = {"a"};
  setup short_deadline;
  short_deadline.deadline_s = 5;
  auto refused = [](admit_result r) {
    return [r](call_plan& p) {
      p.start(t0, {});
      p.begin(t0);
      return p.refused(r, false, t0);
    };
  };
  // Legs on a, b, ... end with `results`, then no source is left.
  auto no_source_left = [](std::vector<attempt_result> results) {
    return [results](call_plan& p) {
      running(p);
      for (size_t i = 0; i < results.size(); ++i) {
        auto source = std::string(1, static_cast<char>('a' + i));
        if (i > 0)
          p.admitted(ok(source), false, t0);
        p.leg_done(i + 1, results[i], t0);
      }
      return p.refused(refusal(admission_refusal::none), false, t0);
    };
  };
  auto too_large = res(outcome::source_rejected, "response_too_large", 200);
  auto redirect = res(outcome::source_rejected, "redirect", 302);
  redirect.error_message = "redirect to http://elsewhere/";
  run({
    {"no source left to try", {}, refused(refusal(admission_refusal::none)),
     {"fail retry_exhausted"}, "no source left to try"},
    {"quota full, ON_QUOTA_FULL=wait: wait for the earliest source", {},
     refused(refusal(admission_refusal::quota, {{"a", skip_reason::quota}})),
     {"timer retry 1 2000ms"}},
    {"quota full, ON_QUOTA_FULL=fail", quota_fail,
     refused(refusal(admission_refusal::quota, {{"a", skip_reason::quota}})),
     {"fail quota_exhausted"}, "no source may run"},
    {"every source cooling counts as quota (wait)", {},
     refused(refusal(admission_refusal::cooling,
                     {{"a", skip_reason::cooling}, {"b", skip_reason::cooling}},
                     3)),
     {"timer retry 1 3000ms"}},
    {"every source cooling, ON_QUOTA_FULL=fail", quota_fail,
     refused(refusal(admission_refusal::cooling, {{"a", skip_reason::cooling}})),
     {"fail quota_exhausted"}},
    {"open circuits, ON_CIRCUIT_OPEN=fail", {},
     refused(refusal(admission_refusal::circuit_open,
                     {{"a", skip_reason::circuit_open}})),
     {"fail circuit_open"}, "every source's circuit is open"},
    {"open circuits, ON_CIRCUIT_OPEN=wait", circuit_wait,
     refused(refusal(admission_refusal::circuit_open,
                     {{"a", skip_reason::circuit_open}}, 5)),
     {"timer retry 1 5000ms"}},
    {"a refusal that says now waits the shortest wait", {},
     refused(refusal(admission_refusal::quota, {{"a", skip_reason::quota}}, 0)),
     {"timer retry 1 1ms"}},
    {"a wait that outlasts the deadline fails now, saying when to come back",
     short_deadline,
     refused(refusal(admission_refusal::quota, {{"a", skip_reason::quota}}, 55)),
     {"fail quota_exhausted"}, "no source may run before the call's deadline (5 s)"},
    {"an open circuit that outlasts the deadline fails now", [] {
       setup s;
       s.deadline_s = 5;
       s.on_circuit_open = refusal_policy::wait;
       return s;
     }(),
     refused(refusal(admission_refusal::circuit_open,
                     {{"a", skip_reason::circuit_open}}, 30)),
     {"fail circuit_open"}, "the earliest frees up in 30.0 s"},
    {"a wait within the deadline waits", short_deadline,
     refused(refusal(admission_refusal::quota, {{"a", skip_reason::quota}}, 4)),
     {"timer retry 1 4000ms"}},
    {"a wait that crosses the stall window ends the call stalled",
     short_window,
     refused(refusal(admission_refusal::quota, {{"a", skip_reason::quota}}, 2)),
     {"fail stalled"}, "STALL_WINDOW_S"},
    {"every source dead: unusable", one,
     [](call_plan& p) {
       running(p);
       p.leg_done(1, res(outcome::source_dead, "unauthorized", 401), t0);
       return p.refused(refusal(admission_refusal::none), false, t0);
     },
     {"fail retry_exhausted"}, "every source is unusable"},
    {"every source rejecting the request", {},
     [](call_plan& p) {
       running(p);
       p.leg_done(1, res(outcome::source_rejected, "http_400", 400), t0);
       return p.refused(refusal(admission_refusal::none), false, t0);
     },
     {"fail request_rejected"}, "every source rejected the request"},
    {"every answer over MAX_RESPONSE_BYTES: the upstream's fault", {},
     no_source_left({too_large}), {"fail result_invalid"},
     "no source gave a usable answer: a: response_too_large (200)"},
    {"every source redirecting: the upstream's fault", {},
     no_source_left({redirect}), {"fail result_invalid"},
     "a: redirect (302 \"redirect to http://elsewhere/\")"},
    {"no socket left in this process: unavailable, not the caller's fault",
     {}, no_source_left({res(outcome::source_rejected, "local_resource_exhausted")}),
     {"fail retry_exhausted"}, "this process cannot open sockets"},
    {"a rejection about the request outweighs an unusable answer", {},
     no_source_left(
       {res(outcome::source_rejected, "context_length_exceeded", 400),
        too_large}),
     {"fail request_rejected"}, "every source rejected the request"},
  });
  SUBCASE("the unusable answer's status is the error's upstream status") {
    auto p = make({});
    running(p);
    p.leg_done(1, too_large, t0);
    auto ds = p.refused(refusal(admission_refusal::none), false, t0);
    REQUIRE(ds.size() == 1);
    CHECK(ds[0].code == error_code::result_invalid);
    CHECK(ds[0].detail.upstream_status == 200);
    CHECK(ds[0].detail.sources.at("a").reason == "response_too_large");
  }
}

TEST_CASE("call_plan: a leg's outcome and the failed round") {
  setup one_attempt;
  one_attempt.max_attempts = 1;
  setup one;
  one.sources = {"a"};
  auto done = [](attempt_result r) {
    return [r](call_plan& p) {
      running(p);
      return p.leg_done(1, r, t0 + 1s);
    };
  };
  run({
    {"ok wins", {}, done(ok_res), {"succeed 1"}},
    {"a 503 round backs off with the seeded jitter", {}, done(http_503),
     {first_backoff()}},
    {"the only attempt of the budget failed", one_attempt, done(http_503),
     {"fail retry_exhausted"}, "the only attempt"},
    {"a 429 round moves on at once without budget", {}, done(http_429),
     {"admit"}},
    {"request_rejected ends the call", {},
     done(res(outcome::request_rejected, "http_400", 400)),
     {"fail request_rejected"}, "rejected by source a"},
    {"source_rejected excludes the source, no budget", {},
     done(res(outcome::source_rejected, "http_404", 404)), {"admit -a"}},
    {"source_dead: the only source is excluded, admit at once", one,
     done(res(outcome::source_dead, "unauthorized", 401)), {"admit -a"}},
    {"a time-costly failure demotes its source at once", {},
     [](call_plan& p) {
       running(p);
       p.leg_done(1, res(outcome::transient, "ttft_timeout"), t0 + 1s);
       return p.timer_fired(timer_kind::retry, 1, t0 + 2s);
     },
     {"admit demote=a"}},
    {"an attempt that died without an outcome is a transient failure", {},
     [](call_plan& p) {
       running(p);
       return p.leg_down(1, t0 + 1s);
     },
     {first_backoff()}},
    {"a stale retry timer does nothing", {},
     [](call_plan& p) {
       running(p);
       p.leg_done(1, http_503, t0 + 1s);
       return p.timer_fired(timer_kind::retry, 0, t0 + 2s);
     },
     {}},
  });
  SUBCASE("a 429 round spends no budget, a 503 round one unit") {
    auto p = make({});
    running(p);
    p.leg_done(1, http_429, t0);
    CHECK(p.budget_used() == 0);
    p.admitted(ok("b"), false, t0);
    p.leg_done(2, http_503, t0);
    CHECK(p.budget_used() == 1);
    CHECK(p.failures().at("b") == 1);
    CHECK(p.attempts() == 2);
  }
}

TEST_CASE("call_plan: hedging") {
  setup h;
  h.hedge_after_s = 2;
  setup h2 = h;
  h2.max_extra = 2;
  run({
    {"no first token by AFTER_S: a hedge is admitted without the round's source",
     h,
     [](call_plan& p) {
       running(p);
       return p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
     },
     {"admit hedge -a"}},
    {"the hedge starts on the admitted source", h,
     [](call_plan& p) {
       running(p);
       p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
       return p.admitted(ok("b"), true, t0 + 2s);
     },
     {"start 2 b hedge"}},
    {"a first token disarms the hedge", h,
     [](call_plan& p) {
       running(p);
       p.first_token(1, t0 + 1s);
       return p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
     },
     {}},
    {"a hedge timer of an earlier round is ignored", h,
     [](call_plan& p) {
       running(p);
       p.leg_done(1, http_429, t0 + 1s);
       p.admitted(ok("b"), false, t0 + 1s);
       return p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
     },
     {}},
    {"MAX_EXTRA 1: no second hedge", h,
     [](call_plan& p) {
       running(p, true);
       return p.timer_fired(timer_kind::hedge, 1, t0 + 4s);
     },
     {}},
    {"MAX_EXTRA 2: the second extra leg avoids both used sources", h2,
     [](call_plan& p) {
       running(p, true);
       return p.timer_fired(timer_kind::hedge, 1, t0 + 4s);
     },
     {"admit hedge -a,b"}},
    {"no candidate: no hedge, silently", h,
     [](call_plan& p) {
       running(p);
       p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
       return p.refused(refusal(admission_refusal::quota,
                                {{"b", skip_reason::quota}}),
                        true, t0 + 2s);
     },
     {}},
    {"a hedge admission after the round got a token is given back", h,
     [](call_plan& p) {
       running(p);
       p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
       p.first_token(1, t0 + 2s);
       return p.admitted(ok("b"), true, t0 + 2s);
     },
     {"give_back b"}},
    {"a hedge's other admission errors are ignored", h,
     [](call_plan& p) {
       running(p);
       p.timer_fired(timer_kind::hedge, 1, t0 + 2s);
       return p.admission_error(make_error(error_code::internal, "x"), true);
     },
     {}},
    {"a hedge that wins while the primary runs waits for the mailbox", h,
     [](call_plan& p) {
       running(p, true);
       return p.leg_done(2, ok_res, t0 + 3s);
     },
     {"decide 2"}},
    {"the decided hedge wins, the primary is stopped hedge_cancelled", h,
     [](call_plan& p) {
       running(p, true);
       p.leg_done(2, ok_res, t0 + 3s);
       return p.decide(2);
     },
     {"succeed 2", "stop 1 hedge_cancelled"}},
    {"a primary that finishes first wins, the hedge is stopped", h,
     [](call_plan& p) {
       running(p, true);
       return p.leg_done(1, ok_res, t0 + 3s);
     },
     {"succeed 1", "stop 2 hedge_cancelled"}},
    {"a simultaneous finish goes to the primary", h,
     [](call_plan& p) {
       running(p, true);
       p.leg_done(2, ok_res, t0 + 3s);
       p.leg_done(1, ok_res, t0 + 3s);
       return p.decide(2);
     },
     {}},
    {"a failed leg waits for the other", h,
     [](call_plan& p) {
       running(p, true);
       return p.leg_done(2, http_503, t0 + 3s);
     },
     {}},
    {"then the other's success wins", h,
     [](call_plan& p) {
       running(p, true);
       p.leg_done(2, http_503, t0 + 3s);
       return p.leg_done(1, ok_res, t0 + 4s);
     },
     {"succeed 1"}},
    {"both legs failing is one failed round", h,
     [](call_plan& p) {
       running(p, true);
       p.leg_done(2, http_503, t0 + 3s);
       return p.leg_done(1, http_503, t0 + 4s);
     },
     {first_backoff()}},
    {"both legs 429: no budget, admit at once", h,
     [](call_plan& p) {
       running(p, true);
       p.leg_done(2, http_429, t0 + 3s);
       return p.leg_done(1, http_429, t0 + 4s);
     },
     {"admit"}},
    {"the caller's cancel stops both legs", h,
     [](call_plan& p) {
       running(p, true);
       return p.cancel();
     },
     {"fail cancelled", "stop 1 cancelled", "stop 2 cancelled"},
     "the caller cancelled"},
    {"the deadline cuts the whole hedged tree", h,
     [](call_plan& p) {
       running(p, true);
       return p.timer_fired(timer_kind::deadline, 0, t0 + 5s);
     },
     {"fail call_deadline_exceeded", "stop 1 cancelled", "stop 2 cancelled"},
     "in flight 3.0 s, no first token (hedge)"},
  });
  SUBCASE("both legs 429 spend no budget, 429 plus a 503 one unit") {
    for (auto& [second, budget] :
         std::vector<std::pair<attempt_result, int64_t>>{{http_429, 0},
                                                         {http_503, 1}}) {
      auto p = make(h);
      running(p, true);
      p.leg_done(2, second, t0 + 3s);
      p.leg_done(1, http_429, t0 + 3s);
      CHECK(p.budget_used() == budget);
      CHECK(p.hedges() == 1);
    }
  }
}

TEST_CASE("call_plan: stall window and deadline") {
  setup w;
  w.stall_window_s = 10;
  run({
    {"no progress within the window: stalled", w,
     [](call_plan& p) {
       running(p);
       return p.timer_fired(timer_kind::stall, 0, t0 + 10s);
     },
     {"fail stalled", "stop 1 cancelled"}, "no progress within STALL_WINDOW_S"},
    {"progress re-arms the rest of the window", w,
     [](call_plan& p) {
       running(p);
       p.leg_done(1, http_503, t0 + 4s);
       return p.timer_fired(timer_kind::stall, 0, t0 + 10s);
     },
     {"timer stall 0 4000ms"}},
    {"a stream producing tokens is progress", w,
     [](call_plan& p) {
       running(p);
       p.first_token(1, t0 + 1s);
       return p.timer_fired(timer_kind::stall, 0, t0 + 10s);
     },
     {"timer stall 0 10000ms"}},
    {"the deadline during a backoff wait", {},
     [](call_plan& p) {
       running(p);
       p.leg_done(1, http_503, t0 + 1s);
       return p.timer_fired(timer_kind::deadline, 0, t0 + 2s);
     },
     {"fail call_deadline_exceeded"}, "a: http_503"},
    {"a deadline after the call ended does nothing", {},
     [](call_plan& p) {
       running(p);
       p.leg_done(1, ok_res, t0 + 1s);
       return p.timer_fired(timer_kind::deadline, 0, t0 + 2s);
     },
     {}},
  });
}

TEST_CASE("call_plan: live streaming commits at the first token") {
  setup live;
  live.live = true;
  live.hedge_after_s = 2;
  setup buffered = live;
  buffered.live = false;
  run({
    {"the first token commits the call", live,
     [](call_plan& p) {
       running(p);
       return p.first_token(1, t0 + 1s);
     },
     {"commit 1"}},
    {"the hedge's first token commits it and stops the primary", live,
     [](call_plan& p) {
       running(p, true);
       return p.first_token(2, t0 + 3s);
     },
     {"commit 2", "stop 1 hedge_cancelled"}},
    {"a buffered call does not commit", buffered,
     [](call_plan& p) {
       running(p);
       return p.first_token(1, t0 + 1s);
     },
     {}},
    {"a failure before the first token fails over", live,
     [](call_plan& p) {
       running(p);
       return p.leg_done(1, res(outcome::transient, "stream_cut"), t0 + 1s);
     },
     {first_backoff()}},
    {"a failure after the commit is stream_interrupted", live,
     [](call_plan& p) {
       running(p);
       p.first_token(1, t0 + 1s);
       return p.leg_done(1, res(outcome::transient, "stream_cut"), t0 + 2s);
     },
     {"fail stream_interrupted"},
     "broke after it began (stream_cut, 0 bytes sent, usage so far not "
     "reported)"},
    {"the deadline after the commit is stream_interrupted", live,
     [](call_plan& p) {
       running(p);
       p.first_token(1, t0 + 1s);
       return p.timer_fired(timer_kind::deadline, 0, t0 + 2s);
     },
     {"fail stream_interrupted", "stop 1 cancelled"},
     "call_deadline_exceeded"},
    {"a cancel after the commit stays cancelled", live,
     [](call_plan& p) {
       running(p);
       p.first_token(1, t0 + 1s);
       return p.cancel();
     },
     {"fail cancelled", "stop 1 cancelled"}},
    {"the committed leg's success wins", live,
     [](call_plan& p) {
       running(p);
       p.first_token(1, t0 + 1s);
       return p.leg_done(1, ok_res, t0 + 2s);
     },
     {"succeed 1"}},
  });
  SUBCASE("only the committed leg's deltas are forwarded, none once decided") {
    auto p = make(live);
    running(p, true);
    CHECK(!p.forwards_delta(1));
    p.first_token(2, t0 + 3s);
    CHECK(!p.forwards_delta(1));
    CHECK(p.forwards_delta(2));
    p.add_streamed(5);
    auto cut = res(outcome::transient, "stream_cut");
    cut.usage_reported = true; // the usage chunk came before the cut
    cut.prompt_tokens = 3;
    cut.completion_tokens = 4;
    auto ds = p.leg_done(2, cut, t0 + 4s);
    REQUIRE(ds.size() == 1);
    CHECK(ds[0].detail.stream_source == "b");
    CHECK(ds[0].detail.streamed_bytes == 5);
    CHECK(ds[0].detail.prompt_tokens == 3);
    CHECK(ds[0].detail.completion_tokens == 4);
    CHECK(ds[0].detail.message.find("(stream_cut, 5 bytes sent, usage so far "
                                    "3 prompt + 4 completion tokens)")
          != std::string::npos);
    CHECK(ds[0].detail.spent.empty()); // its usage is reported, not estimated
    CHECK(!p.forwards_delta(2));
  }
  SUBCASE("a cut stream without usage counts its permit's estimate") {
    auto p = make(live);
    running(p, true);
    p.first_token(2, t0 + 3s);
    auto cut = res(outcome::transient, "stream_cut");
    cut.upstream_reached = true; // as every cut stream's
    auto ds = p.leg_done(2, cut, t0 + 4s);
    REQUIRE(ds.size() == 1);
    CHECK(!ds[0].detail.usage_reported);
    REQUIRE(ds[0].detail.spent.count("b") == 1);
    CHECK(ds[0].detail.spent.at("b").estimated_tokens == 100);
    CHECK(ds[0].detail.spent.at("b").prompt_tokens == 0);
  }
  SUBCASE("a cancel after the commit names the committed source") {
    auto p = make(live);
    running(p, true);
    p.first_token(2, t0 + 3s);
    p.add_streamed(7);
    auto ds = p.cancel();
    REQUIRE(!ds.empty());
    CHECK(ds[0].code == error_code::cancelled);
    CHECK(ds[0].detail.stream_source == "b");
    CHECK(ds[0].detail.streamed_bytes == 7);
    REQUIRE(ds[0].detail.spent.count("b") == 1);
    CHECK(ds[0].detail.spent.at("b").estimated_tokens == 100);
  }
  SUBCASE("a cancel before the commit names no source") {
    auto p = make(live);
    running(p, true);
    auto ds = p.cancel();
    REQUIRE(!ds.empty());
    CHECK(ds[0].code == error_code::cancelled);
    CHECK(ds[0].detail.stream_source.empty());
  }
}

TEST_CASE("call_plan: structured output re-asks and downgrades") {
  setup st;
  st.structured = true;
  setup st_once = st;
  st_once.max_reasks = 0;
  setup down = st;
  down.lower_rung = true;
  auto mismatch = res(outcome::result_invalid, "schema_mismatch", 200);
  run({
    {"a mismatch is re-asked at once", st,
     [mismatch](call_plan& p) {
       running(p);
       return p.leg_done(1, mismatch, t0 + 1s);
     },
     {"admit"}},
    {"after MAX_REASKS the call is result_invalid with the errors", st_once,
     [mismatch](call_plan& p) {
       running(p);
       return p.leg_done(1, mismatch, t0 + 1s);
     },
     {"fail result_invalid"}, "after 0 re-asks; last validation errors: - /x: bad"},
    {"a lowered rung runs again at once, without budget", down,
     [](call_plan& p) {
       running(p);
       return p.leg_done(1, res(outcome::source_rejected, "http_400", 400),
                         t0 + 1s);
     },
     {"admit"}},
  });
}

TEST_CASE("call_plan: delivery waits for every leg and every reply") {
  auto p = make({});
  running(p);
  p.leg_done(1, ok_res, t0 + 1s);
  CHECK(p.finishing());
  CHECK(!p.ready_to_deliver()); // the attempt is still there
  p.leg_down(1, t0 + 1s);
  CHECK(p.ready_to_deliver());
  CHECK(!p.awaiting_reply());

  auto q = make({});
  q.start(t0, {});
  q.begin(t0);
  q.cancel();
  CHECK(q.ready_to_deliver());
  CHECK(q.awaiting_reply()); // the admission may still grant a permit
  CHECK(lines(q.admitted(ok("a"), false, t0)) == std::vector<std::string>{"give_back a"});
  CHECK(!q.awaiting_reply());

  auto c = make({});
  c.start(t0, {});
  c.consulting_cache();
  CHECK(lines(c.cache_answered(true, t0)).empty());
  CHECK(c.ready_to_deliver());
}

TEST_CASE("call_plan: losers are costed, the winner is not") {
  setup h;
  h.hedge_after_s = 2;
  auto p = make(h);
  running(p, true);
  p.leg_done(1, ok_res, t0 + 3s); // leg 2 is stopped hedge_cancelled
  CHECK(p.losers_cost_usd() == doctest::Approx(0.001));
  CHECK(p.leg(2)->label == outcome::hedge_cancelled);
  // The loser never reports usage: its permit's estimate is the work it
  // may have been billed for, counted (and priced) as estimated, by source.
  REQUIRE(p.unreturned().size() == 1);
  auto& w = p.unreturned().at("b");
  CHECK(w.estimated_tokens == 100);
  CHECK(w.prompt_tokens == 0);
  CHECK(w.completion_tokens == 0);
  REQUIRE(w.cost_usd);
  CHECK(*w.cost_usd == doctest::Approx(0.001));
}

TEST_CASE("call_plan: legs cancelled with a failed call count their "
          "estimates, a finished loser what it reported") {
  setup h;
  h.hedge_after_s = 2;
  h.deadline_s = 5;
  auto failed = make(h);
  running(failed, true);
  failed.timer_fired(timer_kind::deadline, 0, t0 + 5s);
  CHECK(failed.leg(1)->label == outcome::cancelled);
  CHECK(failed.leg(2)->label == outcome::cancelled);
  // Both requests ran: no usage comes, each permit settles its estimate.
  REQUIRE(failed.unreturned().size() == 2);
  CHECK(failed.unreturned().at("a").estimated_tokens == 100);
  CHECK(failed.unreturned().at("b").estimated_tokens == 100);
  // The primary's answer was refused while its hedge ran; the hedge wins:
  // the refused answer's reported usage counts, no estimate.
  auto race = make(h);
  running(race, true);
  auto refused = res(outcome::result_invalid, "empty_answer", 200);
  refused.usage_reported = true;
  refused.prompt_tokens = 12;
  refused.completion_tokens = 5;
  race.leg_done(1, refused, t0 + 2500ms);
  race.leg_done(2, ok_res, t0 + 3s);
  REQUIRE(race.unreturned().size() == 1);
  auto& w = race.unreturned().at("a");
  CHECK(w.prompt_tokens == 12);
  CHECK(w.completion_tokens == 5);
  CHECK(w.estimated_tokens == 0);
}
