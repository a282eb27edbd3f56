// pgw::client sends chat calls through one long-lived requester actor
// (issue 17): no actor is spawned per call, every call gets its own answer,
// and the requester ends once the client is gone and its calls answered.

#include "actors/client.hpp"
#include "messages/chat.hpp"
#include "messages/embed.hpp"
#include "messages/errors.hpp"
#include "messages/ocr.hpp"
#include "messages/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "fixtures/eventually.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

using namespace pgw;

using pgw::test::eventually;

namespace {

struct client_config : caf::actor_system_config {
  client_config() {
    pgw::add_message_types(*this);
    set("scheduler.max-threads", 2);
  }
};

/// What the fake gateway saw: the requesters' addresses.
struct seen {
  std::mutex mtx;
  std::set<caf::actor_addr> senders;
  int calls = 0;

  /// Counts a call and remembers who sent it.
  void note(caf::event_based_actor* self) {
    std::lock_guard<std::mutex> guard{mtx};
    senders.insert(caf::actor_cast<caf::actor_addr>(self->current_sender()));
    ++calls;
  }
};

/// Answers `chat` with the request's first message as content; a call whose
/// content is "hold" is answered only on `(atom::start)`. The side calls: a
/// vector per input (its length = the input's), or an error for "fail";
/// the image as text, never answered for "hold".
caf::behavior fake_gateway(caf::event_based_actor* self,
                           std::shared_ptr<seen> log) {
  auto held = std::make_shared<std::vector<
    std::pair<caf::response_promise, std::string>>>();
  auto parked = std::make_shared<std::vector<caf::response_promise>>();
  return {
    [self, log, held](atom::chat, chat_request& req) -> caf::result<chat_response> {
      log->note(self);
      chat_response resp;
      resp.content = req.messages.empty() ? "" : req.messages[0].content;
      if (resp.content == "fail")
        return caf::make_error(caf::sec::runtime_error, "failed");
      if (resp.content == "hold") {
        auto rp = self->make_response_promise();
        held->emplace_back(rp, resp.content);
        return caf::delegated<chat_response>{};
      }
      return resp;
    },
    [held](atom::start) {
      for (auto& [rp, content] : *held) {
        chat_response resp;
        resp.content = content;
        rp.deliver(resp);
      }
      held->clear();
    },
    [self, log](atom::embed, embed_request& req)
      -> caf::result<embed_response> {
      log->note(self);
      embed_response resp;
      for (auto& in : req.inputs) {
        if (in == "fail")
          return make_error(error_code::request_rejected, "no vectors");
        resp.vectors.emplace_back(in.size(), 0.5f);
      }
      return resp;
    },
    [self, log, parked](atom::ocr, ocr_request& req)
      -> caf::result<ocr_response> {
      log->note(self);
      if (req.image == "hold") {
        // Kept, so that the requester's request stays open.
        parked->push_back(self->make_response_promise());
        return caf::delegated<ocr_response>{};
      }
      ocr_response resp;
      resp.text = req.image;
      return resp;
    },
  };
}

/// Waits for the fake gateway's one call (which it holds), kills the actor
/// that sent it — the client's requester, as the actor system stopping
/// would end it — and returns the answer the call's
/// callback then gave (`answer`, set by the callback).
template <class Response>
caf::expected<Response>
answer_once_sender_killed(seen& log,
                          std::future<caf::expected<Response>> answer) {
  REQUIRE(eventually([&] {
    std::lock_guard<std::mutex> guard{log.mtx};
    return log.calls == 1;
  }));
  caf::actor sender;
  {
    std::lock_guard<std::mutex> guard{log.mtx};
    REQUIRE(log.senders.size() == 1);
    sender = caf::actor_cast<caf::actor>(*log.senders.begin());
  }
  REQUIRE(sender);
  caf::anon_send_exit(sender, caf::exit_reason::kill);
  REQUIRE(answer.wait_for(std::chrono::seconds(10))
          == std::future_status::ready);
  return answer.get();
}

chat_request ask(const std::string& text) {
  chat_request req;
  req.messages.push_back({"user", text, {}});
  return req;
}

} // namespace

