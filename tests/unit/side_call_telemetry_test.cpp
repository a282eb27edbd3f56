/// Embedding and OCR calls in telemetry (issue 16): the call row and the
/// terminal failure row of each call, as chat writes them, into a real
/// SQLite file; an OCR call's cost per page.

#include "backends/sqlite/db.hpp"
#include "backends/telemetry.hpp"
#include "config/pricing.hpp"
#include "transport/ocr_codec.hpp"

#include "fixtures/side_call_fixture.hpp"
#include "fixtures/telemetry/fixture_db.hpp"

#include <boost/json.hpp>

#include <map>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

/// Every row of `sql` on the database at `path`, each column as text
/// ("NULL" for NULL), by column name.
std::vector<std::map<std::string, std::string>>
query(const std::string& path, const std::string& sql) {
  auto db = sqlite::connection::open(path, sqlite::open_mode::read_only);
  REQUIRE(db);
  auto stmt = db->prepare(sql);
  REQUIRE(stmt);
  std::vector<std::map<std::string, std::string>> out;
  while (true) {
    auto row = stmt->step();
    REQUIRE(row);
    if (!*row)
      break;
    std::map<std::string, std::string> r;
    for (int i = 0; i < stmt->column_count(); ++i)
      r[stmt->column_name(i)] = stmt->is_null(i) ? "NULL"
                                                 : stmt->column_text(i);
    out.push_back(std::move(r));
  }
  return out;
}

/// One vector [1, 2] ([1, 2, 3] with `dim` 3) per input, 3 tokens per
/// input.
fake_step two_dim_vectors(size_t dim = 2) {
  fake_step s = fake_step::ok("", 0, 0);
  s.respond = [dim](const std::string& body, attempt_result& res) {
    auto n = boost::json::parse(body).at("input").as_array().size();
    boost::json::array data;
    boost::json::array vec{1.0, 2.0};
    if (dim == 3)
      vec.emplace_back(3.0);
    for (size_t i = 0; i < n; ++i)
      data.emplace_back(boost::json::object{{"index", i},
                                            {"embedding", vec}});
    res.content = boost::json::serialize(boost::json::object{
      {"data", std::move(data)},
      {"model", "emb"},
      {"usage", {{"prompt_tokens", 3 * n}, {"total_tokens", 3 * n}}}});
  };
  return s;
}

/// A scope of one source `name` of `kind`.
scope_config one_source_scope(const std::string& scope,
                              const std::string& name, source_kind kind) {
  auto sc = test_scope({name});
  sc.name = scope;
  for (auto& src : sc.sources) {
    src.scope = scope;
    src.kind = kind;
  }
  return sc;
}

/// Gateway options writing telemetry to `sink`, priced by `prices_json`.
gateway_options priced_telemetry(caf::actor_system& sys,
                                 const telemetry_sink_ptr& sink,
                                 const std::string& prices_json) {
  auto prices = price_table::parse(prices_json);
  REQUIRE(prices);
  gateway_options opts;
  opts.telemetry = spawn_telemetry(sys, sink);
  opts.prices = std::make_shared<const price_table>(*prices);
  return opts;
}

/// A PDF whose bytes name two page objects and the page tree.
const std::string two_page_pdf = "%PDF-1.4\n1 0 obj << /Type /Pages /Kids "
                                 "[2 0 R 3 0 R] >>\n2 0 obj << /Type /Page "
                                 ">>\n3 0 obj <</Type/Page>>\n%%EOF";

} // namespace

