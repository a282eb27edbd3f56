#include "transport/retry_after.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>

using namespace pgw;
using namespace std::chrono;

namespace {

// Sun, 06 Nov 1994 08:49:37 GMT (the RFC's example date).
constexpr int64_t rfc_example_epoch = 784111777;

system_clock::time_point at_epoch(double s) {
  return system_clock::time_point{} + duration_cast<system_clock::duration>(
                                        duration<double>(s));
}

// 2026-11-29 22:00:00 UTC.
const auto now_2026 = system_clock::time_point{} + seconds{1795989600};

struct row {
  const char* name;
  std::optional<std::string> retry_after;
  std::optional<std::string> retry_after_ms;
  std::optional<double> seconds;
  bool non_finite;
};

retry_after_value run(const row& r, system_clock::time_point now) {
  return parse_retry_after(r.retry_after ? &*r.retry_after : nullptr,
                           r.retry_after_ms ? &*r.retry_after_ms : nullptr,
                           now);
}

} // namespace

TEST_CASE("retry-after: delta seconds, milliseconds and bad values") {
  const std::optional<double> none;
  const std::optional<std::string> absent;
  const row rows[] = {
    {"integer", "2", absent, 2.0, false},
    {"zero", "0", absent, 0.0, false},
    {"fraction", "1.5", absent, 1.5, false},
    {"trimmed", " 3 ", absent, 3.0, false},
    {"tab trimmed", "\t4\t", absent, 4.0, false},
    {"negative zero", "-0", absent, 0.0, false},
    {"negative", "-1", absent, none, false},
    {"nan", "nan", absent, none, false},
    {"NaN", "NaN", absent, none, false},
    {"inf", "inf", absent, none, true},
    {"huge", "1e999", absent, none, true},
    {"huge integer", std::string(400, '9'), absent, none, true},
    {"Infinity", "Infinity", absent, none, true},
    {"negative infinity", "-inf", absent, none, false},
    {"tiny", "1e-999", absent, 0.0, false},
    {"empty", "", absent, none, false},
    {"blank", "   ", absent, none, false},
    {"garbage", "soon", absent, none, false},
    {"trailing garbage", "5s", absent, none, false},
    {"hex", "0x10", absent, none, false},
    {"two numbers", "1 2", absent, none, false},
    {"exponent", "1e1", absent, 10.0, false},
    {"leading dot", ".5", absent, 0.5, false},
    {"trailing dot", "5.", absent, 5.0, false},
    {"plus sign", "+3", absent, 3.0, false},
    {"lone dot", ".", absent, none, false},
    {"lone sign", "-", absent, none, false},
    {"exponent without digits", "1e", absent, none, false},
    {"ms alone", absent, "1500", 1.5, false},
    {"ms wins", "30", "1500", 1.5, false},
    {"ms zero wins", "30", "0", 0.0, false},
    {"ms garbage, header used", "2", "soon", 2.0, false},
    {"ms negative, header used", "2", "-5", 2.0, false},
    {"ms nan, header used", "2", "nan", 2.0, false},
    {"ms empty, header used", "2", "", 2.0, false},
    {"ms infinite, header used", "2", "inf", 2.0, true},
    {"ms infinite alone", absent, "1e999", none, true},
    {"both absent", absent, absent, none, false},
    {"both bad", "later", "x", none, false},
  };
  for (auto& r : rows) {
    CAPTURE(r.name);
    auto got = run(r, now_2026);
    CHECK(got.non_finite == r.non_finite);
    REQUIRE(got.seconds.has_value() == r.seconds.has_value());
    if (r.seconds) {
      CHECK(*got.seconds == doctest::Approx(*r.seconds));
      CHECK_FALSE(std::signbit(*got.seconds));
    }
  }
}

TEST_CASE("retry-after: HTTP-date in its three forms, relative to now") {
  const std::optional<std::string> absent;
  auto now = at_epoch(rfc_example_epoch - 120);
  for (const char* date : {"Sun, 06 Nov 1994 08:49:37 GMT",
                           "Sunday, 06-Nov-94 08:49:37 GMT",
                           "Sun Nov  6 08:49:37 1994",
                           "  Sun, 06 Nov 1994 08:49:37 GMT  "}) {
    CAPTURE(date);
    auto got = run({"", std::string(date), absent, {}, false}, now);
    REQUIRE(got.seconds);
    CHECK(*got.seconds == 120.0);
    CHECK_FALSE(got.non_finite);
  }
}