TEST_CASE("client: calls go through one requester, no actor per call") {
  client_config cfg;
  caf::actor_system sys{cfg};
  auto log = std::make_shared<seen>();
  auto gw = sys.spawn(fake_gateway, log);
  {
    client cl{sys, caf::actor_cast<gateway_actor>(gw)};
    auto first_id = sys.latest_actor_id();
    for (int i = 0; i < 5; ++i) {
      auto res = cl.chat(ask("call " + std::to_string(i)));
      REQUIRE(res);
      CHECK(res->content == "call " + std::to_string(i));
    }
    std::vector<std::future<caf::expected<chat_response>>> futures;
    for (int i = 0; i < 20; ++i)
      futures.push_back(cl.chat_async(ask("async " + std::to_string(i))));
    for (int i = 0; i < 20; ++i) {
      auto res = futures[static_cast<size_t>(i)].get();
      REQUIRE(res);
      CHECK(res->content == "async " + std::to_string(i));
    }
    // A copy shares the requester.
    client copy = cl;
    CHECK(copy.chat(ask("copy")));
    CHECK(sys.latest_actor_id() == first_id);
  }
  std::lock_guard<std::mutex> guard{log->mtx};
  CHECK(log->calls == 26);
  CHECK(log->senders.size() == 1);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
}

TEST_CASE("client: a call still pending when the client goes is answered, "
          "then the requester ends") {
  client_config cfg;
  caf::actor_system sys{cfg};
  auto log = std::make_shared<seen>();
  auto gw = sys.spawn(fake_gateway, log);
  auto running = sys.registry().running();
  std::future<caf::expected<chat_response>> pending;
  {
    client cl{sys, caf::actor_cast<gateway_actor>(gw)};
    CHECK(sys.registry().running() == running + 1); // the requester
    pending = cl.chat_async(ask("hold"));
    REQUIRE(eventually([&] {
      std::lock_guard<std::mutex> guard{log->mtx};
      return log->calls == 1;
    }));
  }
  // The client is gone; its requester waits for the held answer.
  CHECK(sys.registry().running() == running + 1);
  caf::anon_send(gw, atom::start_v);
  auto res = pending.get();
  REQUIRE(res);
  CHECK(res->content == "hold");
  CHECK(eventually([&] { return sys.registry().running() == running; }));
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
}

TEST_CASE("client: chat_then calls back once per call with its own answer "
          "or error") {
  client_config cfg;
  caf::actor_system sys{cfg};
  auto log = std::make_shared<seen>();
  auto gw = sys.spawn(fake_gateway, log);
  client cl{sys, caf::actor_cast<gateway_actor>(gw)};
  std::vector<std::promise<caf::expected<chat_response>>> answers(10);
  std::vector<int> times(answers.size(), 0);
  std::mutex mtx;
  for (size_t i = 0; i < answers.size(); ++i)
    cl.chat_then(ask("then " + std::to_string(i)),
                 [&, i](caf::expected<chat_response> r) {
                   std::lock_guard<std::mutex> guard{mtx};
                   if (++times[i] == 1)
                     answers[i].set_value(std::move(r));
                 });
  for (size_t i = 0; i < answers.size(); ++i) {
    auto res = answers[i].get_future().get();
    REQUIRE(res);
    CHECK(res->content == "then " + std::to_string(i));
  }
  // A failed call: the callback hears the error.
  std::promise<caf::expected<chat_response>> failed;
  cl.chat_then(ask("fail"), [&](caf::expected<chat_response> r) {
    failed.set_value(std::move(r));
  });
  auto res = failed.get_future().get();
  CHECK_FALSE(res);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  std::lock_guard<std::mutex> guard{mtx};
  for (int n : times)
    CHECK(n == 1);
}

