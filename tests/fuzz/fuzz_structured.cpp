// libFuzzer target: structured output (issue 15) on what neither pgw nor
// the caller controls — a model's answer — and on what a caller sends — a
// JSON Schema (serve's response_format.json_schema). The input is a schema
// and an answer separated by a NUL byte; without one, the whole input is
// the answer to a fixed schema.
//
// Properties:
//  - repair_json never invents content (its text is a subsequence of the
//    answer) and repairs once (its text repairs to itself);
//  - compiling and checking are deterministic;
//  - a valid answer has its parsed value, which reads back as JSON, and no
//    issues; an invalid one has at least one issue and at most
//    max_schema_issues + 1, each message and pointer printable (they
//    reach error messages and the terminal);
//  - validation ends (libFuzzer's -timeout catches a schema or answer that
//    makes it run away: a pattern's backtracking, a recursive $ref);
//  - the date and time formats agree: the answer's bytes are a date-time
//    exactly when they are a date, a T (or t) and a time.

#include "actors/structured_checks.hpp"
#include "actors/structured_repair.hpp"
#include "actors/structured_schema.hpp"
#include "config/json_text.hpp"
#include "fuzz_require.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

const char* const fixed_schema = R"({
  "type": "object",
  "required": ["name", "items"],
  "properties": {
    "name": {"type": "string", "minLength": 1, "pattern": "^[a-z]+$"},
    "count": {"type": "integer", "minimum": 0, "maximum": 10},
    "ratio": {"type": "number", "exclusiveMaximum": 1},
    "items": {"type": "array", "uniqueItems": true,
              "items": {"$ref": "#/definitions/item"}},
    "kind": {"enum": ["a", "b", null]},
    "when": {"type": "string", "format": "date-time"}
  },
  "additionalProperties": false,
  "definitions": {
    "item": {"anyOf": [{"type": "string", "maxLength": 8},
                       {"type": "object",
                        "properties": {"id": {"type": "integer"}},
                        "required": ["id"]}]}
  }
})";

bool subsequence(std::string_view part, std::string_view whole) {
  size_t at = 0;
  for (char c : part) {
    at = whole.find(c, at);
    if (at == std::string_view::npos)
      return false;
    ++at;
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in{reinterpret_cast<const char*>(data), size};
  auto nul = in.find('\0');
  std::string schema_text{nul == std::string_view::npos ? fixed_schema
                                                        : in.substr(0, nul)};
  std::string answer{nul == std::string_view::npos ? in : in.substr(nul + 1)};

  auto date_time = !pgw::format_problem("date-time", answer);
  auto parts = answer.size() > 11 && (answer[10] == 'T' || answer[10] == 't')
               && !pgw::format_problem("date", answer.substr(0, 10))
               && !pgw::format_problem("time", answer.substr(11));
  FUZZ_REQUIRE(date_time == parts);

  // ipv4 is exactly what inet_pton takes (it refuses leading zeros too);
  // an email's domain after its last @ is a hostname or an address
  // literal; these formats are printable ASCII (a space only in an
  // email's quoted local part).
  in_addr v4{};
  FUZZ_REQUIRE(!pgw::format_problem("ipv4", answer)
               == (answer.find('\0') == std::string::npos
                   && inet_pton(AF_INET, answer.c_str(), &v4) == 1));
  if (!pgw::format_problem("email", answer)) {
    auto domain = answer.substr(answer.rfind('@') + 1);
    FUZZ_REQUIRE(!pgw::format_problem("hostname", domain)
                 || (domain.front() == '[' && domain.back() == ']'));
  }
  for (std::string f : {"email", "hostname", "uuid", "duration"})
    if (!pgw::format_problem(f, answer))
      for (unsigned char c : answer)
        FUZZ_REQUIRE(c < 0x7f && (c > 0x20 || (c == 0x20 && f == "email")));

  // The reference formats nest: a URI is a URI reference and an IRI, an
  // IRI an IRI reference; "0" then a JSON pointer is a relative one. None
  // holds a space or a control character; a URI is ASCII.
  auto fits = [&](const char* f) { return !pgw::format_problem(f, answer); };
  bool uri = fits("uri"), uri_ref = fits("uri-reference"), iri = fits("iri"),
       iri_ref = fits("iri-reference");
  FUZZ_REQUIRE(!uri || (uri_ref && iri));
  FUZZ_REQUIRE(!uri_ref || iri_ref);
  FUZZ_REQUIRE(!iri || iri_ref);
  FUZZ_REQUIRE(!fits("json-pointer")
               || !pgw::format_problem("relative-json-pointer", "0" + answer));
  if (iri_ref || fits("uri-template"))
    for (unsigned char c : answer)
      FUZZ_REQUIRE(c > 0x20 && c != 0x7f && (c < 0x80 || !uri_ref));
  (void)fits("regex");

  // The internationalized formats take what the ASCII ones take (but for
  // the reserved "--"); an ASCII idn-hostname is a hostname; neither
  // holds a space or a control character outside a quoted local part.
  bool dashes = answer.find("--") != std::string::npos;
  FUZZ_REQUIRE(!fits("hostname") || dashes || fits("idn-hostname"));
  FUZZ_REQUIRE(!fits("email") || dashes || fits("idn-email"));
  if (fits("idn-hostname")) {
    bool ascii = true;
    for (unsigned char c : answer) {
      FUZZ_REQUIRE(c > 0x20 && c != 0x7f);
      ascii = ascii && c < 0x80;
    }
    FUZZ_REQUIRE(!ascii || fits("hostname"));
  }

  auto repaired = pgw::repair_json(answer);
  FUZZ_REQUIRE(subsequence(repaired.text, answer));
  auto again = pgw::repair_json(repaired.text);
  FUZZ_REQUIRE(again.text == repaired.text);

  auto schema = pgw::compile_schema(schema_text);
  auto schema2 = pgw::compile_schema(schema_text);
  FUZZ_REQUIRE(static_cast<bool>(schema) == static_cast<bool>(schema2));
  if (!schema)
    return 0;
  auto check = pgw::check_answer(**schema, answer);
  auto check2 = pgw::check_answer(**schema2, answer);
  FUZZ_REQUIRE(check.valid == check2.valid && check.json == check2.json
          && check.issues.size() == check2.issues.size());
  // Every patternProperties check found the subschemas valijson parsed.
  for (auto& issue : check.issues)
    FUZZ_REQUIRE(issue.message.rfind("the schema could not be applied: "
                                     "patternProperties", 0) != 0);
  if (check.valid) {
    FUZZ_REQUIRE(check.issues.empty() && !check.json.empty());
    boost::json::error_code ec;
    pgw::parse_json(check.json, ec);
    FUZZ_REQUIRE(!ec);
  } else {
    FUZZ_REQUIRE(!check.issues.empty()
            && check.issues.size() <= pgw::max_schema_issues + 1);
  }
  for (auto& issue : check.issues)
    FUZZ_REQUIRE(!issue.message.empty() && printable(issue.message)
            && printable(issue.pointer));
  return 0;
}
