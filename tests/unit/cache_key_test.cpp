#include "backends/cache_key.hpp"

#include <caf/meta/annotation.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

using namespace pgw;

namespace {

chat_request base_request() {
  chat_request r;
  r.messages.push_back({"system", "be brief", {}});
  r.messages.push_back({"user", "hi", {}});
  r.temperature = 0.2;
  return r;
}

std::string key_of(const chat_request& r) {
  return cache_key("default", r);
}

// -- field enumeration ----------------------------------------------------------

/// A CAF inspector that visits the fields of an inspect list one by one:
/// collects their addresses, or changes the field number `target`.
struct field_visitor {
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = true;

  std::vector<const void*> addresses;
  int target = -1;
  bool changed = false;

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (visit(xs), ...);
  }

  template <class T>
  void visit(T& x) {
    if constexpr (std::is_base_of<caf::meta::annotation, T>::value) {
      return;
    } else {
      if (static_cast<int>(addresses.size()) == target) {
        change(x);
        changed = true;
      }
      addresses.push_back(&x);
    }
  }

  // A change per field type. A new field of a type not listed here fails
  // to compile: add its change, and it is then checked like the others.
  static void change(std::string& x) {
    x = x.empty() ? std::string{"{\"k\":1}"} : x + "x";
  }
  static void change(caf::optional<double>& x) {
    x = x ? *x + 0.5 : 0.5;
  }
  static void change(caf::optional<int64_t>& x) {
    x = x ? *x + 1 : 7;
  }
  static void change(caf::optional<bool>& x) {
    x = x ? !*x : true;
  }
  static void change(std::vector<std::string>& x) {
    x.push_back("END");
  }
  static void change(std::vector<chat_message>& x) {
    x.push_back({"user", "more", {}});
  }
  static void change(std::vector<content_part>& x) {
    x.push_back({"text", "part", ""});
  }
  static void change(schema_strategy& x) {
    x = x == schema_strategy::prompt ? schema_strategy::json_object
                                     : schema_strategy::prompt;
  }
  static void change(std::vector<tool_call>& x) {
    x.push_back({"call_1", "function", "f", "{}"});
  }
};

template <class T>
std::vector<const void*> field_addresses(T& x) {
  field_visitor v;
  inspect(v, x);
  return v.addresses;
}

/// `x` with its field number `i` changed.
template <class T>
T with_field_changed(T x, int i) {
  field_visitor v;
  v.target = i;
  inspect(v, x);
  REQUIRE(v.changed);
  return x;
}

} // namespace

TEST_CASE("cache key: every field of chat_request is in the key or excluded") {
  auto req = base_request();
  const auto base = key_of(req);
  const auto excluded = cache_key_excluded_fields(req);
  const auto fields = field_addresses(req);
  REQUIRE(fields.size() >= 20);
  // Every exclusion names a real field.
  for (auto* e : excluded)
    CHECK(std::find(fields.begin(), fields.end(), e) != fields.end());
  for (size_t i = 0; i < fields.size(); ++i) {
    CAPTURE(i);
    auto changed = with_field_changed(req, static_cast<int>(i));
    bool is_excluded = std::find(excluded.begin(), excluded.end(), fields[i])
                       != excluded.end();
    INFO("field #", i, " of chat_request's inspect list: a new field must go "
         "into cache_key_material or cache_key_excluded_fields");
    if (is_excluded)
      CHECK(key_of(changed) == base);
    else
      CHECK(key_of(changed) != base);
  }
}

TEST_CASE("cache key: every field of a message, part and tool call counts") {
  chat_request req;
  chat_message m{"assistant", "calling", {{"text", "t", ""}}};
  m.tool_calls.push_back({"call_0", "function", "get", "{\"a\":1}"});
  m.tool_call_id = "call_9";
  m.name = "bot";
  req.messages.push_back(m);
  const auto base = key_of(req);
  auto n_msg = field_addresses(req.messages[0]).size();
  CHECK(n_msg == 7);
  CHECK(field_addresses(req.messages[0].parts[0]).size() == 5);
  for (size_t i = 0; i < n_msg; ++i) {
    CAPTURE(i);
    auto r = req;
    r.messages[0] = with_field_changed(r.messages[0], static_cast<int>(i));
    CHECK(key_of(r) != base);
  }
  for (size_t i = 0; i < field_addresses(req.messages[0].parts[0]).size();
       ++i) {
    CAPTURE(i);
    auto r = req;
    r.messages[0].parts[0]
      = with_field_changed(r.messages[0].parts[0], static_cast<int>(i));
    CHECK(key_of(r) != base);
  }
  for (size_t i = 0; i < field_addresses(req.messages[0].tool_calls[0]).size();
       ++i) {
    CAPTURE(i);
    auto r = req;
    r.messages[0].tool_calls[0]
      = with_field_changed(r.messages[0].tool_calls[0], static_cast<int>(i));
    CHECK(key_of(r) != base);
  }
}

TEST_CASE("cache key: scope, tenant and version separate keys") {
  auto req = base_request();
  CHECK(cache_key("a", req) != cache_key("b", req));
  auto t1 = req;
  t1.tenant = "t1";
  auto t2 = req;
  t2.tenant = "t2";
  CHECK(cache_key("a", t1) != cache_key("a", t2));
  CHECK(cache_key_material("a", req).find(cache_key_version)
        != std::string::npos);
  // Deterministic: the same request, the same key.
  CHECK(cache_key("a", req) == cache_key("a", base_request()));
  CHECK(key_of(req).size() == 64);
}

