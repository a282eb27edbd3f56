// Both upstream transports (beast, cpp-httplib) against a real
// pgw-upstream-sim process: every fault the simulator can produce, streaming
// and not, classified as SPEC §4 says; timeouts, cancellation and
// keep-alive. Each case runs once per transport (fixtures/transport_kinds.hpp).

#include "apps/pgw-upstream-sim/sim.hpp"
#include "config/support/log.hpp"
#include "fixtures/sim_process.hpp"
#include "messages/registry.hpp"
#include "fixtures/transport_kinds.hpp"
#include "messages/stream.hpp"
#include "transport/stream_relay.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace json = boost::json;

namespace {

struct config : caf::actor_system_config {
  config() {
    pgw::add_message_types(*this);
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

/// What one transport call produced.
struct call_result {
  bool first_token = false;
  bool done = false;
  attempt_result result;
  double elapsed_s = 0;
};

const char* test_scenario = R"({"models": {
  "ra-inf":    {"faults": [{"p": 1.0, "status": 429, "retry_after": "inf"}]},
  "ra-ms":     {"faults": [{"p": 1.0, "status": 429, "retry_after_ms": "1500"}]},
  "stall-long": {"stream": {"stall_after": 3, "stall_ms": 20000}},
  "slow-ttft": {"ttft_ms": 3000, "tokens": 5},
  "long-answer": {"tokens": 40, "token_ms": 20},
  "flood":       {"tokens": 20000, "token_ms": 0},
  "burst-stall": {"content": "BURST", "token_ms": 0,
                  "stream": {"stall_after": 100, "stall_ms": 20000}}
}})";

/// The "burst-stall" model's answer: 100 tokens of 8 bytes (the
/// simulator cuts given content in 8-byte tokens), all sent at once, then
/// the stream stalls for 20 s.
std::string burst_content() {
  std::string out;
  for (int i = 0; i < 100; ++i) {
    auto n = std::to_string(1000 + i);
    out += "tok" + n + " ";
  }
  return out;
}

std::string write_scenario() {
  auto path = std::string{"/tmp/pgw-transport-scenario-"}
              + std::to_string(::getpid()) + ".json";
  std::string text = test_scenario;
  text.replace(text.find("BURST"), 5, burst_content());
  std::ofstream out{path};
  out << text;
  return path;
}

struct transport_fixture {
  std::string scenario = write_scenario();
  sim_process sim{{"--scenario", scenario, "--seed", "3"}};
  config cfg;
  caf::actor_system sys{cfg};
  test_transport made;
  transport_ptr tp;

  explicit transport_fixture(const std::string& kind)
    : made(make_test_transport(kind)), tp(made.tp) {
    // nop
  }

  transport_stats stats() {
    return made.stats();
  }

  ~transport_fixture() {
    std::remove(scenario.c_str());
  }

  std::shared_ptr<source_config> source(const std::string& model) {
    auto src = std::make_shared<source_config>();
    src->scope = "LLM";
    src->provider = "generic";
    src->name = "sim";
    src->base_url = sim.base_url();
    src->model = model;
    src->timeout_s = 10;
    src->connect_timeout_s = 2;
    return src;
  }

  std::string body(const std::string& model, bool stream) {
    json::object b{{"model", model},
                   {"messages", json::array{json::object{{"role", "user"},
                                                         {"content", "hi"}}}},
                   {"stream", stream}};
    if (stream)
      b["stream_options"] = json::object{{"include_usage", true}};
    return json::serialize(b);
  }

  /// A chat call to `model` of the simulator's, streamed or not.
  upstream_call chat_call(std::shared_ptr<source_config> src, bool stream,
                          bool forward_deltas = false) {
    upstream_call call;
    call.body = body(src->model, stream);
    call.stream = stream;
    call.source = std::move(src);
    call.forward_deltas = forward_deltas;
    return call;
  }

  call_result run(std::shared_ptr<source_config> src, bool stream) {
    caf::scoped_actor self{sys};
    auto call = chat_call(src, stream);
    auto t0 = std::chrono::steady_clock::now();
    auto handle = tp->start(call, caf::actor_cast<caf::actor>(self), 7);
    call_result out;
    while (!out.done) {
      self->receive(
        [&](atom::first_token, uint64_t tag) {
          CHECK(tag == 7);
          CHECK_FALSE(out.first_token);
          out.first_token = true;
        },
        [&](atom::done, uint64_t tag, attempt_result& r) {
          CHECK(tag == 7);
          out.done = true;
          out.result = std::move(r);
        },
        caf::after(std::chrono::seconds(30)) >> [&] {
          FAIL("no answer from the transport within 30 s");
        });
    }
    out.elapsed_s = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    return out;
  }

