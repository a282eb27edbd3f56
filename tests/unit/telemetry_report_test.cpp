// The telemetry report on the known fixture database
// (tests/fixtures/telemetry/fixture_db.hpp): exact figures, the JSON shape,
// the text tables, --since, percentiles, and the SVG CDF.

#include "backends/sqlite/db.hpp"
#include "apps/pgw-actor/report/report.hpp"
#include "apps/pgw-actor/report/svg.hpp"
#include "backends/telemetry.hpp"
#include "messages/errors.hpp"

#include "fixtures/telemetry/fixture_db.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <fstream>
#include <optional>
#include <sys/stat.h>
#include <string>
#include <vector>

using namespace pgw;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

/// A fixture database in a scratch directory, built once per test.
struct fixture {
  test::scratch_dir dir;
  std::string path = dir.file("fixture.sqlite");
  double now_ms = test::wall_now_ms();

  fixture() {
    auto sink = make_sqlite_sink(path);
    test::write_report_fixture(*sink, now_ms);
  }

  /// The report since one day ago (the old call c0 left out).
  report::report recent() const {
    auto r = report::build(path, now_ms - 86400e3);
    REQUIRE(r);
    return std::move(*r);
  }
};

const report::scope_report& scope(const report::report& r,
                                  const std::string& name) {
  for (auto& s : r.scopes)
    if (s.total.scope == name)
      return s;
  FAIL("no scope " << name);
  throw std::logic_error("unreachable");
}

const report::group_stats& source(const report::scope_report& s,
                                  const std::string& name) {
  for (auto& g : s.sources)
    if (g.source == name)
      return g;
  FAIL("no source " << name);
  throw std::logic_error("unreachable");
}

std::string message_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : std::string{};
}

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

/// A small XML well-formedness check: tags nest and close, attribute values
/// are quoted, `&` only starts the five predefined entities, `<` never
/// appears in text or attributes.
bool well_formed_xml(const std::string& doc, std::string& why) {
  std::vector<std::string> open;
  size_t i = 0;
  auto entity_ok = [&](size_t at) {
    for (auto e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (doc.compare(at, std::char_traits<char>::length(e), e) == 0)
        return true;
    return false;
  };
  if (doc.rfind("<?xml", 0) == 0)
    i = doc.find("?>") + 2;
  bool root_seen = false;
  while (i < doc.size()) {
    if (doc[i] == '&') {
      if (!entity_ok(i)) {
        why = "bare & at " + std::to_string(i);
        return false;
      }
      ++i;
      continue;
    }
    if (doc[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(doc[i]))) {
        why = "text outside the root element";
        return false;
      }
      ++i;
      continue;
    }
    auto end = i + 1;
    char quote = 0;
    for (; end < doc.size(); ++end) {
      if (quote != 0) {
        if (doc[end] == quote)
          quote = 0;
        else if (doc[end] == '<') {
          why = "< inside an attribute";
          return false;
        } else if (doc[end] == '&' && !entity_ok(end)) {
          why = "bare & inside an attribute";
          return false;
        }
      } else if (doc[end] == '"' || doc[end] == '\'') {
        quote = doc[end];
      } else if (doc[end] == '>') {
        break;
      } else if (doc[end] == '<') {
        why = "< inside a tag";
        return false;
      }
    }
    if (end >= doc.size()) {
      why = "unterminated tag";
      return false;
    }
    auto tag = doc.substr(i + 1, end - i - 1);
    if (tag.empty()) {
      why = "empty tag";
      return false;
    }
    if (tag[0] == '/') {
      auto name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        why = "mismatched </" + name + ">";
        return false;
      }
      open.pop_back();
    } else {
      auto self_closing = tag.back() == '/';
      auto name = tag.substr(0, tag.find_first_of(" \t\n/"));
      // Every attribute is name="value".
      auto rest = tag.substr(name.size());
      for (size_t eq = rest.find('='); eq != std::string::npos;
           eq = rest.find('=', eq + 1)) {
        // '=' inside a quoted value is fine; check only those followed by a
        // quote when outside quotes.
        size_t quotes = 0;
        for (size_t k = 0; k < eq; ++k)
          if (rest[k] == '"')
            ++quotes;
        if (quotes % 2 == 0 && (eq + 1 >= rest.size() || rest[eq + 1] != '"')) {
          why = "unquoted attribute in <" + name + ">";
          return false;
        }
      }
      if (open.empty() && root_seen) {
        why = "second root element";
        return false;
      }
      root_seen = true;
      if (!self_closing)
        open.push_back(name);
    }
    i = end + 1;
  }
  if (!open.empty()) {
    why = "unclosed <" + open.back() + ">";
    return false;
  }
  return root_seen;
}

} // namespace

