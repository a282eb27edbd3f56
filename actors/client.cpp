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

namespace {

/// Sends `(atom, req)` to `gw` from a helper actor; the future holds the
/// single answer.
template <class Response, class Atom, class Request>
std::future<caf::expected<Response>>
ask(caf::actor_system& sys, const gateway_actor& gw, Atom atom_value,
    Request req) {
  auto promise = std::make_shared<std::promise<caf::expected<Response>>>();
  auto fut = promise->get_future();
  sys.spawn([gw, atom_value, req = std::move(req),
             promise](caf::event_based_actor* self) {
    self->request(gw, caf::infinite, atom_value, req)
      .then([promise](Response& resp) { promise->set_value(std::move(resp)); },
            [promise](caf::error& err) { promise->set_value(std::move(err)); });
  });
  return fut;
}

} // namespace

std::future<caf::expected<embed_response>>
client::embed_async(embed_request req) {
  return ask<embed_response>(sys_, gateway_, atom::embed_v, std::move(req));
}

caf::expected<ocr_response> client::recognize_text(std::string image) {
  ocr_request req;
  req.image = std::move(image);
  return ocr_async(std::move(req)).get();
}

caf::expected<ocr_response> client::parse_layout(std::string image) {
  ocr_request req;
  req.image = std::move(image);
  req.layout = true;
  return ocr_async(std::move(req)).get();
}

std::future<caf::expected<ocr_response>> client::ocr_async(ocr_request req) {
  return ask<ocr_response>(sys_, gateway_, atom::ocr_v, std::move(req));
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