  call_result run(const std::string& model, bool stream) {
    return run(source(model), stream);
  }

  json::array log() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    return json::parse(res->body).at("requests").as_array();
  }

  void reset() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Post("/_sim/reset", "", "application/json");
    REQUIRE(res);
  }
};

} // namespace

PGW_TRANSPORT_CASE(transport_fixture, "ok, non-streaming and streaming") {
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    auto r = run("ok", stream);
    CHECK(r.result.kind == outcome::ok);
    CHECK(r.result.reason == "ok");
    CHECK(r.result.http_status == 200);
    CHECK(r.result.content == sim::answer_text("ok", 3, 20));
    CHECK(r.result.finish_reason == "stop");
    CHECK(r.result.usage_reported);
    CHECK(r.result.completion_tokens == 20);
    CHECK(r.result.prompt_tokens > 0);
    CHECK(r.result.latency_ms > 0);
    CHECK(r.first_token == stream);
    CHECK(static_cast<bool>(r.result.ttft_ms) == stream);
  }
}

PGW_TRANSPORT_CASE(transport_fixture, "usage absent is reported as unavailable") {
  for (bool stream : {false, true}) {
    auto r = run("nousage", stream);
    CHECK(r.result.kind == outcome::ok);
    CHECK_FALSE(r.result.usage_reported);
  }
}

PGW_TRANSPORT_CASE(transport_fixture, "HTTP errors are classified per SPEC 4") {
  struct row {
    const char* model;
    outcome kind;
    int status;
    const char* reason;
  };
  row rows[] = {
    {"down", outcome::transient, 503, "http_503"},
    {"throttled", outcome::rate_limited, 429, "http_429"},
    {"reject", outcome::request_rejected, 400, "content_policy_violation"},
    {"ctx", outcome::source_rejected, 400, "context_length_exceeded"},
    {"dead", outcome::source_dead, 429, "insufficient_quota"},
    {"unauth", outcome::source_dead, 401, "unauthorized"},
    {"no-such-model", outcome::source_rejected, 404, "model_not_found"},
    {"flap", outcome::transient, 503, "http_503"}, // inside its outage
  };
  for (auto& r : rows) {
    for (bool stream : {false, true}) {
      CAPTURE(r.model);
      CAPTURE(stream);
      auto got = run(r.model, stream);
      CHECK(got.result.kind == r.kind);
      CHECK(got.result.http_status == r.status);
      CHECK(got.result.reason == r.reason);
      CHECK(got.result.upstream_reached);
      CHECK_FALSE(got.first_token);
    }
  }
}

PGW_TRANSPORT_CASE(transport_fixture, "Retry-After is read, a 429 without one has none") {
  auto r = run("ra2", false);
  CHECK(r.result.kind == outcome::rate_limited);
  REQUIRE(r.result.retry_after_s);
  CHECK(*r.result.retry_after_s == doctest::Approx(2.0));
  auto second = run("ra2", false);
  CHECK(second.result.kind == outcome::ok);
  auto t = run("throttled", false);
  CHECK_FALSE(t.result.retry_after_s);
  auto ms = run("ra-ms", false);
  REQUIRE(ms.result.retry_after_s);
  CHECK(*ms.result.retry_after_s == doctest::Approx(1.5));
}

PGW_TRANSPORT_CASE(transport_fixture, "a non-finite Retry-After is ignored with one warning naming the source") {
  std::vector<std::string> lines;
  std::mutex mtx;
  log::set_sink([&](log::level, const std::string& line) {
    std::lock_guard<std::mutex> guard{mtx};
    lines.push_back(line);
  });
  auto r1 = run("ra-inf", false);
  auto r2 = run("ra-inf", false);
  log::set_sink(nullptr);
  CHECK(r1.result.kind == outcome::rate_limited);
  CHECK_FALSE(r1.result.retry_after_s);
  CHECK_FALSE(r2.result.retry_after_s);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("LLM/sim") != std::string::npos);
  CHECK(lines[0].find("inf") == std::string::npos);
}

