// Settings values with a fixed set of names (config/settings.hpp): each
// name parses to its value, `to_string` gives the name back, and anything
// else (a near miss in case or spelling, an empty text) is refused.

#include "config/settings.hpp"

#include <doctest/doctest.h>

#include <set>
#include <vector>
#include <string>

using namespace pgw;

namespace {

/// Checks every value of E against the names `expected` lists, in order.
template <class E>
void check_names(const std::vector<std::string>& expected,
                 const std::vector<std::string>& refused) {
  std::vector<std::string> names;
  for (auto x : setting_values<E>::all) {
    names.emplace_back(to_string(x));
    auto back = parse_setting<E>(to_string(x));
    REQUIRE(back.has_value());
    CHECK(*back == x);
  }
  CHECK(names == expected);
  CHECK(std::set<std::string>(names.begin(), names.end()).size()
        == names.size());
  for (auto& text : refused)
    CHECK_FALSE(parse_setting<E>(text).has_value());
}

} // namespace

TEST_CASE("selector_policy: health_aware, round_robin, priority") {
  CHECK(*parse_setting<selector_policy>("round_robin")
        == selector_policy::round_robin);
  check_names<selector_policy>({"health_aware", "round_robin", "priority"},
                               {"random", "Priority", "", "round-robin"});
  CHECK(setting_names<selector_policy>()
        == "health_aware, round_robin, priority");
}

TEST_CASE("refusal_policy: wait, fail") {
  CHECK(*parse_setting<refusal_policy>("fail") == refusal_policy::fail);
  check_names<refusal_policy>({"wait", "fail"}, {"Wait", "retry", " wait"});
}

TEST_CASE("state_backend: memory, redis") {
  CHECK(*parse_setting<state_backend>("redis") == state_backend::redis);
  check_names<state_backend>({"memory", "redis"}, {"etcd", "disk", "REDIS"});
}

TEST_CASE("cache_store: none, memory, redis") {
  CHECK(*parse_setting<cache_store>("none") == cache_store::none);
  check_names<cache_store>({"none", "memory", "redis"}, {"lru", "off", ""});
}

TEST_CASE("transport_kind: beast, httplib") {
  CHECK(*parse_setting<transport_kind>("httplib") == transport_kind::httplib);
  check_names<transport_kind>({"beast", "httplib"}, {"curl", "Beast"});
}

TEST_CASE("source_kind: chat, embedding, ocr_vision, ocr_monkey") {
  CHECK(*parse_setting<source_kind>("ocr_monkey") == source_kind::ocr_monkey);
  check_names<source_kind>({"chat", "embedding", "ocr_vision", "ocr_monkey"},
                           {"ocr", "embeddings", "Chat"});
  CHECK(is_ocr(source_kind::ocr_vision));
  CHECK(is_ocr(source_kind::ocr_monkey));
  CHECK_FALSE(is_ocr(source_kind::embedding));
}