TEST_CASE("client: chat_then calls back once, with an internal error, when "
          "the requester stops before the answer") {
  client_config cfg;
  caf::actor_system sys{cfg};
  auto log = std::make_shared<seen>();
  auto gw = sys.spawn(fake_gateway, log);
  client cl{sys, caf::actor_cast<gateway_actor>(gw)};
  std::promise<caf::expected<chat_response>> answer;
  std::atomic<int> times{0};
  cl.chat_then(ask("hold"), [&](caf::expected<chat_response> r) {
    if (++times == 1)
      answer.set_value(std::move(r));
  });
  // The gateway holds the call; its requester is killed meanwhile.
  auto res = answer_once_sender_killed(*log, answer.get_future());
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == error_code::internal);
  CHECK(describe(res.error()).find("requester stopped") != std::string::npos);
  // The held answer, delivered now, reaches nobody.
  caf::anon_send(gw, atom::start_v);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  CHECK(times == 1);
}

TEST_CASE("client: embed_then and ocr_then call back once each, with the "
          "answer or the gateway's error") {
  client_config cfg;
  caf::actor_system sys{cfg};
  auto log = std::make_shared<seen>();
  auto gw = sys.spawn(fake_gateway, log);
  client cl{sys, caf::actor_cast<gateway_actor>(gw)};
  auto actors_before = sys.registry().running();
  std::atomic<int> embedded{0};
  std::atomic<int> failed{0};
  std::atomic<int> read{0};
  std::promise<caf::expected<embed_response>> vectors;
  std::promise<caf::expected<embed_response>> refusal;
  std::promise<caf::expected<ocr_response>> text;
  embed_request two;
  two.inputs = {"ab", "abcd"};
  cl.embed_then(two, [&](caf::expected<embed_response> r) {
    if (++embedded == 1)
      vectors.set_value(std::move(r));
  });
  embed_request bad;
  bad.inputs = {"ok", "fail"};
  cl.embed_then(bad, [&](caf::expected<embed_response> r) {
    if (++failed == 1)
      refusal.set_value(std::move(r));
  });
  ocr_request page;
  page.image = "page text";
  cl.ocr_then(page, [&](caf::expected<ocr_response> r) {
    if (++read == 1)
      text.set_value(std::move(r));
  });
  auto v = vectors.get_future().get();
  REQUIRE(v);
  REQUIRE(v->vectors.size() == 2);
  CHECK(v->vectors[0].size() == 2);
  CHECK(v->vectors[1].size() == 4);
  auto e = refusal.get_future().get();
  REQUIRE_FALSE(e);
  CHECK(code_of(e.error()) == error_code::request_rejected);
  auto o = text.get_future().get();
  REQUIRE(o);
  CHECK(o->text == "page text");
  // No actor is left over from the calls (no callback can come again):
  // the system runs as many actors as before them.
  CHECK(eventually(
    [&] { return sys.registry().running() == actors_before; }));
  CHECK(embedded == 1);
  CHECK(failed == 1);
  CHECK(read == 1);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
}

TEST_CASE("client: ocr_then calls back once, with an internal error, when "
          "the requester stops before the answer") {
  client_config cfg;
  caf::actor_system sys{cfg};
  auto log = std::make_shared<seen>();
  auto gw = sys.spawn(fake_gateway, log);
  client cl{sys, caf::actor_cast<gateway_actor>(gw)};
  std::promise<caf::expected<ocr_response>> answer;
  std::atomic<int> times{0};
  ocr_request held;
  held.image = "hold";
  cl.ocr_then(held, [&](caf::expected<ocr_response> r) {
    if (++times == 1)
      answer.set_value(std::move(r));
  });
  auto res = answer_once_sender_killed(*log, answer.get_future());
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == error_code::internal);
  CHECK(describe(res.error()).find("requester stopped before the call's answer")
        != std::string::npos);
  CHECK(times == 1);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
}