PGW_TRANSPORT_CASE(transport_fixture, "a reset before headers is transient and may have reached upstream") {
  auto r = run("reset", false);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "reset");
  CHECK(r.result.upstream_reached);
  CHECK(r.result.http_status == 0);
  auto next = run("reset", false);
  CHECK(next.result.kind == outcome::ok);
}

PGW_TRANSPORT_CASE(transport_fixture, "a connect failure is transient and never reached upstream") {
  auto src = source("ok");
  // A port nothing listens on: bind one, read its number, close it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto port = ntohs(addr.sin_port);
  ::close(fd);
  src->base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
  auto r = run(src, false);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "connect_error");
  CHECK_FALSE(r.result.upstream_reached);
}

PGW_TRANSPORT_CASE(transport_fixture, "a hang is cut at TIMEOUT_S and the upstream sees the client leave") {
  reset();
  auto src = source("hang");
  src->timeout_s = 0.4;
  auto r = run(src, false);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "total_timeout");
  CHECK(r.elapsed_s >= 0.4);
  CHECK(r.elapsed_s < 1.4);
  // The simulator noticed the closed connection within milliseconds.
  json::array entries;
  for (int i = 0; i < 200; ++i) {
    entries = log();
    if (!entries.empty() && !entries.back().at("ended_ms").is_null())
      break;
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(entries.size() == 1);
  auto& e = entries[0].as_object();
  CHECK(e.at("client_closed").as_bool());
  auto held = e.at("ended_ms").to_number<double>()
              - e.at("arrived_ms").to_number<double>();
  CHECK(held < 400 + 200);
}

PGW_TRANSPORT_CASE(transport_fixture, "TTFT_TIMEOUT_S bounds the wait for the first token, streaming only") {
  auto src = source("slow-ttft");
  src->ttft_timeout_s = 0.3;
  auto r = run(src, true);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "ttft_timeout");
  CHECK(r.elapsed_s < 1.5);
  CHECK_FALSE(r.first_token);
}

PGW_TRANSPORT_CASE(transport_fixture, "a stalled stream ends at STREAM_IDLE_TIMEOUT_S") {
  auto src = source("stall-long");
  src->stream_idle_timeout_s = 0.5;
  auto r = run(src, true);
  CHECK(r.first_token);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "idle_timeout");
  CHECK(r.elapsed_s < 0.5 + 1.0);
}

PGW_TRANSPORT_CASE(transport_fixture, "a slow but steady stream is not idle") {
  auto src = source("long-answer");
  src->stream_idle_timeout_s = 0.3;
  auto r = run(src, true);
  CAPTURE(r.result.reason);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.content == sim::answer_text("long-answer", 3, 40));
}

PGW_TRANSPORT_CASE(transport_fixture, "a cut stream is never a truncated success") {
  auto r = run("cut", true);
  CHECK(r.first_token);
  CHECK(r.result.kind == outcome::transient);
  CHECK(r.result.reason == "stream_cut");
  auto nonstream = run("cut", false);
  CHECK(nonstream.result.kind == outcome::transient);
  CHECK(nonstream.result.reason == "body_cut");
}

PGW_TRANSPORT_CASE(transport_fixture, "a malformed event is skipped and counted") {
  auto r = run("malformed", true);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.malformed_events == 1);
  CHECK(r.result.content == sim::answer_text("malformed", 3, 20));
  auto body = run("malformed", false);
  CHECK(body.result.kind == outcome::result_invalid);
  CHECK(body.result.reason == "malformed_body");
}

PGW_TRANSPORT_CASE(transport_fixture, "a stream without [DONE] completes after its finish_reason") {
  auto r = run("nodone", true);
  CHECK(r.result.kind == outcome::ok);
  CHECK(r.result.content == sim::answer_text("nodone", 3, 20));
}