TEST_CASE("cache key: canonical JSON sorts keys and drops whitespace") {
  CHECK(canonical_json_text(R"({"b": 1, "a": {"d": [1, 2], "c": null}})")
        == R"({"a":{"c":null,"d":[1,2]},"b":1})");
  auto a = base_request();
  auto b = base_request();
  a.tools = R"([{"type":"function","function":{"name":"f","parameters":{}}}])";
  b.tools
    = R"([ {"function": {"parameters": {}, "name": "f"}, "type": "function"} ])";
  CHECK(key_of(a) == key_of(b));
  a.extra_body = R"({"x":1,"y":2})";
  b.extra_body = R"({"y":2,"x":1})";
  CHECK(key_of(a) == key_of(b));
  // Array order is meaning: it changes the key.
  b.tools = R"([{"type":"function","function":{"name":"g","parameters":{}}},)"
            R"({"type":"function","function":{"name":"f","parameters":{}}}])";
  CHECK(key_of(a) != key_of(b));
}

TEST_CASE("cache key: numbers are normalised") {
  CHECK(canonical_json_text("[1, 1.0, 1e0, 0.2, 2e-1, -0.0, 1.5e300]")
        == "[1,1,1,0.2,0.2,0,1.5e+300]");
  auto a = base_request();
  auto b = base_request();
  a.temperature = 1;
  b.temperature = 1.0;
  CHECK(key_of(a) == key_of(b));
  a.temperature = 0.2;
  b.temperature = 0.1 + 0.1;
  CHECK(key_of(a) == key_of(b));
  b.temperature = 0.1 + 0.2 - 0.1; // 0.20000000000000004: another number
  CHECK(key_of(a) != key_of(b));
  a.extra_body = R"({"top_k": 40})";
  b = a;
  b.extra_body = R"({"top_k": 40.0})";
  CHECK(key_of(a) == key_of(b));
  CHECK(cache_key_material("s", a).find("\"temperature\":0.2")
        != std::string::npos);
}

TEST_CASE("cache key: integers beyond 2^53 stay exact") {
  // Sent upstream exactly; as doubles they were one number.
  CHECK(canonical_json_text("[9007199254740993, 18446744073709551615]")
        == "[9007199254740993,18446744073709551615]");
  auto a = base_request();
  auto b = base_request();
  a.extra_body = R"({"my_x": 9007199254740992})";
  b.extra_body = R"({"my_x": 9007199254740993})";
  CHECK(key_of(a) != key_of(b));
}

TEST_CASE("cache key: the scope's sources are in it, model and overlay too") {
  scope_config sc;
  sc.name = "LLM";
  source_config a;
  a.name = "a";
  a.provider = "generic";
  a.base_url = "http://h/v1";
  a.model = "m1";
  source_config b = a;
  b.name = "b";
  sc.sources = {a, b};
  auto id = cache_sources_id(sc);
  CHECK(id.size() == 64);
  auto reordered = sc;
  std::swap(reordered.sources[0], reordered.sources[1]);
  CHECK(cache_sources_id(reordered) == id); // the order of keys is no meaning
  auto changed = [&](auto edit) {
    auto other = sc;
    edit(other.sources[1]);
    return cache_sources_id(other);
  };
  CHECK(changed([](source_config& s) { s.model = "m2"; }) != id);
  CHECK(changed([](source_config& s) { s.overlay = R"({"temperature":0})"; })
        != id);
  CHECK(changed([](source_config& s) { s.base_url = "http://other/v1"; })
        != id);
  CHECK(changed([](source_config& s) { s.api_key = "rotated"; }) == id);
  auto req = base_request();
  CHECK(cache_key("LLM", req, id)
        != cache_key("LLM", req, changed([](source_config& s) {
                       s.model = "m2";
                     })));
}

TEST_CASE("cache key: an unparsable JSON field never matches a valid one") {
  auto a = base_request();
  auto b = base_request();
  a.response_format = R"({"type":"json_object"})";
  b.response_format = R"({"type":"json_object")";
  CHECK(key_of(a) != key_of(b));
  CHECK(canonical_json_text("not json") == "\"not json\"");
}

TEST_CASE("cache key: sha256 of a known text") {
  CHECK(sha256_hex("abc")
        == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("cache key: two numbers Boost.JSON reads as one double are two "
          "keys") {
  // 0.75438530415285798 and 0.7543853041528579 are neighbouring doubles;
  // Boost.JSON 1.81's parse reads both as the second, so two requests that
  // differ only there shared a key (and a cached answer).
  auto a = base_request();
  a.extra_body = R"({"logit_bias_scale":0.75438530415285798})";
  auto b = base_request();
  b.extra_body = R"({"logit_bias_scale":0.7543853041528579})";
  CHECK(key_of(a) != key_of(b));
  auto c = base_request();
  c.extra_body = R"({"logit_bias_scale":0.754385304152858})"; // a's, shortest
  CHECK(key_of(a) == key_of(c));
}