TEST_CASE("report: percentiles are nearest-rank") {
  std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK(report::percentile(ten, 50) == 5);
  CHECK(report::percentile(ten, 95) == 10);
  CHECK(report::percentile(ten, 99) == 10);
  CHECK(report::percentile(ten, 10) == 1);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i)
    hundred.push_back(i);
  CHECK(report::percentile(hundred, 50) == 50);
  CHECK(report::percentile(hundred, 95) == 95);
  CHECK(report::percentile(hundred, 99) == 99);
  CHECK(report::percentile({42}, 50) == 42);
  CHECK(report::percentile({42}, 99) == 42);
}

TEST_CASE("report: scope totals on the fixture") {
  fixture f;
  auto r = f.recent();
  CHECK(r.db_path == f.path);
  CHECK(r.schema_version == 4);
  REQUIRE(r.scopes.size() == 2);
  CHECK(r.scopes[0].total.scope == "EMBED");
  CHECK(r.scopes[1].total.scope == "LLM");
  auto& llm = scope(r, "LLM");
  auto& t = llm.total;
  CHECK(t.calls == 5);
  CHECK(t.ok_calls == 3);
  REQUIRE(t.success_rate);
  CHECK(*t.success_rate == doctest::Approx(0.6));
  CHECK(t.attempts == 8);
  CHECK(t.attempts_by_outcome.at("ok") == 3);
  CHECK(t.attempts_by_outcome.at("transient") == 3);
  CHECK(t.attempts_by_outcome.at("hedge_cancelled") == 1);
  CHECK(t.attempts_by_outcome.at("cancelled") == 1);
  CHECK(t.attempts_by_outcome.at("rate_limited") == 0);
  CHECK(t.attempts_by_outcome.size() == report::attempt_outcomes().size());
  CHECK(t.hedges_fired == 1);
  CHECK(t.hedges_won == 1);
  // Call latencies 30, 110, 300, 550, 3500.
  REQUIRE(t.latency_ms);
  CHECK(t.latency_ms->p50 == 300);
  CHECK(t.latency_ms->p95 == 3500);
  CHECK(t.latency_ms->p99 == 3500);
  // Generation of the ok calls: 80, 120, 150.
  REQUIRE(t.generation_ms);
  CHECK(t.generation_ms->p50 == 120);
  CHECK(t.generation_ms->p95 == 150);
  CHECK(t.generation_ms->p99 == 150);
  // 1 - (80 + 150 + 120 + 0 + 0) / (110 + 300 + 550 + 3500 + 30)
  REQUIRE(t.waiting_share);
  CHECK(*t.waiting_share == doctest::Approx(1.0 - 350.0 / 4490.0));
  CHECK(t.input_tokens == 32);
  CHECK(t.output_tokens == 58);
  CHECK(t.cost_usd == doctest::Approx(0.0078));
  // Losers: a's hedge_cancelled leg 0.004, a's failed attempt with usage
  // 0.0001, c's cancelled attempt 0.0002.
  CHECK(t.losers_cost_usd == doctest::Approx(0.0043));
  CHECK(t.unpriced_attempts == 2);
  CHECK(llm.failed_calls_by_error.at("retry_exhausted") == 1);
  CHECK(llm.failed_calls_by_error.at("cancelled") == 1);
  CHECK(llm.failed_calls_by_error.size() == 2);
  CHECK(llm.terminal_failures == 2);
  auto& embed = scope(r, "EMBED").total;
  CHECK(embed.calls == 1);
  CHECK(*embed.success_rate == 1.0);
  CHECK(embed.input_tokens == 100);
  CHECK(*embed.waiting_share == doctest::Approx(1.0 - 10.0 / 12.0));
}

