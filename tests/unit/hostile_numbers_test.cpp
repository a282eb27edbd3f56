// Untrusted numbers and text (SPEC 12): absurd usage is unavailable and
// settles the estimate, settlements and limiter sums saturate, every
// duration conversion saturates and every duration key is at most 30 days,
// upstream text is scrubbed of secrets, configuration files are regular
// and small, prompts are valid UTF-8.

#include "actors/settlement.hpp"
#include "backends/memory/limiter.hpp"
#include "config/file.hpp"
#include "config/limits.hpp"
#include "config/loader.hpp"
#include "config/scrub.hpp"
#include "config/url.hpp"
#include "messages/errors.hpp"
#include "transport/chat_codec.hpp"
#include "transport/classify.hpp"
#include "transport/upstream_exchange.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace pgw;

namespace {

std::string message_of(const caf::error& err) {
  auto detail = detail_of(err);
  return detail != nullptr ? detail->message : std::string{};
}

sse_event data(std::string text) {
  return sse_event{"", std::move(text)};
}

std::string usage_body(const std::string& prompt, const std::string& done) {
  return R"({"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":)"
         + prompt + R"(,"completion_tokens":)" + done + "}}";
}

env_map one_source(env_map extra = {}) {
  env_map env{{"LLM__OPENAI__A__BASE_URL", "https://api.example.com/v1"},
              {"LLM__OPENAI__A__MODEL", "gpt-test"}};
  for (auto& [k, v] : extra)
    env[k] = v;
  return env;
}

std::string load_error(const env_map& env) {
  auto s = load_settings(env);
  return s ? std::string{} : message_of(s.error());
}

} // namespace

// -- usage ----------------------------------------------------------------------

TEST_CASE("usage outside [0, 1e9] or not integral is unavailable") {
  struct row {
    const char* prompt;
    const char* completion;
  };
  for (auto r : {row{"9223372036854775807", "1"}, row{"5e18", "5e18"},
                 row{"-1", "3"}, row{"1.5", "2"}, row{"1000000001", "0"},
                 row{"600000000", "600000000"}, row{"\"12\"", "3"},
                 row{"1e400", "1"}}) {
    CAPTURE(r.prompt);
    CAPTURE(r.completion);
    attempt_result out;
    decode_chat_completion(usage_body(r.prompt, r.completion), out);
    CHECK(out.kind == outcome::ok);
    CHECK_FALSE(out.usage_reported);
    CHECK(out.usage_rejected);
    CHECK(settle_amount(out, 700) == 700);
  }
  attempt_result fine;
  decode_chat_completion(usage_body("1000000000", "0"), fine);
  CHECK(fine.usage_reported);
  CHECK_FALSE(fine.usage_rejected);
  CHECK(settle_amount(fine, 700) == 1000000000);
}

TEST_CASE("stream: one absurd usage chunk spoils the usage for good") {
  stream_accumulator acc;
  acc.on_event(data(
    R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]})"));
  acc.on_event(data(R"({"choices":[],"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}})"));
  acc.on_event(data(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})"));
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::ok);
  CHECK_FALSE(out.usage_reported);
  CHECK(out.usage_rejected);
}

TEST_CASE("settlement never wraps, whatever a result claims") {
  attempt_result r;
  r.kind = outcome::ok;
  r.usage_reported = true;
  r.prompt_tokens = INT64_MAX;
  r.completion_tokens = INT64_MAX;
  CHECK(settle_amount(r, 500) == 500);
  r.prompt_tokens = -5;
  r.completion_tokens = 3;
  CHECK(settle_amount(r, 500) == 500);
  CHECK(settle_amount(r, -9) == 0);
  CHECK(settle_cancelled(true, -9) == 0);
}

TEST_CASE("memory limiter: TPM holds against absurd settlements (2 of 10)") {
  limiter_limits l;
  l.source = "s";
  l.tpm = 2000;
  memory_limiter lim{l};
  int granted = 0;
  for (int i = 0; i < 10; ++i) {
    auto r = lim.try_acquire(1000, 0.001 * i);
    REQUIRE(r);
    if (!r->granted)
      continue;
    ++granted;
    CHECK(lim.settle(r->granted_permit.id, INT64_MAX, 0.001 * i));
  }
  // The first settles INT64_MAX (clamped): nothing else fits in the window.
  CHECK(granted == 1);
  auto st = lim.status(0.5);
  REQUIRE(st);
  CHECK(st->tpm_used > 2000);
  CHECK(st->tpm_used == max_entry_tokens);
}

