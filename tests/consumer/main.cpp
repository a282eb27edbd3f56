// An example backend embedding pgw: it builds settings in code, spawns a
// gateway for its scope and makes a blocking call. The CI check
// (check.cmake) builds it against the installed package, with this folder's
// own config/settings.hpp on the include path, runs it against the
// installed pgw-upstream-sim (argv[1]) and compares the part between the
// embed markers with the README's embedding example.

#include "config/settings.hpp" // the backend's own, not pgw's

// [embed]
#include <pgw/client.hpp>
#include <pgw/config/loader.hpp>
#include <pgw/messages/registry.hpp>
#include <pgw/node_builder.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

/// One call through the gateway of `scope`, configured from `env` (e.g.
/// `pgw::load_environment()`: the process environment plus ./.env).
/// Every step can fail; the answer is the response or the reason why not.
caf::expected<pgw::chat_response> ask(caf::actor_system& sys,
                                      const pgw::env_map& env,
                                      const std::string& scope,
                                      const std::string& prompt) {
  auto settings = pgw::load_settings(env);  // validated, or invalid_config
  if (!settings)
    return settings.error();
  auto gw = pgw::spawn_gateway(sys, *settings, scope);  // one per scope
  if (!gw)
    return gw.error();
  pgw::client cl{sys, *gw};  // or request(...) from your own actors
  pgw::chat_request req;
  pgw::chat_message msg;
  msg.role = "user";
  msg.content = prompt;
  req.messages.push_back(std::move(msg));
  auto res = cl.chat(req);  // exactly one chat_response or error
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return res;
}
// [/embed]

#include <csignal>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer PATH-TO-pgw-upstream-sim\n");
    return 2;
  }
  caf::actor_system_config cfg;
  pgw::add_message_types(cfg);  // pgw's type IDs and error category
  caf::actor_system sys{cfg};
  // Without configuration the call fails with a reason, not a crash.
  auto unconfigured = ask(sys, {}, app::gateway_scope, "hello");
  if (unconfigured) {
    std::fprintf(stderr, "an unconfigured scope answered\n");
    return 1;
  }
  std::printf("unconfigured: %s\n",
              pgw::describe(unconfigured.error()).c_str());
  // Start the simulator on a free port and read the port it printed.
  int out[2];
  if (pipe(out) != 0)
    return 1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    execl(argv[1], argv[1], "--listen", "127.0.0.1:0", (char*) nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n')
    line += c;
  auto port = line.substr(line.rfind(':') + 1);
  pgw::env_map env{
    {"APP__GENERIC__LOCAL__BASE_URL", "http://127.0.0.1:" + port + "/v1"},
    {"APP__GENERIC__LOCAL__MODEL", "ok"},
  };
  auto res = ask(sys, env, app::gateway_scope, "hello from a backend");
  int rc = 1;
  if (res && !res->content.empty() && res->source == "local") {
    std::printf("consumer ok: %zu chars from %s in %d attempt(s)\n",
                res->content.size(), res->source.c_str(), res->stats.attempts);
    rc = 0;
  } else {
    std::fprintf(stderr, "call failed: %s\n",
                 res ? "wrong answer" : pgw::describe(res.error()).c_str());
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  return rc;
}
