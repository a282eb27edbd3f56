// Structured output's plain parts: schema compilation and validation
// (valijson), the deterministic repair, the ladder, the body per rung and
// the re-ask messages.

#include "actors/structured_checks.hpp"
#include "actors/structured_ladder.hpp"
#include "actors/structured_repair.hpp"
#include "actors/structured_schema.hpp"
#include "messages/errors.hpp"
#include "transport/chat_codec.hpp"
#include "transport/structured_body.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

using namespace pgw;
namespace json = boost::json;

namespace {

const std::string person_schema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})";

schema_ptr compiled(const std::string& text) {
  auto s = compile_schema(text);
  REQUIRE(s);
  return *s;
}

/// An object schema titled `title` (a digest of its own) whose properties
/// p0 ... p<n-1> are strings matching `pattern` (JSON-escaped already).
std::string with_patterns(size_t n, const std::string& pattern,
                          const std::string& title) {
  std::string s = R"({"title":")" + title + R"(","type":"object","properties":{)";
  for (size_t i = 0; i < n; ++i)
    s += (i ? ",\"p" : "\"p") + std::to_string(i)
         + R"(":{"type":"string","pattern":")" + pattern + "\"}";
  return s + "}}";
}

std::string compile_error(const std::string& text) {
  auto s = compile_schema(text);
  REQUIRE_FALSE(s);
  CHECK(code_of(s.error()) == error_code::invalid_request);
  auto d = detail_of(s.error());
  REQUIRE(d != nullptr);
  return d->message;
}

/// Checks `answer` against `schema`: valid when `issue` is empty, else one
/// issue whose message is exactly `issue`.
void check_one_issue(const std::string& schema, const std::string& answer,
                     const std::string& issue) {
  CAPTURE(schema);
  CAPTURE(answer);
  auto check = check_answer(*compiled(schema), answer);
  CHECK(check.valid == issue.empty());
  if (!issue.empty()) {
    REQUIRE(check.issues.size() == 1);
    CHECK(check.issues[0].message == issue);
  }
}

/// `words` after `prefix`, or nothing when `words` is empty (a valid row).
std::string issue_of(const char* prefix, const char* words) {
  return *words == 0 ? std::string() : prefix + std::string(words);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A string `format` per row: valid or not, and when not, one issue
/// whose message holds `words`.
struct format_row {
  const char* format;
  const char* text; // JSON string contents
  bool valid;
};

template <size_t N>
void check_format_rows(const format_row (&rows)[N], const std::string& words) {
  for (auto& r : rows) {
    std::string format = r.format, text = r.text;
    CAPTURE(format);
    CAPTURE(text);
    auto schema = compiled(R"({"type":"string","format":")" + format + "\"}");
    auto check = check_answer(*schema, "\"" + text + "\"");
    CHECK(check.valid == r.valid);
    if (!r.valid) {
      REQUIRE(check.issues.size() == 1);
      CHECK(contains(check.issues[0].message, words));
    }
  }
}

} // namespace

TEST_CASE("structured: repair strips fences, surrounding text and trailing commas") {
  struct row {
    const char* in;
    const char* out;
    bool changed;
  };
  const row rows[] = {
    {R"({"a":1})", R"({"a":1})", false},
    {"```json\n{\"a\":1}\n```", R"({"a":1})", true},
    {"```\n[1,2]\n```\n", "[1,2]", true},
    {"Here you go: {\"a\": {\"b\": \"}\"}} hope it helps", R"({"a": {"b": "}"}})", true},
    {R"({"a":[1,2,],})", R"({"a":[1,2]})", true},
    {R"({"s":"x,}"})", R"({"s":"x,}"})", false},
    {R"({"s":"a\"}b"} tail)", R"({"s":"a\"}b"})", true},
    {"  no json at all  ", "no json at all", true},
    {"{\"open\": 1", "{\"open\": 1", false},
    // A ``` inside a string is not a fence (it starts no line): the
    // trailing comma is repaired and the string kept (found by
    // fuzz_structured; the string's fence used to be taken for one).
    {"{\"md\":\"```py\",\n\"b\":1,\n}", "{\"md\":\"```py\",\n\"b\":1\n}", true},
    {"```json\n{\"md\":\"see ```x```\"}\n```", "{\"md\":\"see ```x```\"}", true},
    // A run of trailing commas goes at once (it took one repair each).
    {"[1,,]", "[1]", true},
    {",\n] x", "] x", true}, // no value: trimmed once the comma goes
    // A fence indented, or after leading blank lines, is a fence.
    {"\r\n  ```json\n{\"a\":1}\n  ```", "{\"a\":1}", true},
    {"{\"a\":[1, ,\n],,}", "{\"a\":[1 \n]}", true},
  };
  for (auto& r : rows) {
    CAPTURE(r.in);
    auto fixed = repair_json(r.in);
    CHECK(fixed.text == r.out);
    CHECK(fixed.changed == r.changed);
    CHECK(repair_json(fixed.text).text == fixed.text); // repairs once
  }
  // Long runs in linear time: a line of 300,000 ``` and a run of 300,000
  // commas (each was a search back or ahead over the run: quadratic).
  auto t0 = std::chrono::steady_clock::now();
  std::string fences = "x";
  for (int i = 0; i < 300000; ++i)
    fences += "```";
  CHECK(repair_json(fences).text == fences);
  CHECK(repair_json("[1" + std::string(300000, ',') + "]").text == "[1]");
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count()
        < 2.0);
}

TEST_CASE("structured: answers are validated with JSON pointers") {
  auto schema = compiled(person_schema);
  struct row {
    const char* answer;
    bool valid;
    bool repaired;
    std::vector<std::string> pointers; ///< of the issues, in any order
  };
  const std::vector<row> rows = {
    {R"({"name":"Ada","age":36})", true, false, {}},
    {"```json\n{\"name\":\"Ada\",\"age\":36,}\n```", true, true, {}},
    {R"({"name":"Ada","age":"old"})", false, false, {"/age"}},
    {R"({"name":"Ada","age":-1})", false, false, {"/age"}},
    {R"({"age":3})", false, false, {""}},
    {R"({"name":"Ada","age":3,"x":1})", false, false, {""}},
    // A wrong property below and a missing or extra one at the root: both
    // (the root's used to be dropped as "a child failed"), and valijson's
    // "Failed to validate against schema associated with property name
    // 'age'." line is left out.
    {R"({"age":"old"})", false, false, {"/age", ""}},
    {R"({"name":"Ada","age":"old","x":1})", false, false, {"/age", ""}},
    {"I cannot answer that.", false, false, {""}},
  };
  for (auto& r : rows) {
    CAPTURE(r.answer);
    auto check = check_answer(*schema, r.answer);
    CHECK(check.valid == r.valid);
    CHECK(check.repaired == r.repaired);
    std::vector<std::string> pointers;
    for (auto& i : check.issues)
      pointers.push_back(i.pointer);
    CHECK(pointers == r.pointers);
    if (r.valid)
      CHECK(json::parse(check.json) == json::parse(R"({"name":"Ada","age":36})"));
  }
  auto bad = check_answer(*schema, R"({"name":"Ada","age":"old"})");
  CHECK(format_issues(bad.issues).rfind("/age: ", 0) == 0);
  auto both = check_answer(*schema, R"({"age":"old"})");
  REQUIRE(both.issues.size() == 2);
  CHECK(both.issues[1].message == "Missing required property 'name'.");
  auto missing = check_answer(*schema, R"({"age":3})");
  CHECK(contains(format_issues(missing.issues), "(root): "));
  CHECK(contains(format_issues(missing.issues), "name"));
  auto not_json = check_answer(*schema, "I cannot answer that.");
  CHECK(not_json.json.empty());
  CHECK(contains(not_json.issues.front().message, "not valid JSON"));
}

TEST_CASE("structured: at most 20 issues and a summary line") {
  auto schema = compiled(R"({"type":"array","items":{"type":"string"}})");
  std::string answer = "[";
  for (int i = 0; i < 30; ++i)
    answer += std::string(i ? "," : "") + std::to_string(i);
  answer += "]";
  auto check = check_answer(*schema, answer);
  REQUIRE(check.issues.size() == max_schema_issues + 1);
  CHECK(check.issues.front().pointer == "/0");
  CHECK(check.issues.back().message == "... and 10 more errors");
}