PGW_TRANSPORT_CASE(transport_fixture, "cancel closes the connection within milliseconds") {
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    reset();
    caf::scoped_actor self{sys};
    upstream_call call;
    call.source = source("hang");
    call.body = body("hang", stream);
    call.stream = stream;
    auto handle = tp->start(call, caf::actor_cast<caf::actor>(self), 1);
    // Wait until the simulator holds the request, then cancel.
    json::array entries;
    for (int i = 0; i < 500 && entries.empty(); ++i) {
      entries = log();
      if (entries.empty())
        std::this_thread::sleep_for(5ms);
    }
    REQUIRE(entries.size() == 1);
    auto cancelled_at = std::chrono::steady_clock::now();
    handle->cancel();
    handle->cancel(); // idempotent
    for (int i = 0; i < 500; ++i) {
      entries = log();
      if (!entries[0].at("ended_ms").is_null())
        break;
      std::this_thread::sleep_for(2ms);
    }
    auto noticed = std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - cancelled_at)
                     .count();
    CHECK(entries[0].at("client_closed").as_bool());
    MESSAGE("cancel noticed by the upstream after <= " << noticed << " ms");
    CHECK(noticed < 200);
    // No outcome is sent for a cancelled call.
    bool got_done = false;
    self->receive([&](atom::done, uint64_t, attempt_result&) { got_done = true; },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
    CHECK_FALSE(got_done);
  }
}

PGW_TRANSPORT_CASE(transport_fixture, "keep-alive connections are reused per source") {
  auto src = source("ok");
  for (int i = 0; i < 20; ++i)
    REQUIRE(run(src, i % 2 == 0).result.kind == outcome::ok);
  auto st = stats();
  CHECK(st.connections_opened <= 2);
  CHECK(st.connections_reused >= 18);
  // Finished calls leave the timeout watchdog at once (not after TIMEOUT_S).
  CHECK(st.watched == 0);
}

TEST_CASE("httplib: sequential calls do not wake the timeout watchdog "
          "(issue 17)") {
  transport_fixture f{"httplib"};
  auto src = f.source("ok");
  for (int i = 0; i < 10; ++i)
    REQUIRE(f.run(src, false).result.kind == outcome::ok);
  // Each call's deadline is later than the one the watchdog still waits for
  // (the first call's): only the first call wakes it.
  CHECK(f.stats().watchdog_wakes <= 2);
}

PGW_TRANSPORT_CASE(transport_fixture, "the API key is sent as a bearer token") {
  reset();
  auto src = source("ok");
  src->api_key = "sk-test-not-logged";
  CHECK(run(src, false).result.kind == outcome::ok);
  auto entries = log();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].at("auth").as_bool());
  CHECK(json::serialize(entries).find("sk-test") == std::string::npos);
}

namespace {

/// Threads of this process now (/proc/self/status).
long threads_now() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0)
      return std::stol(line.substr(8));
  return -1;
}

} // namespace

TEST_CASE("beast: calls in flight share the loop threads, and closing the "
          "transport closes them") {
  transport_fixture fx{"beast"};
  fx.reset();
  auto threads_before = threads_now();
  caf::scoped_actor self{fx.sys};
  std::vector<std::shared_ptr<call_handle>> handles;
  constexpr size_t n = 200;
  for (size_t i = 0; i < n; ++i) {
    upstream_call call;
    call.source = fx.source("hang");
    call.body = fx.body("hang", true);
    call.stream = true;
    handles.push_back(fx.tp->start(call, caf::actor_cast<caf::actor>(self), i));
  }
  // Every call reaches the upstream and hangs there.
  for (int i = 0; i < 1000 && fx.log().size() < n; ++i)
    std::this_thread::sleep_for(10ms);
  REQUIRE(fx.log().size() == n);
  CHECK(fx.stats().watched == n);
  CHECK(fx.stats().io_threads == std::max(1u, std::thread::hardware_concurrency()));
  // No thread per call: the loops (started with the transport) carry them.
  CHECK(threads_now() <= threads_before + 1);
  // Closing the transport ends them at once; their cancel handles stay safe.
  auto t0 = std::chrono::steady_clock::now();
  fx.made = test_transport{};
  fx.tp.reset();
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  for (auto& h : handles)
    h->cancel();
  json::array entries;
  for (int i = 0; i < 500; ++i) {
    entries = fx.log();
    size_t ended = 0;
    for (auto& e : entries)
      ended += e.at("ended_ms").is_null() ? 0 : 1;
    if (ended == n)
      break;
    std::this_thread::sleep_for(10ms);
  }
  for (auto& e : entries)
    CHECK(e.at("client_closed").as_bool());
  bool got_done = false;
  self->receive([&](atom::done, uint64_t, attempt_result&) { got_done = true; },
                caf::after(std::chrono::milliseconds(50)) >> [] {});
  CHECK_FALSE(got_done);
}