TEST_CASE("report: per-source figures on the fixture") {
  fixture f;
  auto r = f.recent();
  auto& llm = scope(r, "LLM");
  REQUIRE(llm.sources.size() == 3);
  CHECK(llm.sources[0].source == "a");
  CHECK(llm.sources[1].source == "b");
  CHECK(llm.sources[2].source == "c");
  SUBCASE("a: one win and two failures and one hedge loser") {
    auto& a = source(llm, "a");
    CHECK(a.calls == 1);
    CHECK(a.attempts == 4);
    REQUIRE(a.success_rate);
    CHECK(*a.success_rate == doctest::Approx(1.0 / 3.0));
    CHECK(a.attempts_by_outcome.at("ok") == 1);
    CHECK(a.attempts_by_outcome.at("transient") == 2);
    CHECK(a.attempts_by_outcome.at("hedge_cancelled") == 1);
    CHECK(a.hedges_fired == 0);
    CHECK(a.hedges_won == 0);
    // Attempt latencies 50, 100, 400, 1000.
    CHECK(a.latency_ms->p50 == 100);
    CHECK(a.latency_ms->p95 == 1000);
    CHECK(a.latency_ms->p99 == 1000);
    CHECK(a.generation_ms->p50 == 80);
    CHECK(*a.waiting_share == doctest::Approx(1.0 - 80.0 / 110.0));
    CHECK(a.input_tokens == 17);
    CHECK(a.output_tokens == 23);
    CHECK(a.cost_usd == doctest::Approx(0.0051));
    CHECK(a.losers_cost_usd == doctest::Approx(0.0041));
    CHECK(a.unpriced_attempts == 1);
    CHECK(a.latencies == std::vector<double>{50, 100, 400, 1000});
  }
  SUBCASE("b: two wins and one of them a hedge") {
    auto& b = source(llm, "b");
    CHECK(b.calls == 2);
    CHECK(b.attempts == 2);
    CHECK(*b.success_rate == 1.0);
    CHECK(b.hedges_fired == 1);
    CHECK(b.hedges_won == 1);
    CHECK(b.latency_ms->p50 == 150);
    CHECK(b.latency_ms->p95 == 200);
    CHECK(b.generation_ms->p50 == 120);
    CHECK(b.generation_ms->p99 == 150);
    CHECK(*b.waiting_share == doctest::Approx(1.0 - 270.0 / 850.0));
    CHECK(b.input_tokens == 15);
    CHECK(b.output_tokens == 35);
    CHECK(b.cost_usd == doctest::Approx(0.0025));
    CHECK(b.losers_cost_usd == 0);
  }
  SUBCASE("c: never won") {
    auto& c = source(llm, "c");
    CHECK(c.calls == 0);
    CHECK(c.attempts == 2);
    REQUIRE(c.success_rate);
    CHECK(*c.success_rate == 0); // cancelled left out: 0 of 1
    CHECK(c.latency_ms->p50 == 30);
    CHECK(c.latency_ms->p99 == 2000);
    CHECK_FALSE(c.generation_ms);
    CHECK_FALSE(c.waiting_share);
    CHECK(c.cost_usd == doctest::Approx(0.0002).scale(0));
    CHECK(c.losers_cost_usd == doctest::Approx(0.0002).scale(0));
  }
}

TEST_CASE("report: without --since the old call counts too") {
  fixture f;
  auto r = report::build(f.path);
  REQUIRE(r);
  CHECK_FALSE(r->since_ms);
  auto& t = scope(*r, "LLM").total;
  CHECK(t.calls == 6);
  CHECK(t.ok_calls == 4);
  CHECK(t.attempts == 9);
  CHECK(t.cost_usd == doctest::Approx(1.0078));
  CHECK(t.losers_cost_usd == doctest::Approx(0.0043));
  CHECK(source(scope(*r, "LLM"), "a").calls == 2);
  // A time after every row leaves nothing.
  auto none = report::build(f.path, f.now_ms + 1);
  REQUIRE(none);
  CHECK(none->scopes.empty());
  CHECK(contains(report::render_text(*none), "no calls or attempts"));
}

