// `pgw-actor telemetry report` as a user runs it, on the known fixture
// database: exit codes, the text and JSON reports, --since, --svg, and the
// errors for a missing or unreadable database.

#include "backends/sqlite/db.hpp"
#include "backends/telemetry.hpp"

#include "fixtures/process.hpp"
#include "fixtures/telemetry/fixture_db.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace json = boost::json;
using pgw::test::run_program;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto pos = text.find(part); pos != std::string::npos;
       pos = text.find(part, pos + part.size()))
    ++n;
  return n;
}

pgw::test::run_result report(std::vector<std::string> args) {
  args.insert(args.begin(), {PGW_ACTOR_BIN, "telemetry", "report"});
  return run_program(args);
}

struct fixture {
  pgw::test::scratch_dir dir;
  std::string db = dir.file("fixture.sqlite");

  fixture() {
    auto sink = pgw::make_sqlite_sink(db);
    pgw::test::write_report_fixture(*sink, pgw::test::wall_now_ms());
  }
};

} // namespace

TEST_CASE("telemetry CLI: the text report") {
  fixture f;
  auto res = report({"--db", f.db});
  CHECK(res.exit_code == 0);
  CHECK(contains(res.out, "telemetry report: " + f.db));
  CHECK(contains(res.out, "scope LLM: 6 calls, 4 ok (66.7%)"));
  CHECK(contains(res.out, "scope EMBED: 1 calls"));
  CHECK(contains(res.out, "hedge_cancelled"));
  CHECK(res.err.empty());
}

TEST_CASE("telemetry CLI: --since leaves older calls out") {
  fixture f;
  auto res = report({"--db", f.db, "--since", "1d"});
  CHECK(res.exit_code == 0);
  CHECK(contains(res.out, "scope LLM: 5 calls, 3 ok (60.0%)"));
  CHECK(contains(res.out, "since 20"));
  auto iso = report({"--db", f.db, "--since", "2000-01-01T00:00:00Z"});
  CHECK(iso.exit_code == 0);
  CHECK(contains(iso.out, "scope LLM: 6 calls"));
}

TEST_CASE("telemetry CLI: --json prints one JSON object") {
  fixture f;
  auto res = report({"--db", f.db, "--json", "--since", "1d"});
  REQUIRE(res.exit_code == 0);
  auto doc = json::parse(res.out);
  auto& scopes = doc.at("scopes").as_array();
  REQUIRE(scopes.size() == 2);
  auto& llm = scopes[1];
  CHECK(llm.at("scope").as_string() == "LLM");
  CHECK(llm.at("total").at("calls").to_number<int64_t>() == 5);
  CHECK(llm.at("total").at("losers_cost_usd").to_number<double>()
        == doctest::Approx(0.0043));
  CHECK(llm.at("sources").as_array().size() == 3);
}

TEST_CASE("telemetry CLI: --svg writes a curve per source and outcome") {
  fixture f;
  auto svg_path = f.dir.file("cdf.svg");
  auto res = report({"--db", f.db, "--svg", svg_path});
  REQUIRE(res.exit_code == 0);
  CHECK(contains(res.out, "latency CDF written to " + svg_path));
  std::ifstream in{svg_path};
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  auto svg = text.str();
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(contains(svg, "</svg>"));
  // Ok and failed attempts apart: LLM/a ok and failed, LLM/b ok, LLM/c
  // failed, EMBED/x ok.
  CHECK(occurrences(svg, "<path ") == 5);
  // An unwritable SVG path is an error, and no report is printed.
  auto bad = report({"--db", f.db, "--svg", "/dev/null/cdf.svg"});
  CHECK(bad.exit_code == 1);
  CHECK(contains(bad.err, "/dev/null/cdf.svg"));
  CHECK(bad.out.empty());
}

TEST_CASE("telemetry CLI: --since further back than 1970 is every row, "
          "since 1970") {
  fixture f;
  auto all = report({"--db", f.db, "--json"});
  auto far = report({"--db", f.db, "--since", "99999999999999999999w",
                     "--json"});
  CHECK(far.exit_code == 0);
  auto doc = json::parse(far.out).as_object();
  CHECK(doc.at("since").as_string() == "1970-01-01T00:00:00Z");
  CHECK(doc.at("scopes") == json::parse(all.out).at("scopes"));
}