TEST_CASE_FIXTURE(side_call_fixture,
                  "embed and OCR calls write call and terminal_failure rows "
                  "into SQLite, an OCR call costs its pages") {
  scratch_dir dir;
  auto path = dir.file("side.sqlite");
  auto sink = make_sqlite_sink(path);
  auto opts = priced_telemetry(
    sys, sink,
    R"({"models": {"emb": {"input": 1.0, "output": 0},
                   "model-o": {"page": 0.01}}})");
  fake->script("e", {two_dim_vectors(),
                     fake_step::http(400, outcome::request_rejected)});
  fake->script("o", {fake_step::ok("page text", 0, 0),
                     fake_step::http(400, outcome::request_rejected)});
  auto emb = spawn_gateway(one_source_scope("EMBED", "e", source_kind::embedding), 42,
                           opts);
  auto ocr = spawn_gateway(one_source_scope("OCR", "o", source_kind::ocr_vision), 42,
                           opts);
  auto embed_call = [&](const std::string& id) {
    embed_request req;
    req.inputs = {"x", "y"};
    req.call_id = id;
    auto out = start_side<embed_response>(emb, atom::embed_v, req);
    run_until(out);
    return out;
  };
  auto ocr_call = [&](const std::string& id) {
    ocr_request req;
    req.image = two_page_pdf;
    req.call_id = id;
    auto out = start_side<ocr_response>(ocr, atom::ocr_v, req);
    run_until(out);
    return out;
  };
  auto emb_ok = embed_call("emb-ok");
  auto emb_bad = embed_call("emb-bad");
  auto ocr_ok = ocr_call("ocr-ok");
  auto ocr_bad = ocr_call("ocr-bad");
  REQUIRE(emb_ok->response);
  REQUIRE(emb_bad->error);
  REQUIRE(ocr_ok->response);
  REQUIRE(ocr_bad->error);
  // Two pages at $0.01 each, on the answer as on the rows.
  REQUIRE(ocr_ok->response->stats.cost_usd);
  CHECK(*ocr_ok->response->stats.cost_usd == doctest::Approx(0.02));
  settle();
  REQUIRE(sink->flush(10s));

  std::map<std::string, std::map<std::string, std::string>> calls;
  for (auto& r : query(path, "SELECT * FROM call"))
    calls[r.at("pgw_call_id")] = r;
  REQUIRE(calls.size() == 4);
  auto& e = calls.at("emb-ok");
  CHECK(e.at("pgw_scope") == "EMBED");
  CHECK(e.at("pgw_outcome") == "ok");
  CHECK(e.at("pgw_attempts") == "1");
  CHECK(e.at("pgw_source") == "e");
  CHECK(e.at("gen_ai_response_model") == "emb");
  CHECK(e.at("gen_ai_usage_input_tokens") == "6");
  CHECK(std::stod(e.at("pgw_cost_usd")) == doctest::Approx(6 / 1e6).scale(0));
  auto& o = calls.at("ocr-ok");
  CHECK(o.at("pgw_scope") == "OCR");
  CHECK(o.at("pgw_outcome") == "ok");
  CHECK(o.at("pgw_source") == "o");
  CHECK(o.at("gen_ai_usage_input_tokens") == "0");
  CHECK(std::stod(o.at("pgw_cost_usd")) == doctest::Approx(0.02));
  CHECK(calls.at("emb-bad").at("pgw_outcome") == "request_rejected");
  CHECK(calls.at("ocr-bad").at("pgw_outcome") == "request_rejected");
  CHECK(calls.at("ocr-bad").at("pgw_cost_usd") == "NULL");

  auto failures = query(path, "SELECT * FROM terminal_failure ORDER BY "
                              "pgw_call_id");
  REQUIRE(failures.size() == 2);
  CHECK(failures[0].at("pgw_call_id") == "emb-bad");
  CHECK(failures[0].at("pgw_scope") == "EMBED");
  CHECK(failures[0].at("error_type") == "request_rejected");
  CHECK(failures[0].at("pgw_upstream_status") == "400");
  CHECK(failures[0].at("pgw_per_source").find("\"e\"") != std::string::npos);
  CHECK(failures[1].at("pgw_call_id") == "ocr-bad");
  CHECK(failures[1].at("error_type") == "request_rejected");
  CHECK(failures[1].at("pgw_message").find("rejected by source o")
        != std::string::npos);

  // The attempt rows: the OCR success carries the page cost, the rejected
  // one none.
  auto attempts = query(path, "SELECT pgw_call_id, pgw_operation, "
                              "pgw_cost_usd FROM attempt WHERE pgw_call_id "
                              "LIKE 'ocr-%' ORDER BY pgw_call_id");
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].at("pgw_call_id") == "ocr-bad");
  CHECK(attempts[0].at("pgw_cost_usd") == "NULL");
  CHECK(attempts[1].at("pgw_operation") == "ocr_text");
  CHECK(std::stod(attempts[1].at("pgw_cost_usd")) == doctest::Approx(0.02));
}

