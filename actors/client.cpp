#include "actors/client.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <memory>

namespace pgw {

client::client(caf::actor_system& sys, gateway_actor gateway)
  : sys_(sys), gateway_(std::move(gateway)) {
  // nop
}

caf::expected<chat_response> client::chat(chat_request req) {
  return chat_async(std::move(req)).get();
}

std::future<caf::expected<chat_response>> client::chat_async(chat_request req) {
  auto promise = std::make_shared<std::promise<caf::expected<chat_response>>>();
  auto fut = promise->get_future();
  auto gw = gateway_;
  sys_.spawn([gw, req = std::move(req), promise](caf::event_based_actor* self) {
    self->request(gw, caf::infinite, atom::chat_v, req)
      .then(
        [promise](chat_response& resp) { promise->set_value(std::move(resp)); },
        [promise](caf::error& err) { promise->set_value(std::move(err)); });
  });
  return fut;
}

caf::expected<embed_response> client::embed(std::vector<std::string> inputs) {
  embed_request req;
  req.inputs = std::move(inputs);
  return embed_async(std::move(req)).get();
}

std::future<caf::expected<embed_response>>
client::embed_async(embed_request req) {
  using result = caf::expected<embed_response>;
  auto promise = std::make_shared<std::promise<result>>();
  auto fut = promise->get_future();
  auto gw = gateway_;
  sys_.spawn([gw, req = std::move(req), promise](caf::event_based_actor* self) {
    self->request(gw, caf::infinite, atom::embed_v, req)
      .then(
        [promise](embed_response& resp) { promise->set_value(std::move(resp)); },
        [promise](caf::error& err) { promise->set_value(std::move(err)); });
  });
  return fut;
}

void client::cancel(const std::string& call_id) {
  caf::anon_send(gateway_, atom::cancel_v, call_id);
}

caf::expected<gateway_status> client::status() {
  caf::scoped_actor self{sys_};
  caf::expected<gateway_status> out{caf::error{}};
  self->request(gateway_, caf::infinite, atom::status_v)
    .receive([&](gateway_status& st) { out = std::move(st); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

} // namespace pgw
