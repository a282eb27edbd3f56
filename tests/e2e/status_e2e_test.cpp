// A node's live status over CAF's network layer: `demo --serve-status`
// publishes it, `pgw-actor status --connect` reads it from another process.

#include "fixtures/process.hpp"

#include <boost/json.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp/version.hpp>
#include <caf/io/middleman.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <set>
#include <thread>

using namespace pgw::test;
namespace json = boost::json;

TEST_CASE("status --connect prints a remote node's per-source state") {
  child_process demo{{PGW_ACTOR_BIN, "demo", "--calls", "8", "--publish",
                      "127.0.0.1:0"}};
  std::string line;
  for (int i = 0; i < 100; ++i) {
    line = demo.read_line(std::chrono::seconds(30));
    if (line.rfind("status published on ", 0) == 0)
      break;
  }
  REQUIRE(line.rfind("status published on ", 0) == 0);
  auto where = line.substr(std::string{"status published on "}.size());
  where = where.substr(0, where.find(' '));
  auto text = run_program({PGW_ACTOR_BIN, "status", "--connect", where});
  INFO(text.err);
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("scope DEMO") != std::string::npos);
  for (auto name : {"healthy", "flaky", "slow", "recovering"})
    CHECK(text.out.find(name) != std::string::npos);
  CHECK(text.out.find("breaker") != std::string::npos);
  CHECK(text.out.find("calls started 8") != std::string::npos);
  auto js = run_program({PGW_ACTOR_BIN, "status", "--connect", where, "--json"});
  CHECK(js.exit_code == 0);
  auto doc = json::parse(js.out).as_object();
  CHECK(doc.at("calls_started").as_int64() == 8);
  CHECK(doc.at("sources").as_array().size() == 4);
  for (auto& s : doc.at("sources").as_array()) {
    auto& lim = s.at("limiter").as_object();
    CHECK(lim.at("acquired").as_int64() == lim.at("settled").as_int64());
  }
  demo.signal(SIGTERM);
  CHECK(demo.wait() == 0);
  // Nobody listening: a clear failure, not a hang.
  auto gone = run_program({PGW_ACTOR_BIN, "status", "--connect", where});
  CHECK(gone.exit_code == 1);
  CHECK(run_program({PGW_ACTOR_BIN, "status"}).exit_code == 2);
}

TEST_CASE("status --json: an unreachable node is an error object on stdout") {
  auto r = run_program({PGW_ACTOR_BIN, "status", "--connect", "127.0.0.1:1",
                        "--json"});
  CHECK(r.exit_code == 1);
  auto err = json::parse(r.out).at("error");
  CHECK(std::string(err.at("message").as_string())
          .rfind("cannot reach 127.0.0.1:1: ", 0)
        == 0);
  auto bad = run_program({PGW_ACTOR_BIN, "status", "--connect", "nowhere",
                          "--json"});
  CHECK(bad.exit_code == 2);
  CHECK(json::parse(bad.out).at("error").at("code").as_string()
        == "invalid_request");
}

TEST_CASE("status: a refused port and an unreachable network are named") {
  // Nothing listens on port 1: the connection is refused.
  auto refused = run_program({PGW_ACTOR_BIN, "status", "--connect",
                              "127.0.0.1:1", "--json"});
  CHECK(refused.exit_code == 1);
  CHECK(std::string(json::parse(refused.out).at("error").at("message")
                      .as_string())
        == "cannot reach 127.0.0.1:1: connection refused (nothing listens "
           "there)");
  // A network namespace of its own (unshare -rn; the user namespace makes
  // the test root in it) has a loopback that is down and no route: the
  // kernel answers ENETUNREACH at once.
  const char* unshare = "/usr/bin/unshare";
  auto probe = run_program({unshare, "-rn", "/bin/true"});
  if (probe.exit_code != 0) {
    MESSAGE("skipped: unshare -rn is not permitted here (" << probe.err
                                                           << ")");
    return;
  }
  auto plain = run_program({unshare, "-rn", PGW_ACTOR_BIN, "status",
                            "--connect", "10.255.255.1:5000"});
  CHECK(plain.exit_code == 1);
  CHECK(plain.err.find("cannot reach 10.255.255.1:5000: the host is "
                       "unreachable (no route to it)")
        != std::string::npos);
  auto js = run_program({unshare, "-rn", PGW_ACTOR_BIN, "status",
                         "--connect", "10.255.255.1:5000", "--json"});
  CHECK(js.exit_code == 1);
  CHECK(std::string(json::parse(js.out).at("error").at("message").as_string())
        == "cannot reach 10.255.255.1:5000: the host is unreachable (no "
           "route to it)");
}

