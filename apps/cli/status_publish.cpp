// Publishing a node's status and reading a remote node's status.

#include "apps/cli/status_publish.hpp"

#include "config/json_text.hpp"

#include "apps/cli/cli.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cstdio>

namespace pgw::cli {

namespace json = boost::json;

namespace {

node_status_actor::behavior_type node_status(node_status_actor::pointer self,
                                             gateway_actor gw) {
  // Ends with its gateway, so a finished program is not kept alive.
  self->link_to(gw);
  return {
    [self, gw](atom::status) { return self->delegate(gw, atom::status_v); },
  };
}

} // namespace

caf::expected<std::pair<std::string, uint16_t>>
parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return make_error(error_code::invalid_request,
                      "expected HOST:PORT, got '" + text + "'");
  auto port = parse_number(text.substr(colon + 1));
  if (!port || *port < 0 || *port > 65535
      || *port != static_cast<int>(*port))
    return make_error(error_code::invalid_request,
                      "bad port in '" + text + "'");
  return std::make_pair(text.substr(0, colon), static_cast<uint16_t>(*port));
}

caf::expected<uint16_t> publish_status(caf::actor_system& sys, gateway_actor gw,
                                       const std::string& host_port) {
  auto hp = parse_host_port(host_port);
  if (!hp)
    return hp.error();
  auto node = sys.spawn(node_status, std::move(gw));
  return sys.middleman().publish(node, hp->second, hp->first.c_str(), true);
}

std::string render_status(const gateway_status& st) {
  std::string out = fmt::format(
    "scope {} (selector {}): calls started {}, ok {}, failed {}, active {}\n",
    st.scope, st.selector, st.calls_started, st.calls_ok, st.calls_failed,
    st.calls_active);
  for (auto& s : st.sources) {
    auto& b = s.breaker;
    auto& l = s.limiter;
    auto limit = [](const caf::optional<int64_t>& x) {
      return x ? std::to_string(*x) : std::string{"-"};
    };
    out += fmt::format(
      "  {:<12} breaker {:<9} epoch {} streak {} failures {}/{} window "
      "{}/{}{}\n"
      "  {:<12} limiter rpm {}/{} tpm {}/{} in-flight {}/{}  ewma {:.2f}  "
      "cooling {:.1f}s  structured {}\n",
      s.name, b.state, b.epoch, b.reopen_streak, b.failure_count, b.threshold,
      b.window_failures, b.window_attempts,
      b.state == "open" ? fmt::format(" open for {:.1f}s more", b.open_for_s)
      : b.state == "half_open" && !b.probe_in_flight
        ? std::string{" (cooldown over: the next call probes)"}
        : std::string{},
      "", l.rpm_used, limit(l.rpm_limit), l.tpm_used, limit(l.tpm_limit),
      l.in_flight, limit(l.concurrency_limit), s.ewma, s.cooling_s,
      s.structured_rung);
    if (!b.unavailable.empty())
      out += fmt::format("  {:<12} breaker unreadable: {}\n", "",
                         b.unavailable);
    if (!l.unavailable.empty())
      out += fmt::format("  {:<12} limiter unreadable: {}\n", "",
                         l.unavailable);
  }
  return out;
}

std::string render_status_json(const gateway_status& st) {
  json::array sources;
  for (auto& s : st.sources) {
    auto& b = s.breaker;
    auto& l = s.limiter;
    sources.push_back(json::object{
      {"name", s.name},
      {"in_flight", s.in_flight},
      {"ewma", s.ewma},
      {"cooling_s", s.cooling_s},
      {"structured_rung", s.structured_rung},
      {"breaker",
       json::object{{"state", b.state},
                    {"epoch", b.epoch},
                    {"reopen_streak", b.reopen_streak},
                    {"failure_count", b.failure_count},
                    {"open_for_s", b.open_for_s},
                    {"window_attempts", b.window_attempts},
                    {"window_failures", b.window_failures},
                    {"unavailable", b.unavailable.empty()
                                      ? json::value(nullptr)
                                      : json::value(b.unavailable)}}},
      {"limiter",
       json::object{{"rpm_used", l.rpm_used},
                    {"tpm_used", l.tpm_used},
                    {"in_flight", l.in_flight},
                    {"acquired", l.acquired},
                    {"settled", l.settled},
                    {"released", l.released},
                    {"unavailable", l.unavailable.empty()
                                      ? json::value(nullptr)
                                      : json::value(l.unavailable)}}},
    });
  }
  return json_text(json::object{{"scope", st.scope},
                                      {"calls_started", st.calls_started},
                                      {"calls_ok", st.calls_ok},
                                      {"calls_failed", st.calls_failed},
                                      {"calls_active", st.calls_active},
                                      {"sources", std::move(sources)}});
}

} // namespace pgw::cli
