// A scenario's count expectations (hedges, 429s, simulator actions) are
// written for the file's own load.calls and scale with --calls; rates and
// breaker counters do not.

#include "apps/harness/scenario_checks.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace pgw;
using namespace pgw::cli;
namespace json = boost::json;

namespace {

scenario_file file_with(int64_t file_calls, int64_t calls,
                        const std::string& expect) {
  scenario_file f;
  f.file_calls = file_calls;
  f.calls = calls;
  f.expect = json::parse(expect).as_object();
  check_expectation_keys(f.expect, false);
  return f;
}

/// The verdicts of `f`'s expectations on a soak that saw `hedges` hedge
/// legs and `rate_limited` 429s over `f.calls` calls, all ok.
std::vector<check> verdicts(const scenario_file& f, int64_t hedges,
                            int64_t rate_limited) {
  scope_config scope;
  soak_result soak;
  soak.calls = soak.ok = f.calls;
  soak.hedges = hedges;
  soak.rate_limited = rate_limited;
  std::vector<log_row> log;
  std::vector<std::string> examples;
  check_context ctx{f, scope, soak, log, 0, 0, examples};
  return evaluate(ctx);
}

const check& verdict(const std::vector<check>& checks,
                     const std::string& name) {
  for (auto& c : checks)
    if (c.name == name)
      return c;
  FAIL("no check " << name);
  throw std::logic_error("unreachable");
}

} // namespace

TEST_CASE("scenario counts: scaled by calls / load.calls, a minimum rounded "
          "up and a maximum down") {
  auto f = file_with(2000, 2000, "{}");
  CHECK(scaled_count(f, 150, true) == 150);
  f.calls = 200;
  CHECK(scaled_count(f, 150, true) == 15);
  CHECK(scaled_count(f, 150, false) == 15);
  CHECK(scaled_count(f, 1, true) == 1);   // 0.1 rounds up
  CHECK(scaled_count(f, 1, false) == 0);  // ... and down
  CHECK(scaled_count(f, 0, false) == 0);
  f.calls = 20000;
  CHECK(scaled_count(f, 150, true) == 1500);
  CHECK(scaled_count(f, 3, false) == 30);
}

TEST_CASE("scenario counts: hedges_min, hedges_max and rate_limited_min "
          "follow --calls") {
  auto expect = R"({"hedges_min": 150, "hedges_max": 300,
                    "rate_limited_min": 20, "success_rate_min": 1.0})";
  // Fewer calls: 15 hedges and 2 429s are what 150 and 20 per 2000 mean.
  auto fewer = verdicts(file_with(2000, 200, expect), 15, 2);
  CHECK(verdict(fewer, "hedges_min").ok);
  CHECK(verdict(fewer, "rate_limited_min").ok);
  CHECK(verdict(fewer, "hedges_min").detail
        == "15 hedge legs fired (want >= 15, scaled to 200 calls)");
  CHECK_FALSE(verdict(verdicts(file_with(2000, 200, expect), 14, 2),
                      "hedges_min")
                .ok);
  // More calls: the maximum grows too, and a minimum met for the file's
  // load is not met for ten times the calls.
  auto more = verdicts(file_with(2000, 20000, expect), 2500, 200);
  CHECK(verdict(more, "hedges_max").ok);
  CHECK(verdict(more, "rate_limited_min").ok);
  auto vacuous = verdicts(file_with(2000, 20000, expect), 150, 20);
  CHECK_FALSE(verdict(vacuous, "hedges_min").ok);
  CHECK_FALSE(verdict(vacuous, "rate_limited_min").ok);
  // The file's own load: as written.
  auto own = verdicts(file_with(2000, 2000, expect), 150, 20);
  CHECK(verdict(own, "hedges_min").detail
        == "150 hedge legs fired (want >= 150)");
  CHECK(verdict(own, "rate_limited_min").ok);
}