TEST_CASE("report: the winner is the ok attempt on the call's source") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    // Both legs answered ok; the call says b won (hedge), so a's ok attempt
    // is a loser and its cost counts as such.
    auto a = test::fixture_attempt("h", 1, "LLM", "a", "ok", 1, 100, 90);
    a.cost_usd = 0.5;
    auto b = test::fixture_attempt("h", 2, "LLM", "b", "ok", 2, 50, 40);
    b.is_hedge = true;
    b.cost_usd = 0.25;
    sink->write(a);
    sink->write(b);
    auto call = test::fixture_call("h", "LLM", "ok", "b", 1, 60, 40);
    call.hedges = 1;
    call.hedge_won = true;
    sink->write(call);
    // No call row (lost at a crash): the first ok attempt wins.
    auto lone = test::fixture_attempt("lone", 1, "LLM", "a", "ok", 3, 10, 10);
    lone.cost_usd = 1;
    sink->write(lone);
    REQUIRE(sink->flush(10s));
  }
  auto r = report::build(path);
  REQUIRE(r);
  auto& llm = scope(*r, "LLM");
  CHECK(llm.total.hedges_won == 1);
  CHECK(llm.total.losers_cost_usd == doctest::Approx(0.5));
  CHECK(source(llm, "a").losers_cost_usd == doctest::Approx(0.5));
  CHECK(source(llm, "a").cost_usd == doctest::Approx(1.5));
  CHECK(source(llm, "b").hedges_won == 1);
}

TEST_CASE("report: every ok sub-batch of an ok embedding call wins and the "
          "call counts for each source it used") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    // Three sub-batches over e1 and e2, one of them retried on e1.
    uint64_t n = 0;
    for (auto [src, outcome] : {std::pair{"e1", "ok"}, {"e2", "transient"},
                                {"e2", "ok"}, {"e1", "ok"}}) {
      ++n;
      auto a = test::fixture_attempt("emb", n, "EMB", src, outcome,
                                     static_cast<double>(n), 10, 5);
      a.operation = "embeddings";
      a.cost_usd = 0.25;
      sink->write(a);
    }
    sink->write(test::fixture_call("emb", "EMB", "ok", "e1,e2", 1, 40, 20));
    REQUIRE(sink->flush(10s));
  }
  auto r = report::build(path);
  REQUIRE(r);
  auto& emb = scope(*r, "EMB");
  CHECK(emb.total.calls == 1);
  CHECK(emb.total.cost_usd == doctest::Approx(1.0));
  CHECK(emb.total.losers_cost_usd == doctest::Approx(0.25)); // the transient
  REQUIRE(emb.sources.size() == 2); // no source named "e1,e2"
  CHECK(source(emb, "e1").calls == 1);
  CHECK(source(emb, "e1").ok_calls == 1);
  CHECK(source(emb, "e1").losers_cost_usd == 0);
  CHECK(source(emb, "e2").calls == 1);
  CHECK(source(emb, "e2").losers_cost_usd == doctest::Approx(0.25));
}

TEST_CASE("report: JSON shape") {
  fixture f;
  auto r = f.recent();
  auto doc = json::parse(report::render_json(r));
  REQUIRE(doc.is_object());
  auto& root = doc.as_object();
  CHECK(root.at("db").as_string() == f.path);
  CHECK(root.at("schema_version").to_number<int64_t>() == 4);
  CHECK(root.at("since").is_string());
  CHECK(root.at("since_ms").to_number<double>()
        == doctest::Approx(f.now_ms - 86400e3));
  auto& scopes = root.at("scopes").as_array();
  REQUIRE(scopes.size() == 2);
  auto& llm = scopes[1].as_object();
  CHECK(llm.at("scope").as_string() == "LLM");
  CHECK(llm.at("terminal_failures").to_number<int64_t>() == 2);
  CHECK(llm.at("failed_calls_by_error").at("retry_exhausted").to_number<int64_t>()
        == 1);
  auto& total = llm.at("total").as_object();
  CHECK_FALSE(total.contains("source"));
  CHECK(total.at("calls").to_number<int64_t>() == 5);
  CHECK(total.at("success_rate").to_number<double>() == doctest::Approx(0.6));
  CHECK(total.at("success_rate_basis").as_string() == "calls");
  auto& outcomes = total.at("attempts_by_outcome").as_object();
  for (auto& name : report::attempt_outcomes()) {
    CAPTURE(name);
    CHECK(outcomes.contains(name));
  }
  CHECK(outcomes.at("hedge_cancelled").to_number<int64_t>() == 1);
  CHECK(total.at("latency_ms").at("p50").to_number<double>() == 300);
  CHECK(total.at("generation_ms").at("p95").to_number<double>() == 150);
  CHECK(total.at("waiting_share").to_number<double>()
        == doctest::Approx(1.0 - 350.0 / 4490.0));
  CHECK(total.at("hedges_fired").to_number<int64_t>() == 1);
  CHECK(total.at("hedges_won").to_number<int64_t>() == 1);
  CHECK(total.at("input_tokens").to_number<int64_t>() == 32);
  CHECK(total.at("output_tokens").to_number<int64_t>() == 58);
  CHECK(total.at("cost_usd").to_number<double>() == doctest::Approx(0.0078));
  CHECK(total.at("losers_cost_usd").to_number<double>()
        == doctest::Approx(0.0043));
  CHECK(total.at("unpriced_attempts").to_number<int64_t>() == 2);
  auto& sources = llm.at("sources").as_array();
  REQUIRE(sources.size() == 3);
  auto& c = sources[2].as_object();
  CHECK(c.at("source").as_string() == "c");
  CHECK(c.at("success_rate_basis").as_string() == "attempts");
  CHECK(c.at("generation_ms").is_null());
  CHECK(c.at("waiting_share").is_null());
  // Without --since, since is null.
  auto all = report::build(f.path);
  REQUIRE(all);
  auto all_doc = json::parse(report::render_json(*all));
  CHECK(all_doc.at("since").is_null());
  CHECK(all_doc.at("since_ms").is_null());
}

