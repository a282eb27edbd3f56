#include "actors/settlement.hpp"

#include <doctest/doctest.h>

using namespace pgw;

namespace {

attempt_result result(outcome kind, bool usage, int64_t prompt = 0,
                      int64_t completion = 0, bool reached = true) {
  attempt_result r;
  r.kind = kind;
  r.usage_reported = usage;
  r.prompt_tokens = prompt;
  r.completion_tokens = completion;
  r.upstream_reached = reached;
  return r;
}

} // namespace

TEST_CASE("settlement follows the SPEC 8 table") {
  const int64_t est = 1000;
  // ok with reported usage (even 0) → actual
  CHECK(settle_amount(result(outcome::ok, true, 30, 12), est) == 42);
  CHECK(settle_amount(result(outcome::ok, true, 0, 0), est) == 0);
  // ok without usage → est
  CHECK(settle_amount(result(outcome::ok, false), est) == est);
  // rejections and dead sources generated nothing
  CHECK(settle_amount(result(outcome::request_rejected, false), est) == 0);
  CHECK(settle_amount(result(outcome::source_rejected, false), est) == 0);
  CHECK(settle_amount(result(outcome::source_dead, false), est) == 0);
  CHECK(settle_amount(result(outcome::rate_limited, false), est) == 0);
  // result_invalid: actual if reported, else est
  CHECK(settle_amount(result(outcome::result_invalid, true, 5, 7), est) == 12);
  CHECK(settle_amount(result(outcome::result_invalid, false), est) == est);
  // transient: est once the upstream was reached, 0 before sending
  CHECK(settle_amount(result(outcome::transient, false, 0, 0, true), est)
        == est);
  CHECK(settle_amount(result(outcome::transient, false, 0, 0, false), est)
        == 0);
  // cancelled in flight → est; before anything was sent → 0
  CHECK(settle_cancelled(true, est) == est);
  CHECK(settle_cancelled(false, est) == 0);
}

TEST_CASE("settled_work: usable usage as reported, else what settled by "
          "estimate, none when nothing settled") {
  const int64_t est = 1000;
  auto work = [&](attempt_result r) { return settled_work(&r, est); };
  auto reported = work(result(outcome::ok, true, 30, 12));
  REQUIRE(reported);
  CHECK(reported->prompt_tokens == 30);
  CHECK(reported->completion_tokens == 12);
  CHECK(reported->estimated_tokens == 0);
  // Usage that settle_amount refuses (a negative count) is an estimate.
  auto refused = work(result(outcome::ok, true, -1, 12));
  REQUIRE(refused);
  CHECK(refused->prompt_tokens == 0);
  CHECK(refused->estimated_tokens == est);
  // A 503 after sending settles est; a connect failure and a 429 settle 0.
  auto sent = work(result(outcome::transient, false));
  REQUIRE(sent);
  CHECK(sent->estimated_tokens == est);
  CHECK(!work(result(outcome::transient, false, 0, 0, false)));
  CHECK(!work(result(outcome::rate_limited, false)));
  // Stopped before its outcome: counted as started.
  auto stopped = settled_work(nullptr, est);
  REQUIRE(stopped);
  CHECK(stopped->estimated_tokens == est);
}