namespace {

/// A loopback port that completes TCP connections (the kernel's backlog)
/// and never says a word: not a node's --publish port.
struct silent_listener {
  int sock = -1;
  int port = 0;

  silent_listener() {
    sock = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(sock >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(sock, 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(addr.sin_port);
  }

  ~silent_listener() {
    ::close(sock);
  }
};

/// Runs `pgw-actor status ARGS` (stderr joined to stdout); its exit status
/// and output, or nullopt when it still runs after `limit` (then stopped).
std::optional<std::pair<int, std::string>>
status_within(const std::vector<std::string>& args,
              std::chrono::milliseconds limit) {
  std::vector<std::string> argv{"/bin/sh", "-c",
                                "exec \"$0\" status \"$@\" 2>&1",
                                PGW_ACTOR_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  child_process p{argv};
  auto rc = p.wait_for(limit);
  if (!rc)
    return std::nullopt;
  std::string out;
  for (auto some = p.read_some(); !some.empty(); some = p.read_some())
    out += some;
  return std::make_pair(*rc, out);
}

} // namespace

TEST_CASE("status --connect gives up on a port that accepts and never "
          "answers: within 10 s by default, within --timeout S") {
  silent_listener silent;
  auto where = "127.0.0.1:" + std::to_string(silent.port);
  auto t0 = std::chrono::steady_clock::now();
  auto plain = status_within({"--connect", where}, std::chrono::seconds(20));
  REQUIRE(plain.has_value()); // it used to wait forever
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  CHECK(plain->first == 1);
  CHECK(plain->second
        == "pgw-actor: internal: cannot reach " + where
             + ": timed out after 10 s waiting for the node's handshake (the "
               "port accepts connections but does not answer as a pgw "
               "node's --publish port)\n");
  auto js = status_within({"--connect", where, "--timeout", "0.5", "--json"},
                          std::chrono::seconds(10));
  REQUIRE(js.has_value());
  CHECK(js->first == 1);
  auto err = json::parse(js->second).at("error");
  CHECK(std::string(err.at("message").as_string())
        == "cannot reach " + where
             + ": timed out after 0.5 s waiting for the node's handshake (the "
               "port accepts connections but does not answer as a pgw "
               "node's --publish port)");
  auto bad = status_within({"--connect", where, "--timeout", "0"},
                           std::chrono::seconds(10));
  REQUIRE(bad.has_value());
  CHECK(bad->first == 2);
  CHECK(bad->second.find("--timeout takes a number of seconds above 0")
        != std::string::npos);
}

namespace {

/// A loopback port nothing listens on: bound, read and closed again.
int refused_port() {
  silent_listener gone;
  auto port = gone.port;
  ::close(gone.sock);
  gone.sock = -1;
  return port;
}

/// A loopback port that accepts each connection and closes it at once.
struct closing_listener : silent_listener {
  std::thread loop;

  closing_listener() {
    loop = std::thread{[fd = sock] {
      for (int c; (c = ::accept(fd, nullptr, nullptr)) >= 0;)
        ::close(c);
    }};
  }

  ~closing_listener() {
    ::shutdown(sock, SHUT_RDWR); // ends the accept loop
    loop.join();
  }
};

/// `status ARGS` plain and with --json: the plain stderr line must be
/// "pgw-actor: internal: MESSAGE" and the error object's message MESSAGE.
void check_status_error(const std::vector<std::string>& args,
                        const std::string& message) {
  std::vector<std::string> argv{PGW_ACTOR_BIN, "status"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto plain = run_program(argv);
  CHECK(plain.exit_code == 1);
  CHECK(plain.out.empty());
  CHECK(plain.err == "pgw-actor: internal: " + message + "\n");
  argv.push_back("--json");
  auto js = run_program(argv);
  CHECK(js.exit_code == 1);
  INFO(js.out);
  auto err = json::parse(js.out).at("error");
  CHECK(err.at("code").as_string() == "internal");
  CHECK(std::string(err.at("message").as_string()) == message);
}

} // namespace

TEST_CASE("status --connect says in plain words why a node cannot be "
          "reached") {
  SUBCASE("a port nothing listens on") {
    auto where = "127.0.0.1:" + std::to_string(refused_port());
    check_status_error({"--connect", where},
                       "cannot reach " + where
                         + ": connection refused (nothing listens there)");
  }
  SUBCASE("a host name that does not resolve") {
    check_status_error({"--connect", "no-such-host.invalid:7700"},
                       "cannot reach no-such-host.invalid:7700: the host "
                       "name does not resolve");
  }
  SUBCASE("an IPv6 address: CAF's middleman connects over IPv4 only") {
    check_status_error({"--connect", "[::1]:7700"},
                       "cannot reach [::1]:7700: the host has only IPv6 "
                       "addresses and the status connection uses IPv4: give "
                       "an IPv4 address such as 127.0.0.1");
  }
  SUBCASE("a port that closes every connection at once") {
    closing_listener closing;
    auto where = "127.0.0.1:" + std::to_string(closing.port);
    check_status_error({"--connect", where, "--timeout", "5"},
                       "cannot reach " + where
                         + ": the peer closed the connection during the "
                           "handshake (the port is not a pgw node's "
                           "--publish port)");
  }
}

namespace {

/// An actor of another interface than a pgw node's status.
using not_status_actor = caf::typed_actor<caf::replies_to<int32_t>::with<int32_t>>;

not_status_actor::behavior_type doubler() {
  return {[](int32_t x) { return x * 2; }};
}

/// A CAF node in this process on a loopback port chosen at run time, as
/// another program would be: `app_id` its application identifier.
struct caf_peer {
  struct config : caf::actor_system_config {
    explicit config(const std::string& app_id) {
      load<caf::io::middleman>();
      set("middleman.app-identifiers", std::vector<std::string>{app_id});
    }
  };
  config cfg;
  caf::actor_system sys;

  caf::actor published;

  explicit caf_peer(const std::string& app_id = "generic-caf-app")
    : cfg(app_id), sys(cfg) {
  }

  /// The actor system waits for its actors when destroyed: stop the
  /// published one first.
  ~caf_peer() {
    if (published)
      caf::anon_send_exit(published, caf::exit_reason::user_shutdown);
  }

  /// Publishes an actor of another interface on a port chosen at run time.
  caf::expected<uint16_t> publish_doubler() {
    auto doubling = sys.spawn(doubler);
    published = caf::actor_cast<caf::actor>(doubling);
    return sys.middleman().publish(doubling, 0, "127.0.0.1", true);
  }

  std::string where(caf::expected<uint16_t> port) {
    REQUIRE(port);
    return "127.0.0.1:" + std::to_string(*port);
  }
};

/// A loopback port that answers each connection with `greeting` (written
/// once) and keeps it open until the listener ends: a node that sends its
/// server handshake and waits for the client's, on any number of
/// connections at once.
struct greeting_listener : silent_listener {
  std::vector<int> open_conns; // the loop's until it is joined
  std::thread loop;

  explicit greeting_listener(std::vector<char> greeting) {
    loop = std::thread{[this, fd = sock, bytes = std::move(greeting)] {
      for (int c; (c = ::accept(fd, nullptr, nullptr)) >= 0;) {
        open_conns.push_back(c);
        (void) ::send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      }
    }};
  }

  ~greeting_listener() {
    ::shutdown(sock, SHUT_RDWR); // ends the accept loop
    loop.join();
    for (int c : open_conns)
      ::close(c);
  }
};

/// The server handshake a CAF node of BASP version `version` sends,
/// written with this CAF's serializer: a node `from` of application
/// `app_id` that publishes nothing.
std::vector<char> server_handshake(caf::actor_system& sys, uint64_t version,
                                   const std::string& app_id) {
  std::vector<char> payload;
  {
    caf::binary_serializer sink{sys, payload};
    auto node = sys.node();
    std::vector<std::string> app_ids{app_id};
    auto aid = caf::invalid_actor_id;
    std::set<std::string> iface;
    REQUIRE(!sink(node, app_ids, aid, iface));
  }
  caf::io::basp::header hdr{caf::io::basp::message_type::server_handshake,
                            0,
                            static_cast<uint32_t>(payload.size()),
                            version,
                            caf::invalid_actor_id,
                            caf::invalid_actor_id};
  std::vector<char> out;
  caf::binary_serializer sink{sys, out};
  REQUIRE(!sink(hdr));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

} // namespace

TEST_CASE("status --connect names what another CAF program's port is") {
  SUBCASE("a CAF node that publishes nothing on that port") {
    caf_peer peer;
    auto where = peer.where(peer.sys.middleman().open(0, "127.0.0.1", true));
    check_status_error({"--connect", where},
                       "cannot reach " + where
                         + ": a CAF node listens there but publishes nothing "
                           "on that port");
  }
  SUBCASE("an actor of another interface") {
    caf_peer peer;
    auto where = peer.where(peer.publish_doubler());
    check_status_error({"--connect", where},
                       "cannot reach " + where
                         + ": the actor published there is not a pgw node's "
                           "status (another program, or a pgw of another "
                           "version)");
  }
  SUBCASE("the same handshake at this CAF's BASP version (the control)") {
    caf_peer peer;
    greeting_listener same{
      server_handshake(peer.sys, caf::io::basp::version, "generic-caf-app")};
    auto where = "127.0.0.1:" + std::to_string(same.port);
    check_status_error({"--connect", where, "--timeout", "5"},
                       "cannot reach " + where
                         + ": a CAF node listens there but publishes nothing "
                           "on that port");
  }
  SUBCASE("a CAF node of another BASP version (another CAF release)") {
    caf_peer peer;
    greeting_listener other{
      server_handshake(peer.sys, caf::io::basp::version + 1, "generic-caf-app")};
    auto where = "127.0.0.1:" + std::to_string(other.port);
    check_status_error({"--connect", where, "--timeout", "5"},
                       "cannot reach " + where
                         + fmt::format(": the node there speaks another "
                                       "version of CAF's protocol (BASP {}, "
                                       "this pgw's is {}: a pgw built with "
                                       "another CAF version)",
                                       caf::io::basp::version + 1,
                                       caf::io::basp::version));
  }
  SUBCASE("another CAF application") {
    caf_peer peer{"not-pgw"};
    auto where = peer.where(peer.publish_doubler());
    check_status_error({"--connect", where},
                       "cannot reach " + where
                         + ": the node there is another CAF application, "
                           "not pgw");
  }
}

TEST_CASE("status: bad arguments are invalid_request in chat's form") {
  auto bogus = run_program({PGW_ACTOR_BIN, "status", "--bogus"});
  CHECK(bogus.exit_code == 2);
  CHECK(bogus.err.rfind("pgw-actor: invalid_request: unknown option --bogus\n",
                        0)
        == 0);
  auto zero = run_program(
    {PGW_ACTOR_BIN, "status", "--connect", "127.0.0.1:0", "--json"});
  CHECK(zero.exit_code == 2);
  auto err = json::parse(zero.out).at("error");
  CHECK(err.at("code").as_string() == "invalid_request");
  CHECK(std::string(err.at("message").as_string())
        == "port 0 in '127.0.0.1:0': a node's --publish port is 1 to 65535");
  auto range = run_program({PGW_ACTOR_BIN, "status", "--connect",
                            "127.0.0.1:70000"});
  CHECK(range.exit_code == 2);
  CHECK(range.err == "pgw-actor: invalid_request: bad port in "
                     "'127.0.0.1:70000'\n");
}