// -- durations ------------------------------------------------------------------

TEST_CASE("saturating_duration: NaN, negatives, infinity, 1e11") {
  CHECK(saturating_duration(std::nan("")) == caf::timespan{0});
  CHECK(saturating_duration(-3) == caf::timespan{0});
  auto max = saturating_duration(max_duration_s);
  CHECK(saturating_duration(1e11) == max);
  CHECK(saturating_duration(1e300) == max);
  CHECK(saturating_duration(HUGE_VAL) == max);
  CHECK(max > caf::timespan{0});
  CHECK(saturating_duration(1.5) == std::chrono::milliseconds{1500});
}

TEST_CASE("validate: every duration key is at most 30 days") {
  for (const char* key :
       {"LLM__OPENAI__A__TIMEOUT_S", "LLM__OPENAI__A__CONNECT_TIMEOUT_S",
        "LLM__OPENAI__A__STREAM_IDLE_TIMEOUT_S", "LLM__STALL_WINDOW_S",
        "LLM__CALL_DEADLINE_S", "LLM__BACKOFF_MAX_S",
        "LLM__BREAKER__COOLDOWN_S", "LLM__BREAKER__WINDOW_S",
        "PGW_CACHE_TTL_S"}) {
    CAPTURE(key);
    auto err = load_error(one_source({{key, "1e10"}}));
    CHECK(err.find(key) != std::string::npos);
    CHECK(err.find("at most 2592000 seconds (30 days)") != std::string::npos);
  }
  CHECK(load_error(one_source({{"LLM__OPENAI__A__TIMEOUT_S", "2592000"},
                               {"LLM__STALL_WINDOW_S", "2592000"}}))
        == "");
}

TEST_CASE("check_request: a deadline above 30 days is invalid") {
  chat_request req;
  req.messages.push_back(chat_message{"user", "hi", {}});
  req.deadline_s = 1e10;
  auto err = check_request(req);
  CHECK(code_of(err) == error_code::invalid_request);
  CHECK(message_of(err).find("30 days") != std::string::npos);
  req.deadline_s = max_duration_s;
  CHECK_FALSE(check_request(req));
}

// -- MAX_RESPONSE_BYTES, BASE_URL -------------------------------------------------

TEST_CASE("validate: MAX_RESPONSE_BYTES defaults to 8 MiB and is bounded") {
  auto s = load_settings(one_source());
  REQUIRE(s);
  CHECK(s->find("LLM")->sources[0].max_response_bytes == 8 * 1024 * 1024);
  s = load_settings(one_source({{"LLM__OPENAI__A__MAX_RESPONSE_BYTES", "4096"}}));
  REQUIRE(s);
  CHECK(s->find("LLM")->sources[0].max_response_bytes == 4096);
  for (const char* bad : {"0", "-1", "100", "2000000000"}) {
    auto err
      = load_error(one_source({{"LLM__OPENAI__A__MAX_RESPONSE_BYTES", bad}}));
    CHECK(err.find("LLM__OPENAI__A__MAX_RESPONSE_BYTES") != std::string::npos);
  }
}

TEST_CASE("validate: BASE_URL with credentials is refused without echoing "
          "them") {
  auto err = load_error(one_source(
    {{"LLM__OPENAI__A__BASE_URL", "http://user:hunter2pass@host/v1"}}));
  CHECK(err.find("LLM__OPENAI__A__BASE_URL") != std::string::npos);
  CHECK(err.find("API_KEY or HEADERS") != std::string::npos);
  CHECK(err.find("hunter2pass") == std::string::npos);
}

// -- scrubber -----------------------------------------------------------------------