TEST_CASE("telemetry CLI: a missing database is exit 2 naming the path") {
  pgw::test::scratch_dir dir;
  auto missing = dir.file("nope.sqlite");
  auto res = report({"--db", missing});
  CHECK(res.exit_code == 2);
  CHECK(contains(res.err, missing));
  CHECK(res.out.empty());
  CHECK_FALSE(std::filesystem::exists(missing));
  // --json: the error object chat prints, on stdout.
  auto as_json = report({"--db", missing, "--json"});
  CHECK(as_json.exit_code == 2);
  auto err = json::parse(as_json.out).at("error");
  CHECK(contains(std::string(err.at("message").as_string()), missing));
  CHECK(err.at("code").is_string());
  if (!std::filesystem::exists("pgw-telemetry.sqlite")) {
    auto dflt = report({});
    CHECK(dflt.exit_code == 2);
    CHECK(contains(dflt.err, "./pgw-telemetry.sqlite"));
  }
}

TEST_CASE("telemetry CLI: a file that is not a telemetry database is exit "
          "2") {
  pgw::test::scratch_dir dir;
  auto garbage = dir.file("garbage.sqlite");
  {
    std::ofstream out{garbage};
    for (int i = 0; i < 100; ++i)
      out << "garbage garbage garbage ";
  }
  auto res = report({"--db", garbage});
  CHECK(res.exit_code == 2);
  CHECK(res.err == "pgw-actor: invalid_config: " + garbage
                     + " is not a SQLite database, so not a pgw telemetry "
                       "database\n");
  auto empty = dir.file("empty.sqlite");
  std::ofstream{empty}.close();
  auto none = report({"--db", empty, "--json"});
  CHECK(none.exit_code == 2);
  auto err = json::parse(none.out).at("error");
  CHECK(err.at("code").as_string() == "invalid_config");
  CHECK(std::string(err.at("message").as_string())
        == "telemetry database " + empty
             + " is an empty file, not a pgw telemetry database");
}

TEST_CASE("telemetry CLI: a database of a newer schema that this report "
          "cannot read says so") {
  fixture f;
  {
    auto db = pgw::sqlite::connection::open(f.db,
                                            pgw::sqlite::open_mode::read_write);
    REQUIRE(db);
    // A later pgw's schema: version 99, a column this report reads renamed.
    REQUIRE_FALSE(db->exec("INSERT INTO schema_version VALUES (99, 0, "
                           "'future'); ALTER TABLE call RENAME COLUMN "
                           "pgw_cost_saved_usd TO pgw_future"));
  }
  auto res = report({"--db", f.db});
  CHECK(res.exit_code == 2);
  CHECK(res.err.rfind("pgw-actor: invalid_config: cannot read telemetry "
                      "database " + f.db
                        + ": it has schema version 99, newer than this "
                          "pgw-actor reads (up to ",
                      0)
        == 0);
  CHECK(res.out.empty());
}

TEST_CASE("telemetry CLI: errors have chat's form, as the error object "
          "with --json") {
  fixture f;
  auto bad_since = report({"--json", "--db", f.db, "--since", "yesterday"});
  CHECK(bad_since.exit_code == 2);
  CHECK(bad_since.err.empty());
  auto err = json::parse(bad_since.out).at("error");
  CHECK(err.at("code").as_string() == "invalid_request");
  CHECK(std::string(err.at("message").as_string())
        == "--since yesterday: not an ISO-8601 time or a duration like 15m");
  auto plain = report({"--db", f.db, "--bogus"});
  CHECK(plain.exit_code == 2);
  CHECK(plain.err.rfind("pgw-actor: invalid_request: unknown option "
                        "'--bogus'\nusage: pgw-actor telemetry report",
                        0)
        == 0);
  auto svg = report({"--db", f.db, "--svg", "/dev/null/cdf.svg", "--json"});
  CHECK(svg.exit_code == 1);
  auto svg_err = json::parse(svg.out).at("error");
  CHECK(std::string(svg_err.at("message").as_string())
          .rfind("cannot write the latency CDF to /dev/null/cdf.svg", 0)
        == 0);
}

TEST_CASE("telemetry CLI: usage errors are exit 2") {
  fixture f;
  auto none = run_program({PGW_ACTOR_BIN, "telemetry"});
  CHECK(none.exit_code == 2);
  CHECK(contains(none.err, "usage: pgw-actor telemetry report"));
  auto unknown_sub = run_program({PGW_ACTOR_BIN, "telemetry", "show"});
  CHECK(unknown_sub.exit_code == 2);
  CHECK(contains(unknown_sub.err, "unknown subcommand 'show'"));
  auto unknown_opt = report({"--db", f.db, "--bogus"});
  CHECK(unknown_opt.exit_code == 2);
  CHECK(contains(unknown_opt.err, "unknown option '--bogus'"));
  auto bad_since = report({"--db", f.db, "--since", "yesterday"});
  CHECK(bad_since.exit_code == 2);
  CHECK(contains(bad_since.err, "--since yesterday"));
  auto no_value = report({"--db"});
  CHECK(no_value.exit_code == 2);
  auto help = report({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(contains(help.out, "--since WHEN"));
}
