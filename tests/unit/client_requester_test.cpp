// pgw::client sends chat calls through one long-lived requester actor
// (issue 17): no actor is spawned per call, every call gets its own answer,
// and the requester ends once the client is gone and its calls answered.

#include "actors/client.hpp"
#include "messages/chat.hpp"
#include "messages/errors.hpp"
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
};

/// Answers `chat` with the request's first message as content; a call whose
/// content is "hold" is answered only on `(atom::start)`.
caf::behavior fake_gateway(caf::event_based_actor* self,
                           std::shared_ptr<seen> log) {
  auto held = std::make_shared<std::vector<
    std::pair<caf::response_promise, std::string>>>();
  return {
    [self, log, held](atom::chat, chat_request& req) -> caf::result<chat_response> {
      {
        std::lock_guard<std::mutex> guard{log->mtx};
        log->senders.insert(caf::actor_cast<caf::actor_addr>(self->current_sender()));
        ++log->calls;
      }
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
  };
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
  REQUIRE(eventually([&] {
    std::lock_guard<std::mutex> guard{log->mtx};
    return log->calls == 1;
  }));
  // The gateway holds the call; its requester is killed meanwhile (as the
  // actor system stopping would end it).
  caf::actor requester;
  {
    std::lock_guard<std::mutex> guard{log->mtx};
    REQUIRE(log->senders.size() == 1);
    requester = caf::actor_cast<caf::actor>(*log->senders.begin());
  }
  REQUIRE(requester);
  caf::anon_send_exit(requester, caf::exit_reason::kill);
  auto fut = answer.get_future();
  REQUIRE(fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto res = fut.get();
  REQUIRE_FALSE(res);
  CHECK(code_of(res.error()) == error_code::internal);
  CHECK(describe(res.error()).find("requester stopped") != std::string::npos);
  // The held answer, delivered now, reaches nobody.
  caf::anon_send(gw, atom::start_v);
  caf::anon_send_exit(gw, caf::exit_reason::user_shutdown);
  CHECK(times == 1);
}
