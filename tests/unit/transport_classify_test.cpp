#include "transport/classify.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace pgw;

namespace {

std::string openai_error(const std::string& message, const std::string& type,
                         const std::string& code) {
  return R"({"error":{"message":")" + message + R"(","type":")" + type
         + R"(","param":null,"code":)"
         + (code.empty() ? std::string("null") : "\"" + code + "\"") + "}}";
}

struct http_row {
  int status;
  std::string body;
  outcome kind;
  std::string reason;
};

} // namespace

TEST_CASE("classify: HTTP statuses and bodies") {
  const std::string plain = openai_error("bad", "invalid_request_error", "");
  const http_row rows[] = {
    {400, plain, outcome::request_rejected, "http_400"},
    {400, "", outcome::request_rejected, "http_400"},
    {400,
     openai_error("Your request was rejected", "invalid_request_error",
                  "content_policy_violation"),
     outcome::request_rejected, "content_policy_violation"},
    {400,
     openai_error("This model's maximum context length is 8192 tokens",
                  "invalid_request_error", "context_length_exceeded"),
     outcome::source_rejected, "context_length_exceeded"},
    {400,
     openai_error("This model's maximum context length is 4096 tokens. "
                  "However, you requested 5000 tokens",
                  "BadRequestError", ""),
     outcome::source_rejected, "http_400"},
    {404,
     openai_error("The model `gpt-9` does not exist", "invalid_request_error",
                  "model_not_found"),
     outcome::source_rejected, "model_not_found"},
    {404, R"({"detail":"Model qwen-x not found"})", outcome::source_rejected,
     "http_404"},
    {404, openai_error("Unknown route", "invalid_request_error", ""),
     outcome::request_rejected, "http_404"},
    {404, "404 page not found", outcome::request_rejected, "http_404"},
    {413, "Request Entity Too Large", outcome::source_rejected, "http_413"},
    {422, R"({"detail":[{"loc":["body","messages"],"msg":"field required"}]})",
     outcome::request_rejected, "http_422"},
    {401, openai_error("Incorrect API key", "invalid_request_error",
                       "invalid_api_key"),
     outcome::source_dead, "unauthorized"},
    {402, "Payment Required", outcome::source_dead, "http_402"},
    {403, openai_error("Forbidden", "", ""), outcome::source_dead, "forbidden"},
    {429,
     openai_error("You exceeded your current quota", "insufficient_quota",
                  "insufficient_quota"),
     outcome::source_dead, "insufficient_quota"},
    {429, openai_error("quota", "insufficient_quota", ""),
     outcome::source_dead, "insufficient_quota"},
    {429, openai_error("quota", "requests", "insufficient_quota"),
     outcome::source_dead, "insufficient_quota"},
    {429, openai_error("Rate limit reached", "requests", "rate_limit_exceeded"),
     outcome::rate_limited, "http_429"},
    {429, "", outcome::rate_limited, "http_429"},
    {408, "", outcome::transient, "http_408"},
    {409, "", outcome::transient, "http_409"},
    {425, "", outcome::transient, "http_425"},
    {418, "", outcome::request_rejected, "http_418"},
    {500, openai_error("The server had an error", "server_error", ""),
     outcome::transient, "http_500"},
    {502, "<html><body><h1>502 Bad Gateway</h1></body></html>",
     outcome::transient, "http_502"},
    {503, "", outcome::transient, "http_503"},
    {504, "", outcome::transient, "http_504"},
    {529, R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})",
     outcome::transient, "http_529"},
    {302, "", outcome::source_rejected, "redirect"},
  };
  for (auto& r : rows) {
    CAPTURE(r.status);
    CAPTURE(r.body);
    attempt_result out;
    classify_http_error(r.status, r.body, out);
    CHECK(out.kind == r.kind);
    CHECK(out.reason == r.reason);
    CHECK(out.http_status == r.status);
  }
}

