// `pgw-actor status --connect HOST:PORT [--json]`: asks a node that runs
// with `--publish` for its live status (node.hpp) and prints it.

#include "apps/cli/status_publish.hpp"

#include "commands.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace pgw::cli {

int status_main(const std::vector<std::string>& args) {
  std::string target;
  bool json_out = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--connect" && i + 1 < args.size())
      target = args[++i];
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
      return usage_failure("usage: pgw-actor status --connect HOST:PORT "
                           "[--json]",
                           true);
    std::fprintf(stderr, "usage: pgw-actor status --connect HOST:PORT "
                         "[--json]\n");
    return exit_usage;
  }
  auto hp = parse_host_port(target);
  if (!hp)
    return failed(json_out ? words_of(hp.error()) : describe(hp.error()),
                  exit_usage);
  system_config cfg{true};
  caf::actor_system sys{cfg};
  auto node = sys.middleman().remote_actor<node_status_actor>(hp->first,
                                                              hp->second);
  if (!node)
    return failed("cannot reach " + target + ": "
                    + sys.render(node.error()),
                  exit_other);
  caf::scoped_actor self{sys};
  int rc = exit_ok;
  self->request(*node, std::chrono::seconds(10), atom::status_v)
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
