// Protocol atoms and typed interfaces (issue 10): one meaning per atom, the
// attempt's stop label typed, internal handlers marked, one status protocol
// shared by every long-lived actor. Compile-time facts, checked here so a
// regression names itself.

#include "actors/interfaces.hpp"

#include <caf/atom.hpp>
#include <caf/detail/type_list.hpp>
#include <doctest/doctest.h>

#include <memory>
#include <set>
#include <string>

using namespace pgw;

namespace {

template <class Interface, class Signature>
constexpr bool speaks() {
  return caf::detail::tl_contains<typename Interface::signatures,
                                  Signature>::value;
}

template <class Interface, class Status>
constexpr bool extends_status() {
  return caf::detail::tl_subset_of<
    typename status_client_actor<Status>::signatures,
    typename Interface::signatures>::value;
}

} // namespace

TEST_CASE("cancel, stop, done, stream_end and internal are distinct atoms") {
  std::set<std::string> texts{
    caf::to_string(atom::cancel::value), caf::to_string(atom::stop::value),
    caf::to_string(atom::done::value), caf::to_string(atom::stream_end::value),
    caf::to_string(atom::internal::value)};
  CHECK(texts.size() == 5);
  CHECK(caf::to_string(atom::stop::value) == "stop");
  CHECK(caf::to_string(atom::stream_end::value) == "stream_end");
  CHECK(caf::to_string(atom::internal::value) == "internal");
}

TEST_CASE("the supervisor stops an attempt with an outcome, not a string") {
  CHECK(speaks<attempt_actor, caf::reacts_to<atom::stop, outcome>>());
  CHECK_FALSE(
    speaks<attempt_actor, caf::reacts_to<atom::cancel, std::string>>());
  // The caller-side cancel keeps its atom at the gateway and the calls.
  CHECK(speaks<gateway_actor, caf::reacts_to<atom::cancel, std::string>>());
  CHECK(speaks<call_supervisor_actor, caf::reacts_to<atom::cancel>>());
}

TEST_CASE("backend calls finishing on I/O threads are internal messages") {
  using task = std::shared_ptr<local_task>;
  CHECK(speaks<limiter_actor, caf::reacts_to<atom::internal, task>>());
  CHECK(speaks<breaker_actor, caf::reacts_to<atom::internal, task>>());
  CHECK(speaks<cache_actor, caf::reacts_to<atom::internal, task>>());
  CHECK_FALSE(speaks<limiter_actor, caf::reacts_to<atom::done, task>>());
  CHECK_FALSE(speaks<breaker_actor, caf::reacts_to<atom::done, task>>());
  CHECK_FALSE(speaks<cache_actor, caf::reacts_to<atom::done, task>>());
}

TEST_CASE("every long-lived actor's interface extends the status protocol") {
  CHECK(extends_status<gateway_actor, gateway_status>());
  CHECK(extends_status<limiter_actor, limiter_status>());
  CHECK(extends_status<breaker_actor, breaker_status>());
  CHECK(extends_status<telemetry_actor, telemetry_status>());
  CHECK(extends_status<cache_actor, cache_status>());
  // A status-only handle is what a limiter handle converts to.
  limiter_actor lim;
  status_client_actor<limiter_status> status_only = lim;
  CHECK(!status_only);
}
