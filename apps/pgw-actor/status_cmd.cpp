// `pgw-actor status --connect HOST:PORT [--json]`: asks a node that runs
// with `--publish` for its live status (node.hpp) and prints it.

#include "apps/cli/status_publish.hpp"

#include "commands.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pgw::cli {

namespace {

constexpr const char* status_usage
  = "usage: pgw-actor status --connect HOST:PORT [--timeout S] [--json]";

caf::timespan as_timespan(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(seconds));
}

/// The status actor published at `host:port`, or why not (`why`, in plain
/// words). As `middleman::remote_actor`, but waiting at most `limit` for
/// the connection and CAF's handshake: a peer that accepts the connection
/// and never answers would hold `remote_actor` forever.
std::optional<node_status_actor>
reach(caf::actor_system& sys, const std::string& host, uint16_t port,
      double limit, std::string& why) {
  std::optional<node_status_actor> out;
  caf::scoped_actor self{sys};
  self
    ->request(sys.middleman().actor_handle(), as_timespan(limit),
              caf::connect_atom_v, host, port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
          const std::set<std::string>& ifs) {
        if (!ptr)
          why = sys.render(
            caf::make_error(caf::sec::no_actor_published_at_port, port));
        else if (!sys.assignable<node_status_actor>(ifs))
          why = "the actor published there is not a node's status";
        else
          out = caf::actor_cast<node_status_actor>(std::move(ptr));
      },
      [&](caf::error& err) {
        why = err == caf::sec::request_timeout
                ? fmt::format("timed out after {} s waiting for the node's "
                              "handshake (the port accepts connections but "
                              "does not answer as a pgw node's --publish "
                              "port)",
                              limit)
                : sys.render(err);
      });
  return out;
}

} // namespace

int status_main(const std::vector<std::string>& args) {
  std::string target;
  bool json_out = false;
  std::optional<double> timeout_s = 10;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--connect" && i + 1 < args.size())
      target = args[++i];
    else if (args[i] == "--timeout" && i + 1 < args.size())
      timeout_s = parse_number(args[++i]);
    else if (args[i] == "--json")
      json_out = true;
    else
      target.clear(), i = args.size();
  }
  // With --json every error is the error object chat prints, on stdout.
  auto failed = [json_out](const std::string& msg, int rc) {
    if (json_out)
      std::puts(error_json(make_error(rc == exit_usage
                                        ? error_code::invalid_request
                                        : error_code::internal,
                                      msg))
                  .c_str());
    else
      std::fprintf(stderr, "pgw-actor status: %s\n", msg.c_str());
    return rc;
  };
  if (target.empty()) {
    if (wants_json(args))
      return usage_failure(status_usage, true);
    std::fprintf(stderr, "%s\n", status_usage);
    return exit_usage;
  }
  if (!timeout_s || !(*timeout_s > 0 && *timeout_s <= 3600))
    return failed("--timeout takes a number of seconds above 0 and at most "
                  "3600",
                  exit_usage);
  auto hp = parse_host_port(target);
  if (!hp)
    return failed(json_out ? words_of(hp.error()) : describe(hp.error()),
                  exit_usage);
  system_config cfg{true};
  caf::actor_system sys{cfg};
  std::string why;
  auto node = reach(sys, hp->first, hp->second, *timeout_s, why);
  if (!node)
    return failed("cannot reach " + target + ": " + why, exit_other);
  caf::scoped_actor self{sys};
  int rc = exit_ok;
  self->request(*node, as_timespan(*timeout_s), atom::status_v)
    .receive(
      [&](gateway_status& st) {
        auto text = json_out ? render_status_json(st) + "\n"
                             : render_status(st);
        std::fputs(text.c_str(), stdout);
      },
      [&](caf::error& err) { rc = failed(sys.render(err), exit_other); });
  return rc;
}

} // namespace pgw::cli
