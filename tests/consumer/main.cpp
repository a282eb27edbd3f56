// An example backend embedding pgw: it builds settings in code, spawns a
// gateway for its scope and makes a blocking call. The CI check runs it
// against the installed pgw-upstream-sim (argv[1]).

#include <pgw/actors/client.hpp>
#include <pgw/actors/gateway.hpp>
#include <pgw/config/loader.hpp>
#include <pgw/messages/registry.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

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

  caf::actor_system_config cfg;
  pgw::add_message_types(cfg);
  caf::actor_system sys{cfg};
  pgw::env_map env{
    {"APP__GENERIC__LOCAL__BASE_URL", "http://127.0.0.1:" + port + "/v1"},
    {"APP__GENERIC__LOCAL__MODEL", "ok"},
  };
  auto settings = pgw::load_settings(env);
  int rc = 1;
  if (!settings) {
    std::fprintf(stderr, "%s\n", pgw::describe(settings.error()).c_str());
  } else if (auto gw = pgw::spawn_gateway(sys, *settings, "APP")) {
    pgw::client cl{sys, *gw};
    pgw::chat_request req;
    req.messages.push_back({"user", "hello from a backend", {}});
    auto res = cl.chat(req);
    if (res && !res->content.empty() && res->source == "local") {
      std::printf("consumer ok: %zu chars from %s in %d attempt(s)\n",
                  res->content.size(), res->source.c_str(),
                  res->stats.attempts);
      rc = 0;
    } else {
      std::fprintf(stderr, "call failed: %s\n",
                   res ? "wrong answer" : pgw::describe(res.error()).c_str());
    }
    caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  return rc;
}
