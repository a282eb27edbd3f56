// The soak's figures take the same memory for any number of calls: latency
// percentiles come from a histogram of 0.1 % buckets, not from a sample per
// call.

#include "apps/harness/soak.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

using pgw::cli::latency_histogram;

TEST_CASE("soak latency histogram: percentiles within 0.05 % of the "
          "sorted samples' nearest rank") {
  std::mt19937_64 rng{7};
  std::lognormal_distribution<double> dist{3.0, 1.5};
  std::vector<double> v;
  latency_histogram h;
  for (int i = 0; i < 20000; ++i) {
    auto ms = dist(rng);
    v.push_back(ms);
    h.add(ms);
  }
  std::sort(v.begin(), v.end());
  CHECK(h.count() == 20000);
  for (double q : {0.0, 0.5, 0.95, 0.98, 0.99, 0.999, 1.0}) {
    CAPTURE(q);
    auto want = v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
    CHECK(h.percentile(q) == doctest::Approx(want).epsilon(0.0005));
  }
}

TEST_CASE("soak latency histogram: empty is 0, tiny and huge values clamp") {
  latency_histogram h;
  CHECK(h.percentile(0.5) == 0);
  h.add(0);
  CHECK(h.percentile(0.5) == doctest::Approx(0.001).epsilon(0.001));
  h.add(1e12);
  CHECK(h.percentile(1.0) >= 1e9);
  CHECK(h.percentile(1.0) < 1.01e9);
}