TEST_CASE("structured: an invalid schema names the JSON pointer of the problem") {
  struct row {
    const char* schema;
    const char* message_part;
  };
  const row rows[] = {
    {"{not json", "schema: not valid JSON"},
    {"[1,2]", "schema (root): a JSON Schema is an object"},
    {R"({"type":"strin"})", "schema /type: "},
    {R"({"properties":{"age":{"type":"integr"}}})", "schema /properties/age/type: "},
    {R"({"required":"name"})", "schema /required: "},
    {R"({"minimum":"zero"})", "schema /minimum: "},
    // Checked before valijson, which would recurse forever or fail on
    // every answer instead.
    {R"({"$ref":"#"})", "schema /$ref: $ref chain refers back to itself"},
    // Loops through keywords that stay on the same answer value: valijson
    // recursed until the stack overflowed (serve died).
    {R"({"allOf":[{"$ref":"#"}]})",
     "schema /allOf/0: $ref chain refers back to itself without descending "
     "into the answer, an endless loop: (root) -> /allOf/0 -> (root)"},
    {R"({"not":{"$ref":"#"}})",
     "schema /not: $ref chain refers back to itself without descending into "
     "the answer, an endless loop: (root) -> /not -> (root)"},
    {R"({"$ref":"#/definitions/a","definitions":{"a":{"anyOf":[{"$ref":"#/definitions/a"}]}}})",
     "schema /definitions/a/anyOf/0: $ref chain refers back to itself "
     "without descending into the answer, an endless loop: /definitions/a "
     "-> /definitions/a/anyOf/0 -> /definitions/a"},
    {R"({"if":{"type":"object"},"then":{"oneOf":[{"$ref":"#/definitions/b"}]},"definitions":{"b":{"dependencies":{"x":{"$ref":"#"}}}}})",
     "an endless loop: (root) -> /then -> /then/oneOf/0 -> /definitions/b "
     "-> /definitions/b/dependencies/x -> (root)"},
    // The meta-schema's uniqueItems, checked in linear time.
    {R"({"required":["a","b","a"]})",
     R"(schema /required/2: "a" is listed twice (the items must be unique))"},
    {R"({"type":["string","string"]})", R"(schema /type/1: "string" is listed twice)"},
    {R"({"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},"properties":{"x":{"$ref":"#/definitions/a"}}})",
     "schema /definitions/a/$ref: $ref chain refers back to itself"},
    {R"({"properties":{"id":{"type":"string","pattern":"(["}}})",
     "schema /properties/id/pattern: not a regular expression"},
    // valijson would abort the process (or, for a relative URI, recurse
    // until the stack overflows) on each of these.
    {R"({"$ref":"#/nope"})",
     R"(schema /$ref: $ref "#/nope" does not resolve in the schema)"},
    {R"({"properties":{"a":{"$ref":"#/definitions/missing"}}})",
     R"(schema /properties/a/$ref: $ref "#/definitions/missing" does not resolve)"},
    {R"({"items":{"$ref":"#/items/0"}})",
     R"(schema /items/$ref: $ref "#/items/0" does not resolve)"},
    {R"({"items":[{"type":"string"}],"additionalItems":{"$ref":"#/items/1"}})",
     R"($ref "#/items/1" does not resolve)"},
    {R"({"$ref":"http://example.com/s.json"})",
     R"(schema /$ref: $ref "http://example.com/s.json": only local $ref ("#/...") are supported)"},
    {R"({"$ref":"other.json"})", R"($ref "other.json": only local $ref)"},
    {R"({"$ref":"#foo"})", R"($ref "#foo" does not resolve)"},
    // A target outside the keywords walked is still parsed by valijson.
    {R"({"$ref":"#/x","x":{"properties":{"a":{"$ref":"other.json"}}}})",
     R"(schema /x/properties/a/$ref: $ref "other.json": only local $ref)"},
    // patternProperties' patterns are held to pattern's rules.
    {R"({"patternProperties":{"a(":{}}})",
     "schema /patternProperties/a(: not a regular expression pgw runs (missing )"},
    {R"({"patternProperties":{"(?<=a)b":{}}})",
     "schema /patternProperties/(?<=a)b: not a regular expression pgw runs ("},
    {R"({"patternProperties":{"^a":{"type":"string"}},"properties":{"b":{"$ref":"#/patternProperties/^a"}}})",
     R"(schema /properties/b/$ref: $ref "#/patternProperties/^a" names a subschema of patternProperties)"},
    // Patterns run on RE2: no lookaround, no backreference.
    {R"({"pattern":"^(?=a)a$"})",
     "schema /pattern: not a regular expression pgw runs ("},
    {R"({"pattern":"^(a)\\1$"})",
     "schema /pattern: not a regular expression pgw runs ("},
    // A $ref into data would be read as a schema (its pattern by
    // std::regex): refused.
    {R"({"enum":[{"pattern":"^(a+)+$"}],"items":{"$ref":"#/enum/0"}})",
     R"(schema /items/$ref: $ref "#/enum/0" names data)"},
    // ... also the enum of a schema under a key of the author's that a
    // $ref names (the enum value would have been renamed in valijson's copy).
    {R"({"$ref":"#/x","x":{"enum":[{"pattern":"a"}],)"
     R"("items":{"$ref":"#/x/enum/0"}}})",
     R"(schema /x/items/$ref: $ref "#/x/enum/0" names data)"},
  };
  for (auto& r : rows) {
    CAPTURE(r.schema);
    CHECK(contains(compile_error(r.schema), r.message_part));
  }
}

TEST_CASE("structured: recursive schemas validate, long strings are checked against a pattern") {
  auto tree = compiled(R"({"definitions":{"node":{"type":"object","properties":{"next":{"$ref":"#/definitions/node"}}}},"$ref":"#/definitions/node"})");
  CHECK(check_answer(*tree, R"({"next":{"next":{"next":{}}}})").valid);
  CHECK_FALSE(check_answer(*tree, R"({"next":{"next":3}})").valid);
  // $refs are read as valijson reads them: escapes, array indices, a
  // trailing slash.
  auto escaped = compiled(R"({"definitions":{"a/b c":{"type":"string"},"t":{"items":[{"type":"integer"}]}},"properties":{"s":{"$ref":"#/definitions/a~1b%20c"},"i":{"$ref":"#/definitions/t/items/0/"}}})");
  CHECK(check_answer(*escaped, R"({"s":"x","i":1})").valid);
  CHECK_FALSE(check_answer(*escaped, R"({"s":1})").valid);
  CHECK_FALSE(check_answer(*escaped, R"({"i":"x"})").valid);
  // RE2 is linear in the subject: a small pattern checks a long string
  // (std::regex overflowed the stack near 20,000 characters).
  auto id = compiled(R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+$"},"summary":{"type":"string"}}})");
  CHECK(check_answer(*id, R"({"id":"abc"})").valid);
  CHECK_FALSE(check_answer(*id, R"({"id":"ab1"})").valid);
  auto huge = R"({"id":")" + std::string(100000, 'a') + R"("})";
  CHECK(check_answer(*id, huge).valid);
  CHECK_FALSE(check_answer(*id, R"({"id":")" + std::string(100000, 'a') + R"(1"})").valid);
  // A string no pattern applies to is not bounded by one elsewhere in
  // the schema (a 2 KiB bound on every string was: a long summary next to
  // a patterned id failed validation).
  auto summary = R"({"id":"abc","summary":")" + std::string(100000, 's') + R"("})";
  CHECK(check_answer(*id, summary).valid);
  auto uri = compiled(R"({"type":"object","properties":{"home":{"type":"string","format":"uri"},"summary":{"type":"string"}}})");
  CHECK(check_answer(*uri, R"({"home":"https://x.test/","summary":")" + std::string(100000, 's') + R"("})").valid);
  // A large pattern checks shorter strings: at most 2^24 / its RE2 program
  // size bytes (3,002 instructions here: 5,588), never fewer than 2048.
  auto big = compiled(R"({"type":"string","pattern":"^(?:x{1000}y{1000}z{1000})*$"})");
  auto three = std::string(1000, 'x') + std::string(1000, 'y') + std::string(1000, 'z');
  std::string long_subject;
  for (int i = 0; i < 40; ++i)
    long_subject += three;
  auto check = check_answer(*big, "\"" + long_subject + "\"");
  CHECK_FALSE(check.valid);
  REQUIRE(check.issues.size() == 1);
  CHECK(check.issues[0].pointer == "");
  CHECK(contains(check.issues[0].message, "a string of 120000 bytes is longer than "));
  CHECK(contains(check.issues[0].message, "the most checked against this pattern"));
  CHECK(check_answer(*big, "\"" + three + "\"").valid);
  CHECK_FALSE(check_answer(*big, "\"" + three + "x\"").valid);
  // And all of an answer's strings together at most 2^27 steps (bytes
  // times program size): 1,002 instructions, 15,000-byte strings, 8 fit.
  auto many = compiled(R"({"type":"array","items":{"type":"string","pattern":"^(?:a{1000})*$"}})");
  std::string items;
  for (int i = 0; i < 10; ++i)
    items += (i == 0 ? "\"" : ",\"") + std::string(15000, 'a') + "\"";
  auto spent = check_answer(*many, "[" + items + "]");
  CHECK_FALSE(spent.valid);
  REQUIRE(spent.issues.size() == 2);
  CHECK(spent.issues[0].pointer == "/8");
  CHECK(spent.issues[1].pointer == "/9");
  CHECK(contains(spent.issues[0].message, "too long for the schema's patterns"));
  // The bound is per check: the next answer starts afresh.
  CHECK(check_answer(*many, "[\"" + std::string(15000, 'a') + "\"]").valid);
  // Without a pattern, long strings are validated as usual.
  auto plain = compiled(R"({"type":"object","properties":{"id":{"type":"string"}}})");
  CHECK(check_answer(*plain, huge).valid);
}

TEST_CASE("structured: a whole number is an integer, whatever its spelling or size") {
  struct row {
    const char* type;
    const char* answer;
    const char* issue; // empty: valid
  };
  const row rows[] = {
    {R"("integer")", "5", ""},
    {R"("integer")", "5.0", ""},                    // valijson: not permitted
    {R"("integer")", "1e3", ""},                    // valijson: not permitted
    {R"("integer")", "-0.0", ""},
    {R"("integer")", "18446744073709551615", ""},   // valijson: not permitted
    {R"("integer")", "5.5", "expected integer, found number."},
    {R"("integer")", R"("5")", "expected integer, found string."},
    {R"("number")", "18446744073709551615", ""},
    {R"("number")", "5", ""},
    {R"("number")", "true", "expected number, found boolean."},
    {R"(["string","null"])", "null", ""},
    {R"(["string","null"])", "3", "expected null or string, found integer."},
    {R"(["object","array"])", "[]", ""},
    {R"(["object","array"])", "{}", ""},
    {R"("object")", "[]", "expected object, found array."},
  };
  for (auto& r : rows)
    check_one_issue(R"({"type":)" + std::string(r.type) + "}", r.answer,
                    issue_of("Value type not permitted by 'type' "
                             "constraint: ",
                             r.issue));
  // The parsed value keeps the answer's spelling of the number.
  auto big = compiled(R"({"type":"object","properties":{"id":{"type":"integer"}}})");
  auto check = check_answer(*big, R"({"id":18446744073709551615})");
  CHECK(check.valid);
  CHECK(check.json == R"({"id":18446744073709551615})");
}

TEST_CASE("structured: the bounds on a number are exact and name what they found") {
  struct row {
    const char* bound;  // keyword and number
    const char* answer;
    const char* issue;  // empty: valid
  };
  const row rows[] = {
    // valijson compared doubles: 2^53 + 1 passed.
    {R"("maximum":9007199254740992)", "9007199254740993",
     "less than or equal to 9007199254740992, found 9007199254740993."},
    {R"("maximum":9007199254740992)", "9007199254740992.0", ""},
    {R"("exclusiveMaximum":9007199254740993)", "9007199254740992.0", ""},
    {R"("exclusiveMaximum":9007199254740993)", "9007199254740993",
     "less than 9007199254740993, found 9007199254740993."},
    {R"("minimum":-9007199254740992)", "-9007199254740993",
     "greater than or equal to -9007199254740992, found -9007199254740993."},
    {R"("exclusiveMinimum":0.5)", "0.5", "greater than 0.5, found 0.5."},
    {R"("exclusiveMinimum":0.5)", "0.50001", ""},
    {R"("exclusiveMinimum":0.5)", "1", ""},
    {R"("exclusiveMinimum":0.5)", "0", "greater than 0.5, found 0."},
    {R"("minimum":1)", "1.0", ""},
    {R"("minimum":1)", "0.999", "greater than or equal to 1, found 0.999."},
    {R"("minimum":-2.5)", "-2", ""},
    {R"("minimum":-2.5)", "-2.5", ""},
    {R"("minimum":-2.5)", "-3", "greater than or equal to -2.5, found -3."},
    {R"("maximum":0)", "-0.0", ""},
    {R"("maximum":10)", "11.5", "less than or equal to 10, found 11.5."},
    {R"("maximum":1e-7)", "0.1", "less than or equal to 1e-07, found 0.1."},
    {R"("maximum":10)", "-1e300", ""},
    {R"("maximum":10)", R"("11")", ""}, // bounds constrain numbers only
  };
  for (auto& r : rows)
    check_one_issue("{" + std::string(r.bound) + "}", r.answer,
                    issue_of("Expected a number ", r.issue));
  // Under a property, with `type`: both errors, at the property.
  auto n = compiled(R"({"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":10}}})");
  CHECK(format_issues_line(check_answer(*n, R"({"n":11.5})").issues)
        == "/n: Value type not permitted by 'type' constraint: expected "
           "integer, found number.; /n: Expected a number less than or equal "
           "to 10, found 11.5.");
  CHECK(check_answer(*n, R"({"n":10})").valid);
}

TEST_CASE("structured: numbers past int64's range and whole doubles, as draft 7 means them") {
  // A schema's whole number may be written as a double (valijson's parser
  // refused minLength: 5.0, the meta-schema minItems: 2.0).
  auto len = compiled(R"({"type":"array","minItems":2.0,"items":{"type":"string","minLength":5.0,"maxLength":1e1}})");
  CHECK(check_answer(*len, R"(["abcde","fghijklmno"])").valid);
  CHECK(format_issues_line(check_answer(*len, R"(["abc"])").issues)
        == "/0: String should be no fewer than 5 characters in length.; "
           "(root): Array should contain no fewer than 2 elements.");
  // valijson could not read 18446744073709551615 (Boost.JSON's uint64):
  // `maximum: 5` let it pass, and a schema holding one was refused.
  auto big = check_answer(*compiled(R"({"maximum":5})"),
                          "18446744073709551615");
  CHECK_FALSE(big.valid);
  REQUIRE(big.issues.size() == 1);
  CHECK(big.issues[0].message == "Expected a number less than or equal to "
                                 "5, found 1.8446744073709552e+19.");
  CHECK(big.json == "18446744073709551615"); // as written
  CHECK_FALSE(check_answer(*compiled(R"({"exclusiveMaximum":5})"),
                           "18446744073709551615").valid);
  auto most = compiled(R"({"maximum":18446744073709551615,"minimum":0})");
  CHECK(check_answer(*most, "18446744073709551615").valid);
  CHECK(check_answer(*most, "1").valid);
  CHECK_FALSE(check_answer(*most, "1e20").valid);
  // enum and const compare it as a number, without throwing.
  auto in = check_answer(*compiled(R"({"enum":[1,2]})"), "18446744073709551615");
  REQUIRE(in.issues.size() == 1);
  CHECK(in.issues[0].message == "Failed to match against any enum values: "
                                "expected one of 1, 2, found "
                                "1.8446744073709552e+19.");
  CHECK(check_answer(*compiled(R"({"const":18446744073709551615})"),
                     "18446744073709551615").valid);
  // The schema is checked with the type words of answers.
  CHECK(compile_error(R"({"minLength":"5"})")
        == "schema /minLength: Value type not permitted by 'type' "
           "constraint: expected integer, found string.");
  CHECK(compile_error(R"({"minLength":5.5})")
        == "schema /minLength: Value type not permitted by 'type' "
           "constraint: expected integer, found number.");
  CHECK(compile_error(R"({"exclusiveMaximum":true})")
        == "schema /exclusiveMaximum: Value type not permitted by 'type' "
           "constraint: expected number, found boolean.");
}

TEST_CASE("structured: enum and const compare JSON exactly and say what they expected") {
  struct row {
    const char* schema;
    const char* answer;
    const char* issue; // empty: valid
  };
  const row rows[] = {
    // valijson compared numbers as doubles: 2^53 + 1 matched 2^53.
    {R"({"const":9007199254740992})", "9007199254740993",
     "Failed to match expected value set by 'const' constraint: expected "
     "9007199254740992, found 9007199254740993."},
    {R"({"const":9007199254740992})", "9007199254740992.0", ""},
    {R"({"enum":[9007199254740993]})", "9007199254740992",
     "Failed to match against any enum values: expected one of "
     "9007199254740993, found 9007199254740992."},
    {R"({"enum":["red","green","blue"]})", R"("purple")",
     R"(Failed to match against any enum values: expected one of "red", )"
     R"("green", "blue", found "purple".)"},
    {R"({"enum":["red","green","blue"]})", R"("green")", ""},
    {R"({"enum":["1"]})", "1",
     R"(Failed to match against any enum values: expected one of "1", found 1.)"},
    {R"({"enum":[1,2.5,null,true]})", "1.0", ""},
    {R"({"enum":[1,2.5,null,true]})", "25e-1", ""},
    {R"({"enum":[1,2.5,null,true]})", "false",
     "Failed to match against any enum values: expected one of 1, 2.5, "
     "null, true, found false."},
    {R"({"enum":[null]})", "0",
     "Failed to match against any enum values: expected one of null, "
     "found 0."},
    // Arrays item by item, objects member by member in any order.
    {R"({"const":{"a":[1,"x"],"b":{}}})", R"({"b":{},"a":[1.0,"x"]})", ""},
    // Shown as JSON up to 40 bytes, else by kind.
    {R"({"const":{"a":[1,"x"],"b":{}}})", R"({"a":["x",1],"b":{}})",
     R"(Failed to match expected value set by 'const' constraint: expected )"
     R"({"a":[1,"x"],"b":{}}, found {"a":["x",1],"b":{}}.)"},
    {R"({"const":{"a":[1,"x"]}})", R"({"a":[1,"x"],"b":{}})",
     R"(Failed to match expected value set by 'const' constraint: expected )"
     R"({"a":[1,"x"]}, found {"a":[1,"x"],"b":{}}.)"},
    {R"({"const":[1,2]})", "[1,2,3]",
     "Failed to match expected value set by 'const' constraint: expected "
     "[1,2], found [1,2,3]."},
    {R"({"const":[1,2]})", R"([1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20])",
     "Failed to match expected value set by 'const' constraint: expected "
     "[1,2], found an array."},
    {R"({"const":{"k":"0123456789012345678901234567890123456789"}})", "{}",
     "Failed to match expected value set by 'const' constraint: expected "
     "an object, found {}."},
    {R"({"const":"\u00e9t\u00e9"})", R"("été")", ""},
    {R"({"enum":[]})", "1",
     "Failed to match against any enum values: expected no value (the enum "
     "is empty), found 1."},
  };
  for (auto& r : rows)
    check_one_issue(r.schema, r.answer, r.issue);
  // A long list is cut after 160 bytes, a long string after 40, not inside
  // a UTF-8 sequence.
  std::string many = R"({"enum":[)";
  for (int i = 0; i < 100; ++i)
    many += (i ? ",\"" : "\"") + std::string("value-") + std::to_string(i) + "\"";
  auto cut = check_answer(*compiled(many + "]}"), R"("value-100")");
  REQUIRE(cut.issues.size() == 1);
  CHECK(contains(cut.issues[0].message, R"("value-14", … (100 values), found "value-100".)"));
  CHECK(cut.issues[0].message.size() < 300); // issues are cut at 300
  auto accents = check_answer(*compiled(R"({"const":"x"})"),
                              "\"" + std::string(39, 'a') + "\u00e9\u00e9\"");
  REQUIRE(accents.issues.size() == 1);
  CHECK(contains(accents.issues[0].message,
                 "found \"" + std::string(39, 'a') + "\"…."));
  // The words quote the answer: a secret in it is scrubbed before the cut
  // (an upstream echoing a key; the error reaches the caller and logs).
  std::string key = "sk-proj-" + std::string(48, 'Q');
  auto leaked = check_answer(*compiled(R"({"properties":{"k":{"enum":["x"]},"o":{"const":1}}})"),
                             R"({"k":")" + key + R"(","o":{")" + key + R"(":1}})");
  REQUIRE(leaked.issues.size() == 2);
  for (auto& issue : leaked.issues) {
    CAPTURE(issue.message);
    CHECK(issue.message.find("QQQQ") == std::string::npos);
    CHECK(contains(issue.message, "[redacted]"));
  }
  // ... and in a key named by a pointer.
  auto extra = check_answer(*compiled(R"({"additionalProperties":{"type":"string"}})"),
                            R"({")" + key + R"(":1})");
  REQUIRE_FALSE(extra.issues.empty());
  CHECK(extra.issues[0].pointer == "/[redacted]");
  CHECK(format_issues_line(extra.issues).find("QQQQ") == std::string::npos);
  // Under a property: the pointer, and `type` beside it.
  auto color = compiled(R"({"properties":{"c":{"type":"string","enum":["red","blue"]}}})");
  CHECK(format_issues_line(check_answer(*color, R"({"c":3})").issues)
        == "/c: Value type not permitted by 'type' constraint: expected "
           "string, found integer.; /c: Failed to match against any enum "
           "values: expected one of \"red\", \"blue\", found 3.");
}

TEST_CASE("structured: uniqueItems uses the same equality and names each repeated item once") {
  auto unique = compiled(R"({"uniqueItems":true})");
  auto issues = [&](const std::string& answer) {
    return format_issues_line(check_answer(*unique, answer).issues);
  };
  // valijson: doubles (2^53 + 1 and 2^53 were one value).
  CHECK(issues("[9007199254740993, 9007199254740992]").empty());
  CHECK(issues("[1, 1.0]") == "(root): Elements at indexes #0 and #1 are "
                              "equal (1): uniqueItems allows each value once.");
  CHECK(issues(R"([{"a":1,"b":[1]},{"b":[1.0],"a":1}])")
        == "(root): Elements at indexes #0 and #1 are equal "
           "({\"b\":[1],\"a\":1}): uniqueItems allows each value once.");
  CHECK(issues(R"([{"a":1},{"a":2},[1],[1,1],"1",1])").empty());
  // Each repeat once, against its first equal (valijson: every pair, 4,950
  // errors for 100 equal items).
  std::string same = "[";
  for (int i = 0; i < 100; ++i)
    same += i ? ",\"x\"" : "\"x\"";
  auto repeated = check_answer(*unique, same + "]");
  CHECK_FALSE(repeated.valid);
  REQUIRE(repeated.issues.size() == max_schema_issues + 1); // + "… more"
  CHECK(repeated.issues[0].message == "Elements at indexes #0 and #1 are "
                                      "equal (\"x\"): uniqueItems allows "
                                      "each value once.");
  CHECK(repeated.issues[1].message.rfind("Elements at indexes #0 and #2 ", 0) == 0);
  CHECK(contains(repeated.issues.back().message, "79 more"));
  CHECK(check_answer(*compiled(R"({"uniqueItems":false})"), "[1,1]").valid);
  CHECK(check_answer(*unique, R"("[1,1]")").valid); // arrays only
}

TEST_CASE("structured: valijson's garbled or missing words are mended") {
  CHECK(format_issues_line(check_answer(*compiled(R"({"contains":{"const":3}})"), "[1,2]").issues)
        == "(root): No item matches the subschema of the 'contains' constraint.");
  CHECK(check_answer(*compiled(R"({"contains":{"const":3}})"), "[1,3.0]").valid);
  // A schema of false fails without an error of valijson's: the issue
  // says so.
  auto never = check_answer(*compiled("false"), "1");
  CHECK_FALSE(never.valid);
  CHECK(format_issues_line(never.issues)
        == "(root): the value does not match the schema (a check that gives "
           "no reason failed: a schema of false, or a propertyNames whose "
           "subschema holds a $ref)");
}

TEST_CASE("structured: a key that fails propertyNames is named, with what is wrong with it") {
  // valijson checks a key without a results object: it said only "a check
  // that gives no reason failed".
  auto names = check_answer(*compiled(R"({"propertyNames":{"maxLength":3}})"),
                            R"({"abc":1,"abcd":2,"toolong":3})");
  CHECK_FALSE(names.valid);
  REQUIRE(names.issues.size() == 2);
  CHECK(names.issues[0].pointer == "/abcd");
  CHECK(names.issues[0].message.rfind("Property name: String should be no more than 3 characters", 0) == 0);
  CHECK(names.issues[1].pointer == "/toolong");
  CHECK(check_answer(*compiled(R"({"propertyNames":{"maxLength":3}})"),
                     R"({"abc":{"abcd":1}})").valid);
  // Our checks apply to keys too: a format, a pattern, an enum.
  auto dated = check_answer(*compiled(R"({"properties":{"days":{"propertyNames":{"format":"date"}}}})"),
                            R"({"days":{"2026-12-07":1,"yesterday":2}})");
  CHECK(format_issues_line(dated.issues)
        == "/days/yesterday: Property name: String should be a valid date "
           "(RFC 3339 full-date: YYYY-MM-DD, a day the month has)");
  auto picked = check_answer(*compiled(R"({"propertyNames":{"enum":["red","green"]}})"),
                             R"({"blue":1})");
  REQUIRE(picked.issues.size() == 1);
  CHECK(picked.issues[0].pointer == "/blue");
  CHECK(contains(picked.issues[0].message, "Property name: "));
  CHECK(contains(picked.issues[0].message, "\"red\""));
  // Of anyOf's words, the specific ones (not "Failed to validate against
  // any schemas allowed by anyOf").
  auto either = check_answer(*compiled(R"({"propertyNames":{"anyOf":[{"pattern":"^a"},{"pattern":"^b"}]}})"),
                             R"({"a1":1,"c1":2})");
  REQUIRE(either.issues.size() == 2);
  for (auto& issue : either.issues) {
    CHECK(issue.pointer == "/c1");
    CHECK(contains(issue.message, "Property name: "));
    CHECK_FALSE(contains(issue.message, "Failed to validate"));
  }
  // false: no key at all; the words say why.
  auto none = check_answer(*compiled(R"({"propertyNames":false})"), R"({"a":1})");
  CHECK(format_issues_line(none.issues)
        == "/a: Property name: not allowed by the subschema of 'propertyNames'");
  CHECK(check_answer(*compiled(R"({"propertyNames":false})"), "{}").valid);
  // A key's control bytes and length show inert, as in any pointer.
  auto odd = check_answer(*compiled(R"({"propertyNames":{"maxLength":1}})"),
                          R"({"a\u0001b":1})");
  REQUIRE(odd.issues.size() == 1);
  CHECK(odd.issues[0].pointer == "/a\\u0001b");
  // A subschema with a $ref names the whole document: valijson's check
  // alone, without a reason (as before).
  auto referred = check_answer(*compiled(R"({"definitions":{"short":{"maxLength":3}},"propertyNames":{"$ref":"#/definitions/short"}})"),
                               R"({"abcd":1})");
  CHECK_FALSE(referred.valid);
  CHECK(contains(format_issues_line(referred.issues), "gives no reason"));
  // propertyNames inside propertyNames never applies (a key is a string);
  // sixteen levels compile once each, not 2^16 copies.
  std::string chain = R"({"maxLength":1})";
  for (int i = 0; i < 15; ++i)
    chain = R"({"propertyNames":)" + chain + "}";
  auto nested = compile_schema(chain);
  REQUIRE(nested);
  CHECK(check_answer(**nested, R"({"abcd":{"efgh":1}})").valid);
  // An author's keyword named as ours is an unknown keyword: ignored (it
  // was our check; a subschema that $refs "#" would recurse forever).
  auto loop = compile_schema(R"({"x-pgw-property-names":{"$ref":"#"}})");
  REQUIRE(loop);
  CHECK(check_answer(**loop, R"({"a":{"b":1}})").valid);
  CHECK(check_answer(*compiled(R"({"x-pgw-pattern":"^a$"})"), R"("b")").valid);
}

TEST_CASE("structured: patternProperties are matched with RE2 and apply their subschemas") {
  // Refused before: valijson matches them with std::regex.
  auto tagged = compiled(R"({"type":"object","patternProperties":{"^x-":{"type":"string"},"^n_":{"type":"integer"}},"additionalProperties":false})");
  CHECK(check_answer(*tagged, R"({"x-a":"s","n_1":3})").valid);
  CHECK(check_answer(*tagged, "{}").valid);
  auto wrong = check_answer(*tagged, R"({"x-a":1})");
  CHECK_FALSE(wrong.valid);
  REQUIRE(wrong.issues.size() == 1);
  CHECK(wrong.issues[0].pointer == "/x-a");
  auto extra = check_answer(*tagged, R"({"x-a":"s","other":1})");
  REQUIRE(extra.issues.size() == 1);
  CHECK(extra.issues[0].message
        == "Object contains a property that could not be validated using "
           "'properties', 'patternProperties' or 'additionalProperties' "
           "constraints: 'other'.");
  // properties and patternProperties both apply to a key; additional-
  // Properties to the keys neither names.
  auto mixed = compiled(R"({"properties":{"id":{"type":"integer"}},"patternProperties":{"^[a-z]+$":{"type":"string"}},"additionalProperties":{"type":"boolean"}})");
  CHECK(check_answer(*mixed, R"({"ID":true,"name":"x"})").valid);
  auto id = check_answer(*mixed, R"({"id":1})");
  REQUIRE(id.issues.size() == 1);
  CHECK(id.issues[0].pointer == "/id");
  auto upper = check_answer(*mixed, R"({"ID":1})");
  REQUIRE(upper.issues.size() == 1);
  CHECK(upper.issues[0].pointer == "/ID");
  // Every matching pattern applies.
  auto both = compiled(R"({"patternProperties":{"a":{"minLength":2},"b":{"maxLength":3}}})");
  CHECK(check_answer(*both, R"({"ab":"xx"})").valid);
  CHECK_FALSE(check_answer(*both, R"({"ab":"x"})").valid);
  CHECK_FALSE(check_answer(*both, R"({"ab":"xxxx"})").valid);
  // A $ref in a pattern's subschema resolves in the whole schema, and a
  // schema that recurses through one validates nested answers.
  auto refd = compiled(R"({"definitions":{"s":{"type":"string"}},"patternProperties":{"^s":{"$ref":"#/definitions/s"}}})");
  CHECK(check_answer(*refd, R"({"s1":"a"})").valid);
  CHECK_FALSE(check_answer(*refd, R"({"s1":1})").valid);
  auto tree = compiled(R"({"type":"object","patternProperties":{".":{"$ref":"#"}},"additionalProperties":false})");
  CHECK(check_answer(*tree, R"({"a":{"b":{"c":{}}}})").valid);
  auto deep = check_answer(*tree, R"({"a":{"b":{"":{}}}})");
  REQUIRE(deep.issues.size() == 1);
  CHECK(deep.issues[0].pointer == "/a/b");
  CHECK_FALSE(check_answer(*tree, R"({"a":{"b":5}})").valid);
  // A pattern whose subschema is false: the key is named with the pattern.
  auto banned = check_answer(*compiled(R"({"patternProperties":{"^tmp":false}})"),
                             R"({"tmp1":1,"keep":2})");
  REQUIRE(banned.issues.size() == 1);
  CHECK(contains(banned.issues[0].message, "pattern '^tmp'"));
  // ECMA-262's dialect, and linear time: ^(a+)+$ against 40 a's and a !
  // (exponential for a backtracking matcher).
  auto t0 = std::chrono::steady_clock::now();
  auto nested = compiled(R"({"patternProperties":{"^(a+)+$":{"type":"integer"},"^[\\u4e00-\\u9fa5]+$":{"type":"string"}},"additionalProperties":{"type":"boolean"}})");
  CHECK(check_answer(*nested, R"({")" + std::string(40, 'a') + R"(!":true,"中文":"x"})").valid);
  CHECK_FALSE(check_answer(*nested, R"({"中文":1})").valid);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);
  CHECK(check_answer(*both, "5").valid); // objects only
  // Under anyOf, and empty: every check found its subschemas.
  auto branch = compiled(R"({"anyOf":[{"type":"string"},{"patternProperties":{"^a":{"type":"integer"}}}]})");
  CHECK(check_answer(*branch, R"({"a1":1})").valid);
  CHECK_FALSE(check_answer(*branch, R"({"a1":"x"})").valid);
  auto none = compiled(R"({"patternProperties":{},"additionalProperties":{"type":"integer"}})");
  CHECK(check_answer(*none, R"({"a":1})").valid);
  CHECK_FALSE(check_answer(*none, R"({"a":"x"})").valid);
  CHECK(check_answer(*compiled(R"({"patternProperties":{}})"), R"({"a":"x"})").valid);
  // Wherever the keyword sits, its check finds the subschemas valijson
  // parsed (an unlinked one would say "the schema could not be applied").
  const std::string strings = R"({"patternProperties":{"^a":{"type":"string"}}})";
  struct placed {
    std::string schema;
    const char* answer;
    bool valid;
  };
  const placed places[] = {
    {R"({"not":)" + strings + "}", R"({"a":1})", true},
    {R"({"not":)" + strings + "}", R"({"a":"s"})", false},
    {R"({"if":{"type":"object"},"then":)" + strings + "}", R"({"a":1})", false},
    {R"({"if":{"type":"array"},"else":)" + strings + "}", R"({"a":1})", false},
    {R"({"items":[)" + strings + "]}", R"([{"a":1}])", false},
    {R"({"items":[{}],"additionalItems":)" + strings + "}", R"([{},{"a":1}])", false},
    {R"({"items":)" + strings + "}", R"([{"a":"s"},{"a":1}])", false},
    {R"({"dependencies":{"d":)" + strings + "}}", R"({"d":0,"a":1})", false},
    {R"({"contains":{"allOf":[)" + strings + R"(],"required":["a"]}})", R"([{"a":1}])", false},
    {R"({"contains":{"allOf":[)" + strings + R"(],"required":["a"]}})", R"([{"a":"s"}])", true},
    {R"({"$ref":"#/definitions/p","definitions":{"p":)" + strings + "}}", R"({"a":1})", false},
    {R"({"patternProperties":{"^o":)" + strings + "}}", R"({"o":{"a":1}})", false},
    {R"({"patternProperties":{"^z":{}},"additionalProperties":)" + strings + "}", R"({"q":{"a":1}})", false},
    {R"({"oneOf":[)" + strings + R"(,{"type":"array"}]})", R"({"a":1})", false},
    {R"({"anyOf":[{"type":"array"},)" + strings + "]}", R"({"a":"s"})", true},
    {R"({"propertyNames":)" + strings + "}", R"({"a":1})", true},
  };
  for (auto& p : places) {
    CAPTURE(p.schema);
    CAPTURE(p.answer);
    auto check = check_answer(*compiled(p.schema), p.answer);
    CHECK(check.valid == p.valid);
    for (auto& issue : check.issues)
      CHECK_FALSE(contains(issue.message, "could not be applied"));
  }
  // A key is matched within the pattern bounds, as a string by pattern.
  auto big = check_answer(*compiled(R"({"patternProperties":{"^.{1,1000}$":{}}})"),
                          R"({")" + std::string(3000, 'a') + R"(":1})");
  REQUIRE(big.issues.size() == 1);
  CHECK(contains(big.issues[0].message, "a string of 3000 bytes is longer than 2048"));
}

TEST_CASE("structured: a pattern is read as ECMA-262 writes it where RE2 can run the same") {
  struct row {
    const char* pattern; // as JSON writes it
    const char* valid;   // an answer string (JSON) that matches
    const char* invalid; // one that does not
  };
  const row rows[] = {
    // Refused before: RE2 has no \u escape.
    {R"(^[\\u4e00-\\u9fa5]+$)", R"("中文")", R"("abc")"},
    {R"(^caf\\u00e9$)", R"("café")", R"("cafe")"},
    {R"(^\\uD83D\\uDE00$)", R"("😀")", R"("\ud83d")"},
    {R"(^\\u{1F600}$)", R"("😀")", R"("x")"},
    {R"(^[a\\u005d]+$)", R"("a]a")", R"("a[")"},
    // Named groups: RE2 wrote (?P<name>.
    {R"(^(?<year>\\d{4})-(?<month>\\d{2})$)", R"("2026-12")", R"("26-12")"},
    {R"(^a\\cJb$)", R"("a\nb")", R"("ab")"},
    {R"(^[^]$)", R"("\n")", R"("ab")"},
    // ECMA's white space: RE2's \s has no no-break space.
    {R"(^\\s$)", R"("\u00a0")", R"("x")"},
    {R"(^[\\s]+$)", R"("\u2028\ufeff\u000b")", R"("x")"},
    {R"(^\\S+$)", R"("中文")", R"("a\u00a0b")"},
    {R"(^[^\\s]+$)", R"("ab")", R"("a\u3000")"},
    // Escapes RE2 shares pass as written.
    {R"(^\\[x\\]\\/\\d+$)", R"("[x]/12")", R"("[x]/a")"},
  };
  for (auto& r : rows) {
    std::string pattern = r.pattern;
    CAPTURE(pattern);
    auto schema = compiled(R"({"type":"string","pattern":")" + pattern + "\"}");
    CHECK(check_answer(*schema, r.valid).valid);
    CHECK_FALSE(check_answer(*schema, r.invalid).valid);
  }
  CHECK(check_answer(*compiled(R"({"pattern":"^[]"})"), R"("")").valid == false);
  // What no UTF-8 string holds, and what RE2 cannot run, are refused.
  CHECK(compile_error(R"({"pattern":"^\\uD83D$"})")
        == "schema /pattern: \\uD83D is half of a UTF-16 surrogate pair, not "
           "a character (write the pair, or \\u{...})");
  CHECK(contains(compile_error(R"({"pattern":"(?<=a)b"})"), "no lookaround"));
  CHECK(contains(compile_error(R"({"pattern":"(?<y>a)\\k<y>"})"),
                 "no lookaround or backreferences"));
}

TEST_CASE("structured: a string or key holding U+0000 is an issue, not checked up to the NUL") {
  // valijson's adapter read "a\u0000b" as "a": it matched all three.
  for (auto schema : {R"({"enum":["a"]})", R"({"maxLength":1})",
                      R"({"pattern":"^a$"})"}) {
    CAPTURE(schema);
    auto check = check_answer(*compiled(schema), R"("a\u0000b")");
    CHECK_FALSE(check.valid);
    CHECK(format_issues_line(check.issues)
          == "(root): the string holds U+0000 (NUL), which pgw does not "
             "check against a schema");
    CHECK(check_answer(*compiled(schema), R"("a")").valid);
  }
  auto any = compiled(R"({"type":"object"})");
  CHECK(format_issues_line(check_answer(*any, R"({"x":[1,"ok","z\u0000"]})").issues)
        == "/x/2: the string holds U+0000 (NUL), which pgw does not check "
           "against a schema");
  CHECK(format_issues_line(check_answer(*any, R"({"k\u0000/":1})").issues)
        == "/k\\u0000~1: the key holds U+0000 (NUL), which pgw does not "
           "check against a schema");
  CHECK(check_answer(*any, R"({"k":"\u0001"})").valid);
  // In a schema (a pattern, a name, an enum value read short): refused.
  CHECK(compile_error(R"({"properties":{"a":{"pattern":"^a\u0000|b"}}})")
        == "schema /properties/a/pattern: the string holds U+0000 (NUL), "
           "which pgw does not read in a schema");
  CHECK(compile_error(R"({"required":["a\u0000b"]})")
        == "schema /required/0: the string holds U+0000 (NUL), which pgw "
           "does not read in a schema");
}

TEST_CASE("structured: a $ref fragment is a JSON pointer, percent-encoded") {
  // RFC 6901 in a URI fragment: ~1 is /, ~0 is ~, then %XX are bytes; the
  // pattern under the target is renamed to pgw's RE2 check there too.
  const std::pair<const char*, const char*> rows[] = {
    {"a b", "a%20b"}, {"a/b", "a~1b"}, {"a~b", "a~0b"},
    {"a%b", "a%25b"}, {"\xc3\xa9", "%C3%A9"}, {"a~1b", "a~01b"},
  };
  for (auto& [key, ref] : rows) {
    CAPTURE(key);
    auto schema = compiled(std::string(R"({"definitions":{")") + key
                           + R"(":{"type":"string","pattern":"^a+$"}},)"
                             R"("properties":{"x":{"$ref":"#/definitions/)"
                           + ref + R"("}}})");
    CHECK(check_answer(*schema, R"({"x":"aa"})").valid);
    CHECK(format_issues_line(check_answer(*schema, R"({"x":"b"})").issues)
          == "/x: Failed to match regex specified by 'pattern' constraint.");
    CHECK(format_issues_line(check_answer(*schema, R"({"x":1})").issues)
          == "/x: Value type not permitted by 'type' constraint: expected "
             "string, found integer.");
  }
  // A fragment naming nothing is refused, naming it.
  CHECK(compile_error(R"({"definitions":{"a b":{}},"$ref":"#/definitions/a%2"})")
        == R"(schema /$ref: $ref "#/definitions/a%2" does not resolve in the schema)");
}

TEST_CASE("structured: multipleOf is exact for integers and tolerant of decimal rounding") {
  struct row {
    const char* divisor;
    const char* answer;
    bool valid;
  };
  const row rows[] = {
    {"1", "2", true},
    {"1", "2.5", false},                   // valijson: valid (truncated)
    {"3", "9", true},
    {"3", "-9", true},
    {"3", "10", false},
    {"3", "3.5", false},                   // valijson: valid (truncated)
    {"3", "-9223372036854775808", false},  // INT64_MIN: exact
    {"3", "1e300", true},                  // valijson: undefined behaviour
    {"3", "0", true},
    {"0.1", "0.3", true},
    {"0.01", "0.07", true},
    {"0.0001", "0.0075", true},
    {"0.0001", "0.00751", false},
    {"0.1", "1e20", true},                 // a quotient past 2^53 is whole
    {"1e-300", "1e300", false},            // the quotient overflows
    {"2.5", "7.5", true},
    {"2.5", "7", false},
  };
  for (auto& r : rows) {
    std::string divisor = r.divisor, answer = r.answer;
    CAPTURE(divisor);
    CAPTURE(answer);
    auto schema = compiled(std::string(R"({"multipleOf":)") + r.divisor + "}");
    auto check = check_answer(*schema, r.answer);
    CHECK(check.valid == r.valid);
    if (!r.valid) {
      REQUIRE(check.issues.size() == 1);
      CHECK(check.issues[0].message
            == std::string("Value should be a multiple of ") + r.divisor);
    }
  }
  // Non-numbers pass; nested and under a $ref as anywhere else.
  auto nested = compiled(R"({"type":"object","properties":{"n":{"$ref":"#/definitions/even"}},"definitions":{"even":{"multipleOf":2}}})");
  CHECK(check_answer(*nested, R"({"n":4})").valid);
  CHECK_FALSE(check_answer(*nested, R"({"n":4.5})").valid);
  CHECK(check_answer(*compiled(R"({"multipleOf":2})"), R"("text")").valid);
}

TEST_CASE("structured: a schema's patterns are bounded in number and size") {
  auto t0 = std::chrono::steady_clock::now();
  // 256 patterns compile; the 257th is refused, naming where.
  CHECK(compile_schema(with_patterns(256, "^[a-z]+$", "many")));
  CHECK(contains(compile_error(with_patterns(257, "^[a-z]+$", "too-many")),
                 "schema /properties/p256/pattern: more than 256 patterns"));
  // One pattern holds at most 1 MiB of RE2 state: \pL{300} (357,904
  // instructions) is refused; ^.{1,500}$ (4,501) compiles.
  CHECK(contains(compile_error(with_patterns(1, "\\\\pL{300}", "big")),
                 "schema /properties/p0/pattern: larger than pgw runs: it would take more than 1024 KiB of RE2 memory"));
  auto bounded = compiled(with_patterns(1, "^.{1,500}$", "dots"));
  CHECK(check_answer(*bounded, R"({"p0":"abc"})").valid);
  CHECK_FALSE(check_answer(*bounded, R"({"p0":""})").valid);
  // Together at most 2^17 instructions: .{1000} is 8,004, 16 fit.
  CHECK(compile_schema(with_patterns(16, ".{1000}", "dots-16")));
  CHECK(contains(compile_error(with_patterns(17, ".{1000}", "dots-17")),
                 "schema /properties/p16/pattern: the schema's patterns "
                 "compile to more than 131072 RE2 instructions together "
                 "(this one: 8004"));
  // A 128 KiB schema of such patterns is refused at once (it held
  // gigabytes and compiled for most of a minute).
  auto huge = with_patterns(400, "\\\\pL{300}", "huge");
  CHECK(huge.size() > 16000);
  CHECK(contains(compile_error(huge), "larger than pgw runs"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
}

TEST_CASE("structured: the schema cache holds at most 256 patterns") {
  auto a = compiled(with_patterns(200, "^a", "cache-a"));
  CHECK(compiled(with_patterns(200, "^a", "cache-a")).get() == a.get());
  // 200 + 200 would pass 256: the cache starts over with the new one, and
  // again when the first comes back.
  auto b = compiled(with_patterns(200, "^a", "cache-b"));
  CHECK(compiled_schema_count() == 1);
  CHECK(compiled(with_patterns(200, "^a", "cache-a")).get() != a.get());
  CHECK(compiled(with_patterns(200, "^a", "cache-b")).get() != b.get());
}

TEST_CASE("structured: a schema is compiled once per digest") {
  auto text = R"({"type":"object","title":"digest-test-1"})";
  auto before = compiled_schema_count();
  auto a = compiled(text);
  auto b = compiled(text);
  CHECK(a.get() == b.get());
  CHECK(compiled_schema_count() == before + 1);
  auto c = compiled(R"({"type":"object","title":"digest-test-2"})");
  CHECK(c.get() != a.get());
}

TEST_CASE("structured: the strict subset") {
  struct row {
    const char* schema;
    bool strict;
  };
  const row rows[] = {
    {R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false})", true},
    {R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"]})", false},
    {R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"],"additionalProperties":false})", false},
    {R"({"type":"object","properties":{"a":{"type":"string","minLength":1}},"required":["a"],"additionalProperties":false})", false},
    {R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"],"additionalProperties":false}}},"required":["a"],"additionalProperties":false})", true},
    {R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"x":{"type":"number"}}}}},"required":["a"],"additionalProperties":false})", false},
    {R"({"type":"array","items":{"type":"string"}})", false},
    {R"({"anyOf":[{"type":"object"}]})", false},
    {R"({"type":"object","properties":{"e":{"enum":["x","y"]},"o":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["e","o"],"additionalProperties":false})", true},
  };
  for (auto& r : rows) {
    CAPTURE(r.schema);
    CHECK(fits_strict_subset(json::parse(r.schema)) == r.strict);
  }
}

TEST_CASE("structured: the request body per rung") {
  source_config src;
  src.name = "a";
  src.model = "m";
  chat_request req;
  req.messages.push_back({"user", "who?", {}});
  req.schema = person_schema;
  auto body_for = [&](schema_strategy rung, bool with_system = false) {
    auto r = req;
    r.strategy = rung;
    if (with_system)
      r.messages.insert(r.messages.begin(), {"system", "Be brief.", {}});
    auto body = build_chat_body(r, src, false);
    REQUIRE(body);
    return json::parse(*body).as_object();
  };
  SUBCASE("json_schema (also for auto): strict when the schema fits") {
    for (auto rung : {schema_strategy::json_schema, schema_strategy::auto_select}) {
      auto b = body_for(rung);
      auto& rf = b.at("response_format").as_object();
      CHECK(rf.at("type") == "json_schema");
      CHECK(rf.at("json_schema").at("name") == "response");
      CHECK(rf.at("json_schema").at("strict") == false); // minimum is not in the subset
      CHECK(rf.at("json_schema").at("schema") == json::parse(person_schema));
      CHECK(b.at("messages").as_array().size() == 1);
    }
  }
  SUBCASE("json_object: the format plus the schema in a new system message") {
    auto b = body_for(schema_strategy::json_object);
    CHECK(b.at("response_format") == json::parse(R"({"type":"json_object"})"));
    auto& msgs = b.at("messages").as_array();
    REQUIRE(msgs.size() == 2);
    CHECK(msgs[0].at("role") == "system");
    CHECK(std::string(msgs[0].at("content").as_string())
          == schema_instructions(json::serialize(json::parse(person_schema))));
  }
  SUBCASE("prompt: instructions appended to the caller's system message, no format") {
    req.extra_body = R"({"response_format":{"type":"json_object"}})";
    auto b = body_for(schema_strategy::prompt, true);
    CHECK_FALSE(b.contains("response_format"));
    auto& msgs = b.at("messages").as_array();
    REQUIRE(msgs.size() == 2);
    std::string sys{msgs[0].at("content").as_string()};
    CHECK(sys.rfind("Be brief.\n\nAnswer with one JSON value only", 0) == 0);
  }
  SUBCASE("no schema: no format") {
    req.schema.clear();
    auto b = body_for(schema_strategy::json_schema);
    CHECK_FALSE(b.contains("response_format"));
  }
}

TEST_CASE("structured: the ladder per source") {
  source_config openai;
  openai.name = "o";
  source_config deepseek;
  deepseek.name = "d";
  deepseek.profile.structured = {schema_strategy::json_object,
                                 schema_strategy::prompt};
  structured_ladder ladder;
  auto any = schema_strategy::auto_select;
  CHECK(ladder.rung_for(openai, any) == schema_strategy::json_schema);
  CHECK(ladder.rung_for(deepseek, any) == schema_strategy::json_object);
  // A forced rung is used as it is.
  CHECK(ladder.rung_for(deepseek, schema_strategy::json_schema)
        == schema_strategy::json_schema);
  // Learned: one rung down per rejection, per source, remembered.
  CHECK(ladder.lower(openai, schema_strategy::json_schema)
        == schema_strategy::json_object);
  CHECK(ladder.rung_for(openai, any) == schema_strategy::json_object);
  CHECK(ladder.rung_for(deepseek, any) == schema_strategy::json_object);
  // A second call that was in flight with the old rung moves it no further.
  CHECK(ladder.lower(openai, schema_strategy::json_schema)
        == schema_strategy::json_object);
  CHECK(ladder.lower(openai, schema_strategy::json_object)
        == schema_strategy::prompt);
  CHECK(ladder.rung_for(openai, any) == schema_strategy::prompt);
  CHECK_FALSE(ladder.lower(openai, schema_strategy::prompt));
  CHECK(ladder.lower(deepseek, schema_strategy::json_object)
        == schema_strategy::prompt);
}

TEST_CASE("structured: which 4xx rejects the response format") {
  struct row {
    outcome kind;
    int status;
    const char* code;
    const char* message;
    bool rejects;
  };
  const row rows[] = {
    {outcome::request_rejected, 400, "invalid_request_error",
     "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.", true},
    {outcome::request_rejected, 400, "unsupported_response_format", "", true},
    {outcome::request_rejected, 400, "invalid_request_error", "messages must not be empty", false},
    {outcome::request_rejected, 422, "", "Response_Format json_schema unsupported", true},
    {outcome::transient, 500, "", "response_format", false},
    {outcome::result_invalid, 200, "", "response_format", false},
  };
  for (auto& r : rows) {
    CAPTURE(r.message);
    attempt_result res;
    res.kind = r.kind;
    res.http_status = r.status;
    res.error_code = r.code;
    res.error_message = r.message;
    CHECK(rejects_response_format(res) == r.rejects);
  }
}

TEST_CASE("structured: the re-ask messages carry the bad answer and the errors") {
  std::vector<chat_message> original{{"system", "s", {}}, {"user", "u", {}}};
  auto msgs = reask_messages(original, R"({"age":"x"})",
                             {{"/age", "Value type not permitted by 'type' constraint: expected integer, found string."},
                              {"", "Missing required property 'name'."}});
  REQUIRE(msgs.size() == 4);
  CHECK(msgs[2].role == "assistant");
  CHECK(msgs[2].content == R"({"age":"x"})");
  CHECK(msgs[3].role == "user");
  CHECK(msgs[3].content
        == "Your previous answer does not match the required JSON Schema.\n"
           "Validation errors (JSON pointer: message):\n"
           "/age: Value type not permitted by 'type' constraint: expected "
           "integer, found string.\n"
           "(root): Missing required property 'name'.\n"
           "Answer again with one JSON value only that conforms to the "
           "schema, with no code fences and no text around it.");
  auto long_answer = std::string(max_echoed_answer_bytes + 100, 'x');
  auto capped = reask_messages(original, long_answer, {{"", "e"}});
  CHECK(capped[2].content.size() < max_echoed_answer_bytes + 40);
  CHECK(capped[2].content.find("[answer truncated]") != std::string::npos);
}

TEST_CASE("structured: a recursive schema that descends into the answer is bounded by the answer's depth") {
  // A tree: `$ref` back to the root through items, a legitimate loop.
  auto tree = compiled(R"({"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}})");
  auto nest = [](int levels, const std::string& leaf) {
    std::string text = leaf;
    for (int i = 0; i < levels; ++i)
      text = R"({"children":[)" + text + "]}";
    return text;
  };
  // 15 levels and a leaf are 31 nested containers; 33 do not parse.
  CHECK(check_answer(*tree, nest(15, "{}")).valid);
  auto wrong = check_answer(*tree, nest(15, "3"));
  CHECK_FALSE(wrong.valid);
  REQUIRE_FALSE(wrong.issues.empty());
  CHECK(wrong.issues.front().pointer.size() == 15 * std::string("/children/0").size());
  auto deep = check_answer(*tree, nest(17, "{}"));
  CHECK_FALSE(deep.valid);
  CHECK(contains(deep.issues.front().message, "not valid JSON"));
}

TEST_CASE("structured: schemas whose checks multiply or nest without bound are refused") {
  // Each level of the answer doubles the checks: 2^32 for a deep answer.
  CHECK(contains(compile_error(R"({"anyOf":[{"items":{"$ref":"#"}},{"items":{"$ref":"#"}}]})"),
                 "schema (root): validating one answer value may take "));
  CHECK(contains(compile_error(R"({"anyOf":[{"items":{"$ref":"#"}},{"items":{"$ref":"#"}}]})"),
                 "checks, more than 100000"));
  // A diamond of 20 definitions, each referring twice to the next: 2^20
  // checks on one value.
  std::string defs;
  for (int i = 0; i < 20; ++i)
    defs += (i ? "," : "") + std::string(R"("d)") + std::to_string(i)
            + R"(":{"allOf":[{"$ref":"#/definitions/d)" + std::to_string(i + 1)
            + R"("},{"$ref":"#/definitions/d)" + std::to_string(i + 1) + R"("}]})";
  defs += R"(,"d20":{"type":"string"})";
  CHECK(contains(compile_error(R"({"$ref":"#/definitions/d0","definitions":{)" + defs + "}}"),
                 "more than 100000"));
  // A chain of 300 definitions, each referring to the next (listed last
  // first: each is walked once, shallow). valijson needs 1-2 KiB of stack
  // per level; 250 links (503 levels) overflowed a 512 KiB stack.
  std::string chain;
  for (int i = 299; i >= 0; --i)
    chain += R"("c)" + std::to_string(i)
             + R"(":{"allOf":[{"$ref":"#/definitions/c)" + std::to_string(i + 1) + R"("}]},)";
  chain += R"("c300":{"type":"string"})";
  CHECK(compile_error(R"({"definitions":{)" + chain + R"(},"properties":{"x":{"$ref":"#/definitions/c0"}}})")
        == "schema (root): subschemas (counting $ref targets) nest 603 deep "
           "in an answer, more than 512");
  // The draft-7 meta-schema itself (recursive through anyOf and items)
  // stays within the bounds.
  CHECK(compile_schema(R"({"definitions":{"schemaArray":{"type":"array","minItems":1,"items":{"$ref":"#"}}},"type":["object","boolean"],"properties":{"items":{"anyOf":[{"$ref":"#"},{"$ref":"#/definitions/schemaArray"}]},"allOf":{"$ref":"#/definitions/schemaArray"},"properties":{"type":"object","additionalProperties":{"$ref":"#"}},"not":{"$ref":"#"}}})"));
}

TEST_CASE("structured: big schemas and answers are checked in bounded time") {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  // 60,000 wrong items: every error was compared with every other (27 s).
  auto strings = compiled(R"({"type":"array","items":{"type":"string"}})");
  std::string answer = "[";
  for (int i = 0; i < 60000; ++i)
    answer += std::string(i ? "," : "") + std::to_string(i);
  answer += "]";
  auto t0 = clock::now();
  auto check = check_answer(*strings, answer);
  CHECK(seconds_since(t0) < 2.0);
  CHECK_FALSE(check.valid);
  REQUIRE(check.issues.size() == max_schema_issues + 1);
  CHECK(check.issues.front().pointer == "/0");
  CHECK(check.issues.back().message == "... and 59980 more errors");
  // `required` of 60,000 names: the meta-schema's uniqueItems compared
  // every pair (35 s). Over the size limit now; 10,000 names compile.
  std::string names;
  for (int i = 0; i < 60000; ++i)
    names += std::string(i ? "," : "") + "\"n" + std::to_string(i) + "\"";
  auto big = R"({"type":"object","required":[)" + names + "]}";
  t0 = clock::now();
  CHECK(compile_error(big) == "schema: " + std::to_string(big.size())
                                + " bytes, larger than 131072 bytes");
  names.clear();
  for (int i = 0; i < 10000; ++i)
    names += std::string(i ? "," : "") + "\"m" + std::to_string(i) + "\"";
  auto many = compiled(R"({"type":"object","required":[)" + names + "]}");
  CHECK(seconds_since(t0) < 2.0);
  auto missing = check_answer(*many, "{}");
  REQUIRE(missing.issues.size() == max_schema_issues + 1);
  CHECK(contains(missing.issues.front().message, "'m0'"));
  // uniqueItems compares every pair of items: 60,000 items are too many.
  auto unique = compiled(R"({"type":"array","uniqueItems":true})");
  t0 = clock::now();
  auto pairs = check_answer(*unique, answer);
  CHECK(seconds_since(t0) < 2.0);
  REQUIRE(pairs.issues.size() == 1);
  CHECK(pairs.issues[0].message
        == "the answer has 60001 values: validating it against this schema "
           "could take 1800030001 checks, more than 20000000");
  CHECK(check_answer(*unique, "[1,2,3]").valid);
  CHECK_FALSE(check_answer(*unique, "[1,2,1]").valid);
}

TEST_CASE("structured: the issues on one line") {
  auto schema = compiled(R"({"type":"object","required":["a\nb","c"]})");
  auto check = check_answer(*schema, "{}");
  CHECK(format_issues(check.issues).find('\n') != std::string::npos);
  auto line = format_issues_line(check.issues);
  CHECK(line.find('\n') == std::string::npos);
  // A line break inside a name shows as JSON writes it (issues show answer
  // and schema text inert: no control byte reaches a terminal or a log).
  CHECK(contains(line, "'a\\u000ab'.; (root): Missing required property 'c'."));
}

TEST_CASE("structured: an answer's control bytes and long keys show inert "
          "and bounded in its issues (found by fuzz_structured)") {
  auto schema = compiled(R"({"type":"object","additionalProperties":false,)"
                         R"("properties":{"a":{"type":"object",)"
                         R"("additionalProperties":{"type":"string"}}}})");
  std::string long_key(5000, 'k');
  auto check = check_answer(
    *schema, R"({"a":{"\u001b]0;title\u0007":1,")" + long_key + R"(":2}})");
  REQUIRE_FALSE(check.valid);
  bool escaped = false;
  for (auto& issue : check.issues) {
    CAPTURE(issue.pointer);
    CAPTURE(issue.message);
    for (unsigned char c : issue.pointer + issue.message)
      CHECK((c >= 0x20 && c != 0x7f));
    CHECK(issue.pointer.size() <= 3 + 64 + 3); // "/a/", the key cut, "..."
    CHECK(issue.message.size() <= 300 + 3 + 6);
    escaped = escaped || contains(issue.pointer, "\\u001b]0;title\\u0007");
  }
  CHECK(escaped);
}

TEST_CASE("structured: a caller's pattern runs in linear time on a model's "
          "answer (RE2, not valijson's backtracking std::regex)") {
  // ^(a+)+$ backtracks exponentially in std::regex: 26 characters took
  // 6 s, these 2000 would not end (found by fuzz_structured).
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  std::string subject = "\"" + std::string(1999, 'a') + "b\"";
  auto t0 = clock::now();
  auto direct = compiled(R"({"type":"string","pattern":"^(a+)+$"})");
  auto check = check_answer(*direct, subject);
  CHECK_FALSE(check.valid);
  REQUIRE(check.issues.size() == 1);
  CHECK(check.issues[0].message
        == "Failed to match regex specified by 'pattern' constraint.");
  CHECK(check_answer(*direct, "\"aaa\"").valid);
  // Under a key of the author's, reached by $ref (OpenAPI's layout), and
  // inside an array's items: the same.
  auto nested = compiled(
    R"({"type":"array","items":{"$ref":"#/components/schemas/S"},)"
    R"("components":{"schemas":{"S":{"type":"string","pattern":"^(a|a)*$"}}}})");
  CHECK_FALSE(check_answer(*nested, "[" + subject + "]").valid);
  CHECK(check_answer(*nested, R"(["aa","a"])").valid);
  CHECK(seconds_since(t0) < 2.0);
  // Patterns search (ECMA-262), as before: unanchored matches anywhere.
  auto search = compiled(R"({"type":"string","pattern":"b+"})");
  CHECK(check_answer(*search, "\"abba\"").valid);
  CHECK_FALSE(check_answer(*search, "\"aaa\"").valid);
}

TEST_CASE("structured: date and time formats are RFC 3339's, read in one pass") {
  const format_row rows[] = {
    {"date", "2026-12-07", true},
    {"date", "2024-02-29", true},        // leap year
    {"date", "2000-02-29", true},        // divisible by 400
    {"date", "2026-02-29", false},       // valijson: valid (any year)
    {"date", "1900-02-29", false},       // divisible by 100
    {"date", "2026-04-31", false},
    {"date", "2026-13-01", false},
    {"date", "2026-00-10", false},
    {"date", "2026-01-00", false},
    {"date", "12026-01-01", false},      // valijson: valid (any digits)
    {"date", "2026-1-01", false},
    {"date", "2026-01-01T00:00:00Z", false},
    {"date", " 2026-01-01", false},
    {"time", "16:52:45Z", true},
    {"time", "16:52:45.123456+02:00", true},
    {"time", "16:52:45z", true},
    {"time", "23:59:60Z", true},         // a leap second
    {"time", "15:59:60-08:00", true},    // the same second, 8 h west
    {"time", "22:59:60Z", false},        // valijson: valid (any minute)
    {"time", "16:52:45", false},         // no offset
    {"time", "16:52:45|02:00", false},   // valijson: valid ('|' as a sign)
    {"time", "24:00:00Z", false},
    {"time", "16:60:00Z", false},
    {"time", "16:52:45.Z", false},
    {"time", "16:52:45+2:00", false},
    {"date-time", "2026-12-07T16:52:45Z", true},
    {"date-time", "2026-12-07t16:52:45.5-03:30", true},
    {"date-time", "1998-12-31T23:59:60Z", true},
    {"date-time", "2026-12-07 16:52:45Z", false},
    {"date-time", "2026-02-30T00:00:00Z", false},
    {"date-time", "2026-12-07T16:52:45Zjunk", false},
    {"color", "not checked", true},  // draft 7 lets a validator ignore it
    {"x-unknown", "(", true},
  };
  check_format_rows(rows, "RFC 3339");
  // A format constrains strings only (valijson threw on a number: "the
  // schema could not be applied").
  auto either = compiled(R"({"type":["string","integer"],"format":"date"})");
  CHECK(check_answer(*either, "5").valid);
  // Keys too, through propertyNames; and under a $ref'd key of the
  // author's.
  auto keys = compiled(R"({"type":"object","propertyNames":{"format":"date"}})");
  CHECK(check_answer(*keys, R"({"2026-12-07":1})").valid);
  CHECK_FALSE(check_answer(*keys, R"({"yesterday":1})").valid);
  auto ref = compiled(R"({"$ref":"#/components/schemas/D","components":{"schemas":{"D":{"type":"string","format":"date-time"}}}})");
  CHECK(check_answer(*ref, R"("2026-12-07T00:00:00Z")").valid);
  CHECK_FALSE(check_answer(*ref, R"("2026-12-07")").valid);
  // Linear: std::regex recursed per character and overflowed the stack
  // near 20,000; a megabyte is read in one pass, not bounded away.
  auto t0 = std::chrono::steady_clock::now();
  auto date = compiled(R"({"type":"string","format":"date"})");
  auto huge = check_answer(*date, "\"" + std::string(1000000, '1') + "\"");
  CHECK_FALSE(huge.valid);
  REQUIRE(huge.issues.size() == 1);
  CHECK(contains(huge.issues[0].message, "valid date"));
  auto long_time = compiled(R"({"type":"string","format":"time"})");
  CHECK(check_answer(*long_time, "\"16:52:45." + std::string(1000000, '1') + "Z\"").valid);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2.0);
}

TEST_CASE("structured: the formats of OpenAI's strict mode are checked too") {
  // All were passed unchecked before (valijson knows date and time only).
  const format_row rows[] = {
    {"email", "ada.lovelace+tag@example.com", true},
    {"email", "x@localhost", true},
    {"email", R"(\"john doe\"@example.org)", true},
    {"email", "a@[192.0.2.1]", true},
    {"email", "a@[IPv6:2001:db8::1]", true},
    {"email", "Ada <ada@example.com>", false},
    {"email", "ada@", false},
    {"email", "@example.com", false},
    {"email", "a..b@example.com", false},
    {"email", ".a@example.com", false},
    {"email", "a@exa_mple.com", false},
    {"email", "a@-example.com", false},
    {"email", "N/A", false},
    {"hostname", "api.example.com", true},
    {"hostname", "localhost", true},
    {"hostname", "xn--bcher-kva.example", true},
    {"hostname", "-bad.example", false},
    {"hostname", "a..b", false},
    {"hostname", "under_score.example", false},
    {"hostname", "example.com.", false},
    {"ipv4", "192.168.0.1", true},
    {"ipv4", "0.0.0.0", true},
    {"ipv4", "256.0.0.1", false},
    {"ipv4", "01.2.3.4", false},
    {"ipv4", "1.2.3", false},
    {"ipv4", "1.2.3.4.5", false},
    {"ipv4", "1.2.3.4 ", false},
    {"ipv6", "::1", true},
    {"ipv6", "2001:db8::ff00:42:8329", true},
    {"ipv6", "::ffff:192.0.2.1", true},
    {"ipv6", "fe80::1%eth0", false},
    {"ipv6", "2001:db8:::1", false},
    {"ipv6", "192.0.2.1", false},
    {"uuid", "123e4567-e89b-12d3-a456-426614174000", true},
    {"uuid", "123E4567-E89B-12D3-A456-426614174000", true},
    {"uuid", "123e4567e89b12d3a456426614174000", false},
    {"uuid", "123e4567-e89b-12d3-a456-42661417400g", false},
    {"duration", "P3Y6M4DT12H30M5S", true},
    {"duration", "PT1H30M", true},
    {"duration", "PT0.5S", true},
    {"duration", "P2W", true},
    {"duration", "P1D", true},
    {"duration", "P", false},
    {"duration", "PT", false},
    {"duration", "P1W2D", false},
    {"duration", "P1M1Y", false},
    {"duration", "P1.5DT1H", false},
    {"duration", "1 hour", false},
  };
  check_format_rows(rows, "String should be a valid ");
  auto mail = compiled(R"({"properties":{"to":{"type":"string","format":"email"}}})");
  CHECK(format_issues_line(check_answer(*mail, R"({"to":"nobody"})").issues)
        == "/to: String should be a valid email address (local-part@domain, "
           "RFC 5321, ASCII: no spaces, one @ outside quotes, a domain of "
           "letters, digits and hyphens)");
  CHECK(check_answer(*compiled(R"({"format":"email"})"), "7").valid); // strings only
  // inet_pton reads up to a NUL: "::44" NUL junk was an IPv6 address
  // (found by fuzz_structured through an email's address literal).
  using namespace std::string_view_literals;
  CHECK(format_problem("ipv6", "::44\0junk"sv));
  CHECK(format_problem("email", "a@[IPv6:::44\0junk]"sv));
  CHECK_FALSE(format_problem("ipv6", "::44"sv));
}

TEST_CASE("structured: idn-hostname is IDNA2008's and idn-email RFC 6531's") {
  // Passed unread before: draft 7 lets a validator ignore a format.
  const std::string long_label(64, 'a');
  const std::string long_unicode = [] {
    std::string out;
    for (int i = 0; i < 60; ++i)
      out += "\u00fc"; // encodes to more than 63 bytes of punycode
    return out;
  }();
  const std::string huge(2000, 'a');
  const format_row rows[] = {
    {"idn-hostname", "example.com", true},
    {"idn-hostname", "Example.COM", true},
    {"idn-hostname", "실례.테스트", true},
    {"idn-hostname", "bücher.de", true},
    {"idn-hostname", "xn--bcher-kva.de", true},
    {"idn-hostname", "l\u00b7l.cat", true},                // Catalan
    {"idn-hostname", "\u03b1\u0375\u03b2", true},          // keraia, Greek
    {"idn-hostname", "\u05d0\u05f3\u05d1", true},          // geresh
    {"idn-hostname", "\u30a2\u30fb", true},                // katakana dot
    {"idn-hostname", "\u0627\u0660\u0662", true},          // one digit set
    {"idn-hostname", "\u0915\u094d\u200d\u0937", true},    // ZWJ after virama
    {"idn-hostname", "\u302e실례.테스트", false},          // leading mark
    {"idn-hostname", "a\u00b7l", false},
    {"idn-hostname", "\u03b1\u0375", false},
    {"idn-hostname", "\u05f3\u05d1", false},
    {"idn-hostname", "a\u30fb", false},
    {"idn-hostname", "\u0627\u0660\u06f0", false},         // digits mixed
    {"idn-hostname", "\u200d\u0937", false},               // ZWJ alone
    {"idn-hostname", "ab--cd.com", false},                 // reserved --
    {"idn-hostname", "xn--X", false},                      // bad punycode
    {"idn-hostname", "-a.com", false},
    {"idn-hostname", "a b.com", false},
    {"idn-hostname", "under_score.com", false},
    {"idn-hostname", "\uff21\uff22.com", false},           // not mapped
    {"idn-hostname", "e\u0301.com", false},                // not NFC
    {"idn-hostname", "a..b", false},
    {"idn-hostname", "", false},
    {"idn-hostname", long_label.c_str(), false},
    {"idn-hostname", long_unicode.c_str(), false},
    {"idn-hostname", huge.c_str(), false},
    {"idn-email", "user@example.com", true},
    {"idn-email", "실례@실례.테스트", true},
    {"idn-email", R"(\"j ü\"@bücher.de)", true},
    {"idn-email", "ü@[192.0.2.1]", true},
    {"idn-email", "not an email", false},
    {"idn-email", "@bücher.de", false},
    {"idn-email", "a.@bücher.de", false},
    {"idn-email", "a@\uff21\uff22.com", false},
    {"idn-email", "a@ab--c.com", false},
    {"idn-email", "a@@b.com", false},
  };
  check_format_rows(rows, "String should be a valid internationalized ");
  auto host = compiled(R"({"properties":{"host":{"type":"string","format":"idn-hostname"}}})");
  CHECK(format_issues_line(check_answer(*host, R"({"host":"ab--cd"})").issues)
        == "/host: String should be a valid internationalized hostname (RFC "
           "5890: dot-separated labels of letters, digits and hyphens in any "
           "script that IDNA2008 allows, in Unicode NFC; at most 63 bytes a "
           "label and 253 in all once punycode-encoded)");
  // What hostname and email accept, the idn formats accept (but a
  // reserved "--").
  for (auto text : {"a.b.c", "xn--bcher-kva.de", "x1-y2.example"})
    CHECK_FALSE(format_problem("idn-hostname", text));
  using namespace std::string_view_literals;
  CHECK(format_problem("idn-hostname", "a\0b"sv));
}

TEST_CASE("structured: draft 7's reference formats and regex are checked") {
  // All were passed unchecked before (draft 7 lets a validator ignore a
  // format; valijson knows date and time only).
  const format_row rows[] = {
    {"uri", "http://foo.bar/?baz=qux#quux", true},
    {"uri", "http://foo.com/blah_(wikipedia)_blah#cite-1", true},
    {"uri", "http://foo.bar/?q=Test%20URL-encoded%20stuff", true},
    {"uri", "http://-.~_!$&'()*+,;=:%40:80%2f::::::@example.com", true},
    {"uri", "http://223.255.255.254", true},
    {"uri", "ldap://[2001:db8::7]/c=GB?objectClass?one", true},
    {"uri", "http://[v1.fe80::a+en1]:8080/", true},
    // RFC 6874's zone: "%25" then unreserved or percent-encoded.
    {"uri", "http://[fe80::1%25eth0]:8080/", true},
    {"uri", "http://[fe80::1%25en%2F1]/", true},
    {"uri", "http://[fe80::1%eth0]/", false},
    {"uri", "http://[fe80::1%25]/", false},
    {"uri", "http://[fe80::1%25a!b]/", false},
    {"uri", "http://[v1.x%25a]/", false},
    {"uri", "mailto:John.Doe@example.com", true},
    {"uri", "tel:+1-816-555-1212", true},
    {"uri", "urn:oasis:names:specification:docbook:dtd:xml:4.1.2", true},
    {"uri", "//foo.bar/?baz=qux#quux", false},
    {"uri", "/abc", false},
    {"uri", "abc", false},
    {"uri", "http:// shouldfail.com", false},
    {"uri", ":// should fail", false},
    {"uri", "bar,baz:foo", false},
    {"uri", "http://example.com/a%zz", false},
    {"uri", "http://localhost:-8080", false},
    {"uri", "http://[::1/", false},
    {"uri", "http://[::g]/", false},
    {"uri", "https://example.com/\u00e9", false},
    {"uri", "https://example.com/#a#b", false},
    {"uri-reference", "http://foo.bar/?baz=qux#quux", true},
    {"uri-reference", "//foo.bar/?baz=qux#quux", true},
    {"uri-reference", "/abc", true},
    {"uri-reference", "abc", true},
    {"uri-reference", "#fragment", true},
    {"uri-reference", "", true},
    {"uri-reference", "./a:b", true},
    {"uri-reference", R"(\\\\WINDOWS\\fileshare)", false},
    {"uri-reference", R"(#frag\\ment)", false},
    {"uri-reference", "1:a", false},
    {"uri-reference", "a b", false},
    {"iri", "http://\u0192\u00f8\u00f8.\u00df\u00e5r/?\u2202\u00e9\u0153=\u03c0\u00eex#\u03c0\u00ee\u00fcx", true},
    {"iri", "http://[2001:db8::1]:8080/", true},
    {"iri", "http://2001:0db8:85a3:0000:0000:8a2e:0370:7334", false},
    {"iri", "/abc", false},
    {"iri-reference", "//\u0192\u00f8\u00f8.\u00df\u00e5r/?\u2202\u00e9\u0153=\u03c0\u00eex#\u03c0\u00ee\u00fcx", true},
    {"iri-reference", "/\u00e2\u03c0\u03c0", true},
    {"iri-reference", R"(\\\\WINDOWS\\fil\u00eb\u00df\u00e5r\u00e9)", false},
    {"iri-reference", R"(#\u0192r\u00e4g\\m\u00eant)", false},
    {"uri-template", "http://example.com/dictionary/{term:1}/{term}", true},
    {"uri-template", "dictionary/{term:1}/{term}", true},
    {"uri-template", "/users/{id}{?page,per_page}", true},
    {"uri-template", "{+path*}/x{.a.b}", true},
    {"uri-template", "", true},
    {"uri-template", "http://example.com/dictionary/{term:1}/{term", false},
    {"uri-template", "{a b}", false},
    {"uri-template", "{term:0}", false},
    {"uri-template", "{term:10000}", false},
    {"uri-template", "{}", false},
    {"uri-template", "{a.}", false},
    {"uri-template", "a}b", false},
    {"json-pointer", "/foo/bar~0/baz~1/%a", true},
    {"json-pointer", "", true},
    {"json-pointer", "/", true},
    {"json-pointer", "/foo//bar", true},
    {"json-pointer", "/~01", true},
    {"json-pointer", "/foo/bar~", false},
    {"json-pointer", "#", false},
    {"json-pointer", "#/a", false},
    {"json-pointer", "foo", false},
    {"json-pointer", "/~-1", false},
    {"json-pointer", "/~2", false},
    {"relative-json-pointer", "1", true},
    {"relative-json-pointer", "0/foo/bar", true},
    {"relative-json-pointer", "2/0/baz/1/zip", true},
    {"relative-json-pointer", "0#", true},
    {"relative-json-pointer", "120/foo/bar", true},
    {"relative-json-pointer", "/foo/bar", false},
    {"relative-json-pointer", "-1/foo/bar", false},
    {"relative-json-pointer", "0##", false},
    {"relative-json-pointer", "01/a", false},
    {"relative-json-pointer", "01#", false},
    {"relative-json-pointer", "", false},
    {"relative-json-pointer", "1/a~", false},
    {"regex", "^[a-z]+$", true},
    {"regex", R"(([abc])+\\s+$)", true},
    {"regex", R"((?<year>\\d{4})-\\k<year>)", true},
    {"regex", "(?=a)b", true},
    {"regex", R"((a)\\1)", true},
    {"regex", R"(\\q)", true},
    {"regex", "a{1001}", true},
    {"regex", R"([\\w-a])", true},
    {"regex", "]{", true},
    {"regex", "^(abc]", false},
    {"regex", "[a-z", false},
    {"regex", "a)", false},
    {"regex", "*a", false},
    {"regex", "a**", false},
    {"regex", "[z-a]", false},
    {"regex", R"(a\\)", false},
  };
  check_format_rows(rows, "String should be a valid ");
  auto link = compiled(R"({"properties":{"home":{"type":"string","format":"uri"}}})");
  CHECK(format_issues_line(check_answer(*link, R"({"home":"example.com"})").issues)
        == "/home: String should be a valid URI (RFC 3986: a scheme such as "
           "https: first, then only characters a URI may hold, others "
           "percent-encoded as %XX)");
  // A long string is read once (a megabyte of path), and a regex past
  // 64 KiB is not compiled at all.
  auto home = [](const std::string& path) {
    return R"({"home":"https://example.com/)" + path + "\"}";
  };
  CHECK(check_answer(*link, home(std::string(1000000, 'a'))).valid);
  CHECK_FALSE(check_answer(*link, home(std::string(1000000, 'a') + " ")).valid);
  CHECK(format_problem("regex", std::string(60000, 'a') + ")"));
  CHECK(format_problem("regex", std::string(70000, 'a') + ")") == std::nullopt);
  // Each regex string is compiled: charged to the answer's pattern work,
  // so 40 strings of 60,000 bytes stop where 30 pass.
  auto regexes = compiled(R"({"type":"array","items":{"type":"string","format":"regex"}})");
  auto many = [](int n) {
    std::string out = "[";
    for (int i = 0; i < n; ++i)
      out += (i > 0 ? ",\"" : "\"") + std::string(60000, 'a') + "\"";
    return out + "]";
  };
  CHECK(check_answer(*regexes, many(30)).valid);
  auto spent = check_answer(*regexes, many(40));
  CHECK_FALSE(spent.valid);
  REQUIRE_FALSE(spent.issues.empty());
  CHECK(contains(spent.issues[0].message, "too long for the schema's patterns"));
  // The schema's own references are not held to these formats: a `$ref`
  // to a name no URI holds raw, and a pattern RE2 refuses, keep their
  // words.
  auto named = compiled(R"({"$ref":"#/definitions/\u540d\u524d","definitions":{"\u540d\u524d":{"type":"string","format":"regex"}}})");
  CHECK(check_answer(*named, R"("^a+$")").valid);
  CHECK_FALSE(check_answer(*named, R"("(a")").valid);
  CHECK(contains(compile_error(R"({"type":"string","pattern":"[a-z"})"),
                 "schema /pattern: not a regular expression pgw runs (missing ]"));
}