PGW_TRANSPORT_CASE(transport_fixture, "forward_deltas: a sink that handles "
                                      "none until the end gets at most 1025 "
                                      "for 20,000 events, adding up to the "
                                      "answer") {
  // 20,000 tokens as fast as the simulator writes them; the sink (this
  // actor) receives only the done message first, so every delta sent stays
  // alive in its mailbox. Before deltas were bounded, each event was one.
  caf::scoped_actor self{sys};
  auto handle = tp->start(chat_call(source("flood"), true, true),
                          caf::actor_cast<caf::actor>(self), 4);
  caf::optional<attempt_result> res;
  self->receive([&](atom::done, uint64_t, attempt_result& r) { res = std::move(r); },
                caf::after(std::chrono::seconds(60)) >> [&] {
                  FAIL("no answer from the transport within 60 s");
                });
  REQUIRE(res);
  REQUIRE(res->kind == outcome::ok);
  std::string text;
  long deltas = 0;
  for (bool more = true; more;)
    self->receive([&](atom::first_token, uint64_t) {},
                  [&](atom::delta, uint64_t, stream_delta& d) {
                    text += d.content;
                    ++deltas;
                  },
                  caf::after(std::chrono::milliseconds(0)) >> [&] {
                    more = false;
                  });
  MESSAGE(deltas << " deltas for " << res->content.size() << " bytes");
  CHECK(deltas >= 2);
  // One per event up to event_limit alive, then one per read up to
  // read_limit, then the rest at the end.
  CHECK(deltas <= stream_relay::read_limit + 1);
  CHECK(text == res->content);
  CHECK(res->content.size() > 20000);
}

PGW_TRANSPORT_CASE(transport_fixture, "forward_deltas: with 32 deltas "
                                      "alive, what a read brought goes out "
                                      "at the read's end, not when the "
                                      "stream goes on") {
  // 100 events at once, then a 20 s stall. The sink keeps every delta it
  // receives (each holds its ticket), so after the 32nd the events are
  // held; the flush at the end of each read sends them. Without it they
  // would wait for the stream's end (the stall, or the idle timeout).
  caf::scoped_actor self{sys};
  auto handle = tp->start(chat_call(source("burst-stall"), true, true),
                          caf::actor_cast<caf::actor>(self), 6);
  auto burst = burst_content();
  std::vector<stream_delta> kept;
  std::string text;
  bool ended = false;
  auto give_up = std::chrono::steady_clock::now() + 5s;
  while (text.size() < burst.size() && !ended
         && std::chrono::steady_clock::now() < give_up)
    self->receive([&](atom::first_token, uint64_t) {},
                  [&](atom::delta, uint64_t, stream_delta& d) {
                    text += d.content;
                    kept.push_back(std::move(d));
                  },
                  [&](atom::done, uint64_t, attempt_result&) { ended = true; },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
  CHECK_FALSE(ended); // the stream is still stalled
  CHECK(text == burst);
  // One per event while fewer than 32 were alive, then one per read.
  CHECK(kept.size() > static_cast<size_t>(stream_relay::event_limit));
  handle->cancel();
}

PGW_TRANSPORT_CASE(transport_fixture, "forward_deltas: each delta after "
                                      "the first token, in order, adding up "
                                      "to the answer") {
  for (bool forward : {true, false}) {
    CAPTURE(forward);
    caf::scoped_actor self{sys};
    auto handle = tp->start(chat_call(source("long-answer"), true, forward),
                            caf::actor_cast<caf::actor>(self), 9);
    bool first_token = false;
    bool delta_before_token = false;
    std::string text;
    int deltas = 0;
    caf::optional<attempt_result> res;
    while (!res) {
      self->receive(
        [&](atom::first_token, uint64_t) { first_token = true; },
        [&](atom::delta, uint64_t tag, stream_delta& d) {
          CHECK(tag == 9);
          delta_before_token = delta_before_token || !first_token;
          text += d.content;
          ++deltas;
        },
        [&](atom::done, uint64_t, attempt_result& r) { res = std::move(r); },
        caf::after(std::chrono::seconds(30)) >> [&] {
          FAIL("no answer from the transport within 30 s");
        });
    }
    REQUIRE(res->kind == outcome::ok);
    CHECK(first_token);
    CHECK_FALSE(delta_before_token);
    if (forward) {
      CHECK(deltas >= 2); // 40 tokens 20 ms apart come in several events
      CHECK(text == res->content);
    } else {
      CHECK(deltas == 0);
    }
  }
}