TEST_CASE("scrub: configured secrets, Bearer tokens and sk- keys") {
  register_secrets({"s3cr3t-value-xyz", "abc"}); // "abc": too short, kept
  CHECK(scrub("echo: s3cr3t-value-xyz!") == "echo: [redacted]!");
  CHECK(scrub("abc") == "abc");
  CHECK(scrub("Authorization: Bearer sk-live_123456789")
        == "Authorization: Bearer [redacted]");
  CHECK(scrub("authorization: bearer abc.def-ghi") == "authorization: bearer "
                                                      "[redacted]");
  CHECK(scrub("key sk-proj-ABCDEF123 leaked") == "key [redacted] leaked");
  CHECK(scrub("a task-list and sk-12") == "a task-list and sk-12");
  CHECK(scrub("Bearer") == "Bearer");
}

TEST_CASE("scrub: a key echoed without its vendor prefix") {
  register_secrets({"sk-upstreamSECRET1234567890",
                    "sk-proj-projSECRET987654321",
                    "sk-ant-api03-antSECRET55555", "sk-shortpart1",
                    "xyz-ab-cd"});
  CHECK(scrub("bad key: token=upstreamSECRET1234567890 (check it)")
        == "bad key: token=[redacted] (check it)");
  CHECK(scrub("the whole sk-upstreamSECRET1234567890 key")
        == "the whole [redacted] key");
  // Every letters-only segment of the prefix is cut.
  CHECK(scrub("got projSECRET987654321") == "got [redacted]");
  CHECK(scrub("got api03-antSECRET55555") == "got [redacted]");
  // Fewer than 12 bytes left: too common to mask on their own.
  CHECK(scrub("a shortpart1 here") == "a shortpart1 here");
  CHECK(scrub("ab-cd") == "ab-cd");
}

TEST_CASE("scrub: load_settings registers every secret of the config") {
  auto s = load_settings(one_source(
    {{"LLM__OPENAI__A__API_KEY", "key-AAAA-1111"},
     {"LLM__OPENAI__A__HEADERS", R"({"X-Api-Token":"hdr-BBBB-2222"})"},
     {"REDIS_URL", "redis://:redis-CCCC-3333@127.0.0.1:6379/0"}}));
  REQUIRE(s);
  CHECK(scrub("k=key-AAAA-1111 h=hdr-BBBB-2222 r=redis-CCCC-3333")
        == "k=[redacted] h=[redacted] r=[redacted]");
}

TEST_CASE("classify: echoed secrets never reach error_message") {
  register_secrets({"echoed-key-9999"});
  for (int status : {400, 401, 500}) {
    CAPTURE(status);
    attempt_result out;
    classify_http_error(
      status,
      R"({"error":{"message":"bad header Authorization: Bearer echoed-key-9999","code":"x"}})",
      out);
    CHECK(out.error_message.find("echoed-key-9999") == std::string::npos);
    CHECK(out.error_message.find("[redacted]") != std::string::npos);
  }
  attempt_result ev;
  classify_stream_error(R"({"message":"got sk-abcdefghijkl"})", ev);
  CHECK(ev.error_message == "got [redacted]");
  attempt_result coded;
  classify_stream_error(R"({"code":"echoed-key-9999","message":"x"})", coded);
  CHECK(coded.reason.find("echoed-key") == std::string::npos);
  CHECK(coded.error_code == "[redacted]");
}

TEST_CASE("classify: a redirect is source_rejected, never transient") {
  for (int status : {301, 302, 307, 308}) {
    attempt_result out;
    classify_http_error(status, "", out);
    CHECK(out.kind == outcome::source_rejected);
    CHECK(out.reason == "redirect");
  }
}

// -- files and prompts --------------------------------------------------------------

TEST_CASE("config files: /dev/null reads as an empty file") {
  // `--env-file /dev/null` says "no env file" (soak --scenario fleet's
  // nodes are started so).
  auto empty = read_env_file("/dev/null");
  REQUIRE(empty);
  CHECK(empty->empty());
}

