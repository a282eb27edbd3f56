#include "actors/selector.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

using namespace pgw;

namespace {

std::vector<selector::source_entry> three() {
  return {{"a", 0}, {"b", 0}, {"c", 0}};
}

} // namespace

TEST_CASE("EWMA starts at 1, feeds ok=1 and failures=0 with alpha 0.2") {
  selector sel{selector::kind::health_aware, three()};
  CHECK(sel.ewma(0) == doctest::Approx(1.0));
  sel.feed(0, outcome::transient);
  CHECK(sel.ewma(0) == doctest::Approx(0.8));
  sel.feed(0, outcome::rate_limited);
  CHECK(sel.ewma(0) == doctest::Approx(0.64));
  sel.feed(0, outcome::source_dead);
  CHECK(sel.ewma(0) == doctest::Approx(0.512));
  sel.feed(0, outcome::ok);
  CHECK(sel.ewma(0) == doctest::Approx(0.6096));
}

TEST_CASE("outcomes other than ok/transient/dead/rate_limited are not fed") {
  selector sel{selector::kind::health_aware, three()};
  for (auto x : {outcome::request_rejected, outcome::source_rejected,
                 outcome::result_invalid, outcome::cancelled,
                 outcome::hedge_cancelled})
    sel.feed(1, x);
  CHECK(sel.ewma(1) == doctest::Approx(1.0));
}

TEST_CASE("score = max(ewma, 0.05) / (1 + in-flight)") {
  selector sel{selector::kind::health_aware, three()};
  CHECK(sel.score(0, 0) == doctest::Approx(1.0));
  CHECK(sel.score(0, 3) == doctest::Approx(0.25));
  for (int i = 0; i < 100; ++i)
    sel.feed(2, outcome::transient);
  CHECK(sel.ewma(2) < 0.05);
  CHECK(sel.score(2, 0) == doctest::Approx(0.05));
  CHECK(sel.score(2, 1) == doctest::Approx(0.025));
}

TEST_CASE("health_aware: a sick source heads only when drawn twice (1/n^2), and stays a candidate") {
  selector sel{selector::kind::health_aware, three()};
  for (int i = 0; i < 50; ++i)
    sel.feed(0, outcome::transient);
  std::mt19937_64 rng{7};
  std::map<size_t, int> heads;
  std::vector<int32_t> in_flight{0, 0, 0};
  for (int i = 0; i < 9000; ++i) {
    auto order = sel.order(in_flight, rng);
    REQUIRE(order.size() == 3);
    CHECK(std::find(order.begin(), order.end(), size_t{0}) != order.end());
    ++heads[order[0]];
  }
  // Both draws hit the sick source with probability 1/9: exploration, so a
  // recovered source can earn its score back.
  CHECK(heads[0] > 800);
  CHECK(heads[0] < 1200);
  CHECK(heads[1] > 3500);
  CHECK(heads[2] > 3500);
}

TEST_CASE("health_aware: a recovered source earns its score back") {
  selector sel{selector::kind::health_aware, three()};
  for (int i = 0; i < 20; ++i)
    sel.feed(0, outcome::transient);
  std::mt19937_64 rng{11};
  std::vector<int32_t> in_flight{0, 0, 0};
  // Source 0 is healthy again: every time it heads an order it succeeds.
  for (int i = 0; i < 300; ++i)
    if (sel.order(in_flight, rng)[0] == 0)
      sel.feed(0, outcome::ok);
  CHECK(sel.ewma(0) > 0.9);
}

TEST_CASE("health_aware: in-flight load spreads the head") {
  selector sel{selector::kind::health_aware, three()};
  std::mt19937_64 rng{1};
  // b is busy: it heads only when drawn twice (1/9).
  std::vector<int32_t> in_flight{0, 4, 0};
  std::map<size_t, int> heads;
  for (int i = 0; i < 9000; ++i)
    ++heads[sel.order(in_flight, rng)[0]];
  CHECK(heads[1] < 1200);
  CHECK(heads[0] > 3500);
  CHECK(heads[2] > 3500);
}

TEST_CASE("health_aware: the same seed gives the same orders") {
  selector s1{selector::kind::health_aware, three()};
  selector s2{selector::kind::health_aware, three()};
  std::mt19937_64 r1{99}, r2{99};
  std::vector<int32_t> in_flight{0, 0, 0};
  for (int i = 0; i < 20; ++i)
    CHECK(s1.order(in_flight, r1) == s2.order(in_flight, r2));
}

TEST_CASE("round_robin rotates, priority sorts by PRIORITY then name") {
  std::mt19937_64 rng{1};
  selector rr{selector::kind::round_robin, three()};
  CHECK(rr.order({}, rng) == std::vector<size_t>{0, 1, 2});
  CHECK(rr.order({}, rng) == std::vector<size_t>{1, 2, 0});
  CHECK(rr.order({}, rng) == std::vector<size_t>{2, 0, 1});
  selector prio{selector::kind::priority, {{"z", 1}, {"b", 2}, {"a", 1}}};
  CHECK(prio.order({}, rng) == std::vector<size_t>{2, 0, 1});
}

TEST_CASE("demote_failed moves sources with >= 2 failures to the tail, stably") {
  std::vector<size_t> order{0, 1, 2, 3};
  demote_failed(order, {2, 0, 5, 1});
  CHECK(order == std::vector<size_t>{1, 3, 0, 2});
}

TEST_CASE("backoff: full jitter under min(max, base * 2^(round-1))") {
  CHECK(backoff_delay(1, 0.5, 30, 0.999) == doctest::Approx(0.4995));
  CHECK(backoff_delay(3, 0.5, 30, 0.5) == doctest::Approx(1.0));
  CHECK(backoff_delay(10, 0.5, 30, 0.999) == doctest::Approx(29.97));
  CHECK(backoff_delay(200, 0.5, 30, 0.5) == doctest::Approx(15));
  CHECK(backoff_delay(4, 0.5, 30, 0.0) == 0);
  CHECK(backoff_delay(0, 0.5, 30, 0.9) == 0);
}

TEST_CASE("health_aware: with equal scores the head is spread evenly") {
  selector sel{selector::kind::health_aware, three()};
  std::mt19937_64 rng{3};
  std::vector<int32_t> in_flight{0, 0, 0};
  std::map<size_t, int> heads;
  for (int i = 0; i < 9000; ++i)
    ++heads[sel.order(in_flight, rng)[0]];
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(heads[i] > 2500);
    CHECK(heads[i] < 3500);
  }
}