TEST_CASE_FIXTURE(side_call_fixture,
                  "embed: a failed sub-batch with reported usage is in the "
                  "call row's losers' cost") {
  scratch_dir dir;
  auto path = dir.file("losers.sqlite");
  auto sink = make_sqlite_sink(path);
  auto opts = priced_telemetry(
    sys, sink, R"({"models": {"emb": {"input": 1000.0, "output": 0}}})");
  // 0.001 USD a token (well above Approx's epsilon). One input per
  // sub-batch, one at a time, a before b: a's second answer has the wrong
  // length (result_invalid, 3 tokens reported), b redoes it.
  auto sc = one_source_scope("EMBED", "a", source_kind::embedding);
  sc.sources.push_back(sc.sources.front());
  sc.sources.back().name = "b";
  sc.sources.back().priority = 1;
  sc.selector = selector_policy::priority;
  sc.batch_concurrency = 1;
  for (auto& src : sc.sources)
    src.max_batch_inputs = 1;
  fake->script("a", {two_dim_vectors(), two_dim_vectors(3)});
  fake->script("b", {two_dim_vectors()});
  auto gw = spawn_gateway(sc, 42, opts);
  embed_request req;
  req.inputs = {"x", "y"};
  req.call_id = "emb";
  auto out = start_side<embed_response>(gw, atom::embed_v, req);
  run_until(out);
  REQUIRE(out->response);
  REQUIRE(out->response->stats.cost_usd);
  CHECK(*out->response->stats.cost_usd == doctest::Approx(0.006));
  settle();
  REQUIRE(sink->flush(10s));
  auto attempts = query(path, "SELECT pgw_reason, pgw_cost_usd FROM attempt "
                              "WHERE pgw_outcome = 'result_invalid'");
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].at("pgw_reason") == "dimension_mismatch");
  CHECK(std::stod(attempts[0].at("pgw_cost_usd")) == doctest::Approx(0.003));
  auto calls = query(path, "SELECT * FROM call");
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].at("pgw_source") == "a,b");
  CHECK(std::stod(calls[0].at("pgw_cost_usd")) == doctest::Approx(0.006));
  CHECK(std::stod(calls[0].at("pgw_losers_cost_usd"))
        == doctest::Approx(0.003));
}

TEST_CASE("prices: a page price (OCR) alone prices pages, not tokens") {
  auto t = price_table::parse(
    R"({"models": {"ocr-m": {"page": 0.5}, "both": {"input": 1, "output": 2,
        "page": 0.25}, "tok": {"input": 1, "output": 2}}})");
  REQUIRE(t);
  CHECK(t->page_cost("OCR", "a", "ocr-m", 3) == doctest::Approx(1.5));
  CHECK_FALSE(t->cost("OCR", "a", "ocr-m", 10, 10));
  CHECK(t->page_cost("OCR", "a", "both", 4) == doctest::Approx(1.0));
  CHECK(t->cost("LLM", "a", "both", 1000000, 0) == doctest::Approx(1.0));
  CHECK_FALSE(t->page_cost("OCR", "a", "tok", 1));
  auto bad = price_table::parse(R"({"models": {"m": {"page": "cheap"}}})");
  REQUIRE_FALSE(bad);
  CHECK(describe(bad.error()).find("models[\"m\"].page: must be a number "
                                   "(USD per page)")
        != std::string::npos);
  auto half = price_table::parse(R"({"models": {"m": {"page": 1,
                                                      "input": 1}}})");
  REQUIRE_FALSE(half);
  CHECK(describe(half.error()).find("models[\"m\"].output: missing")
        != std::string::npos);
}

TEST_CASE("ocr: pages of an image: 1 for PNG and JPEG, page objects of a PDF") {
  CHECK(page_count("\x89PNG", image_type::png) == 1);
  CHECK(page_count("\xFF\xD8\xFF", image_type::jpeg) == 1);
  CHECK(page_count(two_page_pdf, image_type::pdf) == 2);
  // No page object readable (compressed object streams): at least 1.
  CHECK(page_count("%PDF-1.7 /Type /Pages", image_type::pdf) == 1);
  CHECK(page_count("%PDF-1.7 /Type", image_type::pdf) == 1);
}
