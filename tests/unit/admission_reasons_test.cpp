// Admission's skip and refusal reasons are enums inside the runtime; their
// words appear only at the edge (error details' per_source, telemetry).

#include "backends/limiter.hpp"
#include "messages/gateway.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

using namespace pgw;

TEST_CASE("admission reasons: each has its SPEC word, all distinct") {
  CHECK(std::string{to_string(skip_reason::cooling)} == "cooling");
  CHECK(std::string{to_string(skip_reason::circuit_open)} == "circuit_open");
  CHECK(std::string{to_string(skip_reason::quota)} == "quota");
  std::set<std::string> words;
  for (auto r : {admission_refusal::none, admission_refusal::cooling,
                 admission_refusal::circuit_open, admission_refusal::quota,
                 admission_refusal::mixed})
    words.insert(to_string(r));
  CHECK(words == std::set<std::string>{"none", "cooling", "circuit_open",
                                       "quota", "mixed"});
}

TEST_CASE("limiter status: every backend's starts from the source and its "
          "limits, counters zero") {
  limiter_limits limits;
  limits.source = "a";
  limits.rpm = 60;
  limits.max_concurrency = 4;
  auto st = limiter_status_of(limits);
  CHECK(st.source == "a");
  CHECK(st.rpm_limit == caf::optional<int64_t>{60});
  CHECK_FALSE(st.tpm_limit);
  CHECK(st.concurrency_limit == caf::optional<int64_t>{4});
  CHECK(st.rpm_used == 0);
  CHECK(st.in_flight == 0);
  CHECK(st.acquired == 0);
  CHECK(st.unavailable.empty());
  auto lim = make_memory_limiter(limits);
  auto mem = lim->try_acquire(1, 0.0);
  REQUIRE(mem);
  auto after = lim->status(0.0);
  REQUIRE(after);
  CHECK(after->source == "a");
  CHECK(after->rpm_limit == st.rpm_limit);
  CHECK(after->concurrency_limit == st.concurrency_limit);
  CHECK(after->acquired == 1);
}
