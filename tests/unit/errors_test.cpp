#include "messages/errors.hpp"

#include <caf/sec.hpp>

#include <doctest/doctest.h>

using namespace pgw;

TEST_CASE("error codes round-trip through their SPEC names") {
  for (auto code : {error_code::request_rejected, error_code::retry_exhausted,
                    error_code::stalled, error_code::circuit_open,
                    error_code::quota_exhausted,
                    error_code::call_deadline_exceeded,
                    error_code::governance_unavailable, error_code::cancelled,
                    error_code::invalid_request}) {
    error_code parsed{};
    REQUIRE(from_string(to_string(code), parsed));
    CHECK(parsed == code);
  }
  error_code parsed{};
  CHECK_FALSE(from_string("no_such_code", parsed));
}

TEST_CASE("the unavailable family is exactly the four SPEC codes") {
  CHECK(is_unavailable_family(error_code::retry_exhausted));
  CHECK(is_unavailable_family(error_code::stalled));
  CHECK(is_unavailable_family(error_code::circuit_open));
  CHECK(is_unavailable_family(error_code::quota_exhausted));
  CHECK_FALSE(is_unavailable_family(error_code::call_deadline_exceeded));
  CHECK_FALSE(is_unavailable_family(error_code::request_rejected));
  CHECK_FALSE(is_unavailable_family(error_code::governance_unavailable));
}

TEST_CASE("a pgw error carries its detail") {
  error_detail detail;
  detail.message = "every source failed";
  detail.retry_after_s = 2.5;
  detail.per_source["a"] = "http_503";
  auto err = make_error(error_code::retry_exhausted, detail);
  REQUIRE(code_of(err));
  CHECK(*code_of(err) == error_code::retry_exhausted);
  auto got = detail_of(err);
  REQUIRE(got != nullptr);
  CHECK(got->per_source.at("a") == "http_503");
  CHECK(*got->retry_after_s == doctest::Approx(2.5));
  CHECK(describe(err) == "retry_exhausted: every source failed");
}

TEST_CASE("errors of other categories have no pgw code") {
  caf::error err = caf::sec::unexpected_message;
  CHECK_FALSE(code_of(err));
  CHECK(detail_of(err) == nullptr);
  CHECK_FALSE(code_of(caf::error{}));
}

TEST_CASE("a skipped source's line keeps the failure that explains the skip") {
  source_error failed{"unauthorized", 401, "Incorrect API key", {}};
  auto e = after_skip(failed, "circuit_open", "");
  CHECK(e.reason == "circuit_open");
  CHECK(e.http_status == 401);
  CHECK(describe("a", e)
        == "a: circuit open after unauthorized (401 \"Incorrect API key\")");
  // Why the circuit is open, when the gateway knows, says it all.
  CHECK(describe("a", after_skip(failed, "circuit_open",
                                 "opened after unauthorized (401)"))
        == "a: circuit open, opened after unauthorized (401)");
  // Nothing known before: the bare reason.
  CHECK(describe("a", after_skip(source_error{"in_flight", 0, {}, {}},
                                 "cooling", ""))
        == "a: cooling");
}

TEST_CASE("a source skipped again says once what it was skipped after") {
  source_error limited{"http_429", 429, "simulated 429", {}};
  auto once = after_skip(limited, "cooling", "");
  auto again = after_skip(after_skip(once, "cooling", ""), "cooling", "");
  CHECK(describe("a", again) == "a: cooling after http_429 (429 \"simulated "
                                "429\")"); // was "cooling after cooling after"
  // Skipped for another reason later: the new reason, the same cause.
  CHECK(describe("a", after_skip(once, "circuit_open", ""))
        == "a: circuit open after http_429 (429 \"simulated 429\")");
  // A quota skip names the limit that was reached.
  CHECK(describe("a", after_skip(source_error{}, "quota",
                                 "RPM limit reached (RPM=3)"))
        == "a: quota full, RPM limit reached (RPM=3)");
}

TEST_CASE("an error's upstream text is on one line for every printer") {
  error_detail d;
  d.upstream_code = "bad\"code\nx";
  d.upstream_message = "line1\r\nline2 \x01 tab\t end\x7f";
  d.sources["a"] = source_error{"http_400", 400, "one\ntwo\x01", {}};
  auto err = make_error(error_code::request_rejected, d);
  auto got = detail_of(err);
  REQUIRE(got != nullptr);
  CHECK(got->upstream_code == "bad\"code x");
  CHECK(got->upstream_message == "line1  line2   tab  end ");
  CHECK(got->sources.at("a").message == "one two ");
  CHECK(describe("a", d.sources.at("a")) == "a: http_400 (400 \"one two \")");
}