TEST_CASE("config files: regular files only, at most 1 MiB") {
  auto err = read_config_file("/dev/zero", "env file /dev/zero");
  REQUIRE_FALSE(err);
  CHECK(message_of(err.error()).find("not a regular file")
        != std::string::npos);
  auto fifo = "/tmp/pgw-fifo-" + std::to_string(::getpid());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto from_fifo = read_env_file(fifo); // must not hang
  ::unlink(fifo.c_str());
  REQUIRE_FALSE(from_fifo);
  CHECK(message_of(from_fifo.error()).find("not a regular file")
        != std::string::npos);
  auto big = "/tmp/pgw-big-env-" + std::to_string(::getpid());
  {
    std::ofstream out{big};
    out << "A=" << std::string(max_config_file_bytes, 'x') << "\n";
  }
  auto from_big = read_env_file(big);
  std::remove(big.c_str());
  REQUIRE_FALSE(from_big);
  CHECK(message_of(from_big.error()).find("larger than") != std::string::npos);
}

TEST_CASE("check_request: a prompt that is not UTF-8 names the byte offset") {
  chat_request req;
  req.messages.push_back(chat_message{"user", "ok \xC3\xA9 then \xFF", {}});
  auto err = check_request(req);
  CHECK(code_of(err) == error_code::invalid_request);
  CHECK(message_of(err).find("messages[0].content") != std::string::npos);
  CHECK(message_of(err).find("byte offset 11") != std::string::npos);
  for (const char* bad : {"\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                          "\xE2\x82"}) {
    req.messages[0].content = bad;
    CHECK(check_request(req));
  }
  req.messages[0].content = "h\xC3\xA9llo \xF0\x9F\x98\x80";
  CHECK_FALSE(check_request(req));
}

TEST_CASE("check_request: every text sent upstream is checked as UTF-8, "
          "not only the content") {
  const std::string bad = "ab\xFF";
  auto base = [] {
    chat_request req;
    req.messages.push_back(chat_message{"user", "hi", {}});
    return req;
  };
  auto with_call = [&](auto set) {
    auto req = base();
    chat_message m{"assistant", "", {}};
    m.tool_calls.push_back(tool_call{"c1", "function", "f", "{}"});
    set(m.tool_calls[0]);
    req.messages.push_back(m);
    return req;
  };
  std::vector<std::pair<std::string, chat_request>> cases;
  auto r = base();
  r.messages[0].name = bad;
  cases.emplace_back("messages[0].name", r);
  r = base();
  r.messages[0].tool_call_id = bad;
  cases.emplace_back("messages[0].tool_call_id", r);
  r = base();
  r.messages[0].parts.push_back(content_part{"image_url", "", bad});
  cases.emplace_back("messages[0].parts[0].image_url", r);
  cases.emplace_back("messages[1].tool_calls[0].function.arguments",
                     with_call([&](tool_call& c) { c.arguments = bad; }));
  cases.emplace_back("messages[1].tool_calls[0].function.name",
                     with_call([&](tool_call& c) { c.name = bad; }));
  cases.emplace_back("messages[1].tool_calls[0].id",
                     with_call([&](tool_call& c) { c.id = bad; }));
  r = base();
  r.stop = {"ok", bad};
  cases.emplace_back("stop[1]", r);
  r = base();
  r.user = bad;
  cases.emplace_back("user", r);
  for (auto& [where, req] : cases) {
    CAPTURE(where);
    auto err = check_request(req);
    CHECK(code_of(err) == error_code::invalid_request);
    CHECK(message_of(err) == where + ": not valid UTF-8 at byte offset 2");
  }
}

TEST_CASE("transport: a body is bounded by MAX_RESPONSE_BYTES alone, a "
          "setting above 32 MiB holds, never body_too_large") {
  auto src = std::make_shared<source_config>();
  src->name = "a";
  src->max_response_bytes = 40 * 1024 * 1024;
  upstream_call call;
  call.source = src;
  call.kind = upstream_kind::embeddings;
  // The transports' own cap was 32 MiB (body_too_large, result_invalid:
  // the same source asked again until the budget was spent).
  auto read = [&call](size_t body_bytes) {
    response_reader reader{call};
    reader.on_status(200);
    REQUIRE(reader.on_header_end());
    std::string body(body_bytes, 'x');
    bool whole = true;
    for (size_t at = 0; at < body.size(); at += 1 << 20)
      if (!reader.on_body(body.data() + at,
                          std::min<size_t>(1 << 20, body.size() - at))
             .keep_reading) {
        whole = false;
        break;
      }
    attempt_result res;
    transport_warnings warn;
    reader.complete(res, timeout_kind::none, whole, true, warn,
                    [](attempt_result&) {});
    return res;
  };
  auto fits = read(36 * 1024 * 1024);
  CHECK(fits.kind == outcome::ok);
  CHECK(fits.content.size() == 36 * 1024 * 1024);
  auto over = read(41 * 1024 * 1024);
  CHECK(over.kind == outcome::source_rejected);
  CHECK(over.reason == "response_too_large");
}

// -- the stream accumulator -----------------------------------------------------------

TEST_CASE("stream: the answer cap ends the attempt with response_too_large") {
  stream_accumulator acc{1024};
  using step = stream_accumulator::step;
  std::string chunk(600, 'x');
  auto ev = data(R"({"choices":[{"index":0,"delta":{"content":")" + chunk
                 + R"("}}]})");
  CHECK(acc.on_event(ev) == step::first_token);
  CHECK(acc.on_event(ev) == step::error);
  attempt_result out;
  acc.finish(out);
  CHECK(out.kind == outcome::source_rejected);
  CHECK(out.reason == "response_too_large");
  CHECK(out.content.empty());
  CHECK(settle_amount(out, 300) == 300);
  // Reasoning and tool calls count too.
  stream_accumulator acc2{1024};
  acc2.on_event(data(R"({"choices":[{"index":0,"delta":{"reasoning_content":")"
                     + chunk + R"("}}]})"));
  CHECK(acc2.on_event(data(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":")"
                           + chunk + R"("}}]}}]})"))
        == step::error);
}

