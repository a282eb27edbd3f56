#include "backends/breaker.hpp"

#include <doctest/doctest.h>

using namespace pgw;

TEST_CASE("feed_for: every outcome feeds the breaker as SPEC 4 says") {
  CHECK(feed_for(outcome::ok) == breaker_feed::success);
  CHECK(feed_for(outcome::result_invalid) == breaker_feed::success_no_count);
  CHECK(feed_for(outcome::transient) == breaker_feed::failure);
  CHECK(feed_for(outcome::source_dead) == breaker_feed::force_open);
  CHECK(feed_for(outcome::rate_limited) == breaker_feed::none);
  CHECK(feed_for(outcome::request_rejected) == breaker_feed::none);
  CHECK(feed_for(outcome::source_rejected) == breaker_feed::none);
  CHECK(feed_for(outcome::cancelled) == breaker_feed::none);
  CHECK(feed_for(outcome::hedge_cancelled) == breaker_feed::none);
}

TEST_CASE("effective_threshold: max of the threshold and twice the "
          "concurrency when one is set") {
  CHECK(effective_threshold(5, std::nullopt) == 5);
  CHECK(effective_threshold(5, int64_t{1}) == 5);
  CHECK(effective_threshold(5, int64_t{2}) == 5);
  CHECK(effective_threshold(5, int64_t{3}) == 6);
  CHECK(effective_threshold(3, int64_t{4}) == 8);
  CHECK(effective_threshold(20, int64_t{8}) == 20);
  CHECK(effective_threshold(1, int64_t{100}) == 200);
}