TEST_CASE("report: text tables") {
  fixture f;
  auto text = report::render_text(f.recent());
  CHECK(contains(text, "telemetry report: " + f.path));
  CHECK(contains(text, "since 20"));
  CHECK(contains(text, "scope LLM: 5 calls, 3 ok (60.0%)"));
  CHECK(contains(text, "failed: cancelled 1, retry_exhausted 1"));
  CHECK(contains(text, "2 terminal_failure rows"));
  CHECK(contains(text, "scope EMBED: 1 calls, 1 ok (100.0%)"));
  CHECK(contains(text, "300/3500/3500"));     // LLM call latency
  CHECK(contains(text, "100/1000/1000"));     // a's attempt latency
  CHECK(contains(text, "92.2%"));             // LLM waiting share
  CHECK(contains(text, "0.007800"));          // LLM cost
  CHECK(contains(text, "0.004300"));          // LLM losers
  CHECK(contains(text, "hedge_cancelled"));
  CHECK(contains(text, "cost leaves out 2 unpriced attempts"));
  // Outcomes that never occurred are left out of the text table.
  CHECK_FALSE(contains(text, "source_dead"));
}

TEST_CASE("report: missing, foreign and broken databases are errors naming "
          "the path") {
  test::scratch_dir dir;
  auto missing = dir.file("nope.sqlite");
  auto r = report::build(missing);
  REQUIRE_FALSE(r);
  CHECK(contains(message_of(r.error()), missing));
  CHECK(contains(message_of(r.error()), "does not exist"));
  CHECK_FALSE(std::filesystem::exists(missing)); // never created
  auto garbage = dir.file("garbage.sqlite");
  {
    std::ofstream out{garbage};
    for (int i = 0; i < 200; ++i)
      out << "not sqlite at all ";
  }
  r = report::build(garbage);
  REQUIRE_FALSE(r);
  CHECK(contains(message_of(r.error()), garbage));
  auto foreign = dir.file("foreign.sqlite");
  {
    auto db = sqlite::connection::open(foreign, sqlite::open_mode::read_write);
    REQUIRE(db);
    REQUIRE_FALSE(db->exec("CREATE TABLE t (x)"));
  }
  r = report::build(foreign);
  REQUIRE_FALSE(r);
  CHECK(contains(message_of(r.error()), "not a pgw telemetry database"));
  r = report::build(dir.path().string());
  REQUIRE_FALSE(r);
  CHECK(contains(message_of(r.error()), "is a directory"));
  // A FIFO: refused before SQLite opens it (the open would block forever).
  auto fifo = dir.file("fifo.sqlite");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = report::build(fifo);
  REQUIRE_FALSE(r);
  CHECK(contains(message_of(r.error()), fifo));
  CHECK(contains(message_of(r.error()), "not a regular file"));
}