TEST_CASE("classify: code and message are taken from the body") {
  attempt_result out;
  classify_http_error(400,
                      openai_error("Your request was rejected by the safety "
                                   "system",
                                   "invalid_request_error",
                                   "content_policy_violation"),
                      out);
  CHECK(out.kind == outcome::request_rejected);
  CHECK(out.reason == "content_policy_violation");
  CHECK(out.error_code == "content_policy_violation");
  CHECK(out.error_message
        == "Your request was rejected by the safety system");

  SUBCASE("type stands in for a missing code") {
    attempt_result o;
    classify_http_error(500, openai_error("boom", "server_error", ""), o);
    CHECK(o.error_code == "server_error");
    CHECK(o.error_message == "boom");
  }
  SUBCASE("a numeric code is kept as text") {
    attempt_result o;
    classify_http_error(500, R"({"error":{"message":"m","code":500}})", o);
    CHECK(o.error_code == "500");
    CHECK(o.kind == outcome::transient);
  }
  SUBCASE("an error that is a plain string") {
    attempt_result o;
    classify_http_error(503, R"({"error":"upstream overloaded"})", o);
    CHECK(o.error_message == "upstream overloaded");
    CHECK(o.error_code.empty());
  }
  SUBCASE("a bare object with message and code") {
    attempt_result o;
    classify_http_error(429, R"({"message":"slow down","code":"rate_limit"})",
                        o);
    CHECK(o.kind == outcome::rate_limited);
    CHECK(o.error_message == "slow down");
    CHECK(o.error_code == "rate_limit");
  }
}

TEST_CASE("classify: a non-JSON body is tolerated and truncated") {
  std::string html = "<html><head><title>502 Bad Gateway</title></head><body>"
                     + std::string(2000, 'x') + "</body></html>";
  attempt_result out;
  classify_http_error(502, "\n  " + html, out);
  CHECK(out.kind == outcome::transient);
  CHECK(out.reason == "http_502");
  CHECK(out.error_code.empty());
  CHECK(out.error_message.size() == 500);
  CHECK(out.error_message == html.substr(0, 500));

  SUBCASE("truncation never cuts a UTF-8 sequence") {
    // 499 ASCII bytes then a 3-byte character straddling the limit.
    std::string body = std::string(499, 'a') + "\xE2\x82\xAC" + "tail";
    attempt_result o;
    classify_http_error(500, body, o);
    CHECK(o.error_message == std::string(499, 'a'));
  }
  SUBCASE("a long JSON message is truncated too") {
    attempt_result o;
    classify_http_error(400, openai_error(std::string(800, 'm'), "x", ""), o);
    CHECK(o.error_message.size() == 500);
  }
}

TEST_CASE("classify: errors inside a stream") {
  struct row {
    std::string error;
    outcome kind;
    std::string reason;
  };
  const row rows[] = {
    {R"({"message":"x","type":"server_error"})", outcome::transient,
     "stream_error:server_error"},
    {R"({"message":"x","code":"rate_limit_exceeded"})", outcome::rate_limited,
     "stream_error:rate_limit_exceeded"},
    {R"({"type":"rate_limit_error","message":"x"})", outcome::rate_limited,
     "stream_error:rate_limit_error"},
    {R"({"message":"Too many requests","code":429})", outcome::rate_limited,
     "stream_error:http_429"},
    {R"({"message":"x","status":503})", outcome::transient,
     "stream_error:http_503"},
    {R"({"message":"x","code":"insufficient_quota"})", outcome::source_dead,
     "stream_error:insufficient_quota"},
    {R"({"message":"x","type":"insufficient_quota","code":null})",
     outcome::source_dead, "stream_error:insufficient_quota"},
    {R"({"message":"x","code":429,"type":"insufficient_quota"})",
     outcome::source_dead, "stream_error:insufficient_quota"},
    {R"({"message":"x","type":"invalid_request_error","code":"context_length_exceeded"})",
     outcome::source_rejected, "stream_error:context_length_exceeded"},
    {R"({"message":"x","code":"content_policy_violation"})",
     outcome::request_rejected, "stream_error:content_policy_violation"},
    {R"({"message":"x","type":"invalid_request_error"})",
     outcome::request_rejected, "stream_error:invalid_request_error"},
    {R"({"type":"overloaded_error","message":"Overloaded"})",
     outcome::transient, "stream_error:overloaded_error"},
    {R"({"message":"something broke"})", outcome::transient,
     "stream_error:unknown"},
    {R"("plain text error")", outcome::transient, "stream_error:unknown"},
    {"not json at all", outcome::transient, "stream_error:unknown"},
    {R"({"code":"weird code/with spaces"})", outcome::transient,
     "stream_error:weird_code_with_spaces"},
  };
  for (auto& r : rows) {
    CAPTURE(r.error);
    attempt_result out;
    out.http_status = 200;
    classify_stream_error(r.error, out);
    CHECK(out.kind == r.kind);
    CHECK(out.reason == r.reason);
    CHECK(out.http_status == 200); // the stream's status stays
  }
  attempt_result out;
  classify_stream_error(R"({"message":"x","code":"rate_limit_exceeded"})", out);
  CHECK(out.error_code == "rate_limit_exceeded");
  CHECK(out.error_message == "x");
}