TEST_CASE("stream: deltas after finish_reason are not appended") {
  stream_accumulator acc;
  acc.on_event(data(
    R"({"choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]})"));
  acc.on_event(data(
    R"({"choices":[{"index":0,"delta":{"content":" MORE"},"finish_reason":"length"}]})"));
  attempt_result out;
  acc.finish(out);
  CHECK(out.content == "done");
  CHECK(out.finish_reason == "stop");
}

// -- the one URL parser ---------------------------------------------------------------

TEST_CASE("parse_url: case, IPv6, userinfo, ports") {
  url_parts u;
  CHECK(parse_url("HTTPS://Api.Example.COM:8443/V1", u) == "");
  CHECK(u.scheme == "https");
  CHECK(u.host == "api.example.com");
  CHECK(u.port == uint16_t{8443});
  CHECK(u.path == "/V1"); // paths keep their case
  CHECK(parse_url("http://[::FFFF:7f00:1]:9/v1", u) == "");
  CHECK(u.ipv6);
  CHECK(u.host == "::ffff:7f00:1");
  CHECK(u.authority() == "[::ffff:7f00:1]:9");
  CHECK(parse_url("redis://:pw@[::1]:6379/2", u) == "");
  CHECK(u.has_userinfo);
  CHECK(u.user.empty());
  CHECK(u.password == "pw");
  CHECK(parse_url("http://[::g]/v1", u) == "has an invalid IPv6 address");
  CHECK(parse_url("http://h:0/", u) == "has an invalid port (1-65535)");
  CHECK(parse_url("http://h:65536/", u) == "has an invalid port (1-65535)");
  CHECK(parse_url("host:80", u) == "has no scheme (scheme://host)");
  CHECK(normalise_url("HTTP://User:PW@Host.Example:80/V1")
        == "http://User:PW@host.example:80/V1");
  CHECK(normalise_url("HTTP://[::ABCD]/x") == "http://[::abcd]/x");
}

TEST_CASE("validate: BASE_URL scheme and host are case-normalised, IPv6 is "
          "checked") {
  auto s = load_settings(
    one_source({{"LLM__OPENAI__A__BASE_URL", "HTTP://API.Example.com/V1"}}));
  REQUIRE(s);
  CHECK(s->find("LLM")->sources[0].base_url == "http://api.example.com/V1");
  CHECK(load_error(one_source({{"LLM__OPENAI__A__BASE_URL",
                                "http://[::ffff:7f00:1]:8080/v1"}}))
        == "");
  CHECK(load_error(one_source(
                     {{"LLM__OPENAI__A__BASE_URL", "http://[fe80::zz]/v1"}}))
          .find("invalid IPv6")
        != std::string::npos);
}