TEST_CASE("report: --since accepts ISO-8601 times and durations") {
  double now = 1795946400000.0; // 2026-11-29T10:00:00Z
  CHECK(report::parse_since("2026-11-29T10:00:00Z", now) == now);
  CHECK(report::parse_since("2026-11-29T10:00:00", now) == now);
  CHECK(report::parse_since("2026-11-29 10:00:00", now) == now);
  CHECK(report::parse_since("2026-11-29T10:00Z", now) == now);
  CHECK(report::parse_since("2026-11-29T10:00:00.250Z", now) == now + 250);
  CHECK(report::parse_since("2026-11-29T12:00:00+02:00", now) == now);
  CHECK(report::parse_since("2026-11-29T05:30:00-04:30", now) == now);
  CHECK(report::parse_since("2026-11-29", now) == 1795910400000.0);
  CHECK(report::parse_since("15m", now) == now - 15 * 60e3);
  CHECK(report::parse_since("2h", now) == now - 2 * 3600e3);
  CHECK(report::parse_since("1d", now) == now - 86400e3);
  CHECK(report::parse_since("1w", now) == now - 7 * 86400e3);
  CHECK(report::parse_since("90s", now) == now - 90e3);
  CHECK(report::parse_since("1.5h", now) == now - 1.5 * 3600e3);
  for (auto bad : {"", "abc", "15", "15x", "-5m", "m", "1e3m", "2026-13-01",
                   "2026-02-30", "2026-11-29T25:00", "2026-11-29T10:61",
                   "2026-11-29T10:00:00+2", "2026-11-29T10:00:00Zjunk",
                   "2026/11/29", "26-11-29"}) {
    CAPTURE(bad);
    CHECK_FALSE(report::parse_since(bad, now));
  }
  CHECK(report::format_utc(now + 999) == "2026-11-29T10:00:00Z");
}