TEST_CASE("retry-after: HTTP-date details") {
  const std::optional<std::string> absent;
  auto date = [&](const char* text, system_clock::time_point now) {
    return run({"", std::string(text), absent, {}, false}, now);
  };
  const char* example = "Sun, 06 Nov 1994 08:49:37 GMT";
  SUBCASE("sub-second now") {
    auto got = date(example, at_epoch(rfc_example_epoch - 1.5));
    REQUIRE(got.seconds);
    CHECK(*got.seconds == doctest::Approx(1.5).epsilon(1e-6));
  }
  SUBCASE("a date in the past means 0") {
    auto got = date(example, at_epoch(rfc_example_epoch + 3600));
    REQUIRE(got.seconds);
    CHECK(*got.seconds == 0.0);
  }
  SUBCASE("exactly now means 0") {
    auto got = date(example, at_epoch(rfc_example_epoch));
    REQUIRE(got.seconds);
    CHECK(*got.seconds == 0.0);
  }
  SUBCASE("a future date in 2026") {
    // 2026-11-29 22:00:00 + 90 s.
    auto got = date("Sun, 29 Nov 2026 22:01:30 GMT", now_2026);
    REQUIRE(got.seconds);
    CHECK(*got.seconds == 90.0);
  }
  SUBCASE("a leap day") {
    auto now = system_clock::time_point{} + seconds{1709164800}; // 2024-02-29
    auto got = date("Thu, 29 Feb 2024 00:00:10 GMT", now);
    REQUIRE(got.seconds);
    CHECK(*got.seconds == 10.0);
  }
  SUBCASE("RFC 850 two-digit years: more than 50 years ahead is the past") {
    // In 2026, "70" is 2070 (44 years ahead) and "99" is 1999.
    auto future = date("Wednesday, 01-Jan-70 00:00:00 GMT", now_2026);
    REQUIRE(future.seconds);
    CHECK(*future.seconds > 40 * 365 * 86400.0);
    auto past = date("Friday, 01-Jan-99 00:00:00 GMT", now_2026);
    REQUIRE(past.seconds);
    CHECK(*past.seconds == 0.0);
  }
  SUBCASE("month and day names are not case-sensitive") {
    auto got = date("SUN, 06 NOV 1994 08:49:37 gmt",
                    at_epoch(rfc_example_epoch - 5));
    REQUIRE(got.seconds);
    CHECK(*got.seconds == 5.0);
  }
  SUBCASE("malformed dates are ignored") {
    auto now = at_epoch(rfc_example_epoch - 120);
    for (const char* bad : {"Sun, 31 Feb 1994 08:49:37 GMT",
                            "Sun, 06 Nov 1994 08:49:37",
                            "Sun, 06 Nov 1994 08:49:37 PST",
                            "Sun, 06 Foo 1994 08:49:37 GMT",
                            "Xyz, 06 Nov 1994 08:49:37 GMT",
                            "Sun, 06 Nov 1994 24:00:00 GMT",
                            "Sun, 06 Nov 1994 8:49:37 GMT",
                            "Sun 06 Nov 1994 08:49:37 GMT",
                            "Sunday, 06-Nov-1994 08:49:37 GMT",
                            "Sun Nov  6 08:49:37 94",
                            "1994-11-06T08:49:37Z"}) {
      CAPTURE(bad);
      auto got = date(bad, now);
      CHECK_FALSE(got.seconds);
      CHECK_FALSE(got.non_finite);
    }
  }
  SUBCASE("retry-after-ms wins over a date") {
    auto got = run({"", std::string(example), std::string("250"), {}, false},
                   at_epoch(rfc_example_epoch - 120));
    REQUIRE(got.seconds);
    CHECK(*got.seconds == doctest::Approx(0.25));
  }
}