TEST_CASE("report: the SVG is well-formed with one path per source") {
  fixture f;
  auto r = f.recent();
  auto doc = report::render_latency_cdf_svg(r);
  std::string why;
  CHECK_MESSAGE(well_formed_xml(doc, why), why);
  CHECK(contains(doc, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  // Ok and failed attempts apart (cancels in neither): LLM/a ok and
  // failed, LLM/b ok, LLM/c failed, EMBED/x ok; failures dashed.
  CHECK(occurrences(doc, "<path ") == 5);
  CHECK(occurrences(doc, "class=\"cdf\"") == 3);
  CHECK(occurrences(doc, "class=\"cdf failed\"") == 2);
  CHECK(occurrences(doc, "stroke-dasharray=\"6 4\"") == 4); // paths + keys
  for (auto label : {"LLM/a ok (n=1)", "LLM/a failed (n=2)", "LLM/b ok (n=2)",
                     "LLM/c failed (n=1)", "EMBED/x ok (n=1)"}) {
    CAPTURE(label);
    CHECK(contains(doc, label));
  }
  // The axis fits the samples (10 ms .. 2000 ms) with 1-2-5 ticks, not
  // whole decades.
  for (auto tick : {">10 ms<", ">20 ms<", ">50 ms<", ">100 ms<", ">200 ms<",
                    ">500 ms<", ">1 s<", ">2 s<"}) {
    CAPTURE(tick);
    CHECK(contains(doc, tick));
  }
  CHECK_FALSE(contains(doc, ">5 s<"));
  CHECK_FALSE(contains(doc, ">10 s<"));
  // An empty report still draws axes, and no curve.
  report::report empty;
  empty.db_path = "x";
  auto blank = report::render_latency_cdf_svg(empty);
  CHECK(well_formed_xml(blank, why));
  CHECK(occurrences(blank, "<path ") == 0);
  CHECK(contains(blank, "no attempts recorded"));
}

TEST_CASE("svg: text and attributes are escaped") {
  CHECK(svg::escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&apos;");
  CHECK(svg::number(12.5) == "12.5");
  CHECK(svg::number(3.0) == "3");
  CHECK(svg::number(-0.001) == "0");
  CHECK(svg::number(1.0 / 0.0) == "0");
  svg::document doc{100, 50};
  doc.text(1, 2, "<scope & \"source\">");
  doc.line(0, 0, 1, 1, "red\"bad");
  doc.polyline_path({{0, 0}, {10, 10}}, "#000", 1, "cdf");
  doc.polyline_path({{0, 0}}, "#000", 1, "single point: nothing");
  auto text = doc.str();
  std::string why;
  CHECK_MESSAGE(well_formed_xml(text, why), why);
  CHECK(contains(text, "&lt;scope &amp; &quot;source&quot;&gt;"));
  CHECK(occurrences(text, "<path ") == 1);
  CHECK(contains(text, "d=\"M0 0 L10 10\""));
}

TEST_CASE("report: cache hits, hit rate and cost saved per scope") {
  test::scratch_dir dir;
  auto path = dir.file("cache.sqlite");
  auto t = test::wall_now_ms() - 60e3;
  {
    auto sink = make_sqlite_sink(path);
    auto hit = [&](const std::string& id, double saved) {
      auto c = test::fixture_call(id, "LLM", "ok", "a", t, 1, 0);
      c.cache_hit = true;
      c.cost_saved_usd = saved;
      sink->write(c);
    };
    sink->write(test::fixture_call("m1", "LLM", "ok", "a", t, 100, 80));
    hit("h1", 0.25);
    hit("h2", 0.5);
    sink->write(test::fixture_call("m2", "LLM", "ok", "a", t, 100, 80));
    sink->write(test::fixture_call("e1", "EMBED", "ok", "x", t, 10, 10));
    REQUIRE(sink->flush(std::chrono::seconds(10)));
  }
  auto r = report::build(path);
  REQUIRE(r);
  auto& llm = scope(*r, "LLM");
  CHECK(llm.cache_hits == 2);
  REQUIRE(llm.cache_hit_rate);
  CHECK(*llm.cache_hit_rate == doctest::Approx(0.5));
  CHECK(llm.cost_saved_usd == doctest::Approx(0.75));
  auto& embed = scope(*r, "EMBED");
  CHECK(embed.cache_hits == 0);
  CHECK(*embed.cache_hit_rate == 0);
  CHECK(embed.cost_saved_usd == 0);
  auto text = report::render_text(*r);
  CHECK(contains(text, "cache: 2 hits (50.0% of calls), 0.750000 USD saved"));
  CHECK(contains(text, "cache: 0 hits (0.0% of calls), 0.000000 USD saved"));
  auto doc = json::parse(report::render_json(*r));
  auto& scopes = doc.at("scopes").as_array();
  REQUIRE(scopes.size() == 2);
  auto& cache = scopes[1].at("cache").as_object(); // LLM after EMBED
  CHECK(cache.at("hits").to_number<int64_t>() == 2);
  CHECK(cache.at("hit_rate").to_number<double>() == doctest::Approx(0.5));
  CHECK(cache.at("cost_saved_usd").to_number<double>()
        == doctest::Approx(0.75));
}

TEST_CASE("report: nothing priced is an unknown cost, not a free one") {
  test::scratch_dir dir;
  auto path = dir.file("t.sqlite");
  {
    auto sink = make_sqlite_sink(path);
    // A call of scope `sc`: an unpriced transient attempt, then the ok one
    // that won, priced `won_cost` when given.
    auto call = [&](const std::string& sc, const std::string& src,
                    std::optional<double> won_cost) {
      sink->write(test::fixture_attempt(sc, 1, sc, src, "transient", 1, 10, 5));
      auto won = test::fixture_attempt(sc, 2, sc, src, "ok", 2, 10, 5);
      if (won_cost)
        won.cost_usd = *won_cost;
      sink->write(won);
      sink->write(test::fixture_call(sc, sc, "ok", src, 1, 20, 5));
    };
    // Scope U: no attempt has a price. Scope P: the winner is priced, its
    // losing leg is not (the losers' cost alone is unknown).
    call("U", "a", std::nullopt);
    call("P", "b", 0.5);
    REQUIRE(sink->flush(10s));
  }
  auto r = report::build(path);
  REQUIRE(r);
  auto& u = scope(*r, "U");
  CHECK(u.total.unpriced_attempts == 2);
  CHECK_FALSE(report::known_cost(u.total));
  CHECK_FALSE(report::known_losers_cost(u.total));
  auto& p = scope(*r, "P");
  REQUIRE(report::known_cost(p.total));
  CHECK(*report::known_cost(p.total) == doctest::Approx(0.5).scale(0));
  CHECK_FALSE(report::known_losers_cost(p.total));
  auto doc = json::parse(report::render_json(*r)).as_object();
  for (auto& s : doc.at("scopes").as_array()) {
    auto& total = s.at("total").as_object();
    CAPTURE(json::serialize(total));
    CHECK(total.at("losers_cost_usd").is_null());
    if (s.at("scope").as_string() == "U") {
      CHECK(total.at("cost_usd").is_null());
      CHECK(s.at("sources").at(0).at("cost_usd").is_null());
    } else {
      CHECK(total.at("cost_usd").to_number<double>()
            == doctest::Approx(0.5).scale(0));
    }
  }
  auto text = report::render_text(*r);
  CHECK(contains(text, "unpriced"));
  CHECK_FALSE(contains(text, "n/a"));
  CHECK(contains(text, "0.500000"));
}
