// `pgw-actor status --connect HOST:PORT [--json]`: asks a node that runs
// with `--publish` for its live status (node.hpp) and prints it.

#include "apps/cli/status_publish.hpp"

#include "commands.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/basp/version.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <fmt/format.h>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
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

constexpr const char* unresolved_words = "the host name does not resolve";

/// `host`'s TCP addresses (free them with freeaddrinfo), or nullptr.
addrinfo* resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  auto service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0)
    return nullptr;
  return found;
}

/// Why CAF found no address for `host`: CAF's network layer here connects
/// over IPv4 only, so a host with only IPv6 addresses ("::1") is "no such
/// host" to it although it resolves.
std::string why_no_address(const std::string& host, uint16_t port) {
  auto* found = resolve(host, port);
  if (found == nullptr)
    return unresolved_words;
  bool ipv6_only = true;
  for (auto* a = found; a != nullptr; a = a->ai_next)
    ipv6_only = ipv6_only && a->ai_family == AF_INET6;
  ::freeaddrinfo(found);
  return ipv6_only ? "the host has only IPv6 addresses and the status "
                     "connection uses IPv4: give an IPv4 address such as "
                     "127.0.0.1"
                   : unresolved_words;
}

/// `err` of connect_ipv4 when the host name does not resolve.
constexpr int unresolved_err = -1;

/// A TCP connection to `host:port` over IPv4 (as CAF's middleman makes
/// it), waiting at most `limit` (10 s at most); -1 and `err` set when none
/// (an errno value, or unresolved_err).
int connect_ipv4(const std::string& host, uint16_t port, double limit,
                 int& err) {
  auto* found = resolve(host, port);
  if (found == nullptr) {
    err = unresolved_err;
    return -1;
  }
  err = EAFNOSUPPORT; // no IPv4 address (CAF found one, though)
  int connected = -1;
  for (auto* a = found; a != nullptr && connected < 0; a = a->ai_next) {
    if (a->ai_family != AF_INET) // CAF tries IPv4 only
      continue;
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK,
                      a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      auto ms = static_cast<int>(std::min(limit, 10.0) * 1000);
      if (::poll(&p, 1, ms) <= 0) {
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0)
      connected = fd;
    else
      ::close(fd);
  }
  ::freeaddrinfo(found);
  return connected;
}

/// The BASP version a CAF node at `host:port` announces: the operation data
/// of the server handshake it sends first on a new connection. nullopt when
/// that header cannot be read within `limit`, or is not a server handshake.
/// CAF 0.17's middleman does not compare it, so a node of another CAF
/// release gets as far as its payload parses.
std::optional<uint64_t> announced_basp_version(caf::actor_system& sys,
                                               const std::string& host,
                                               uint16_t port, double limit) {
  int err = 0;
  int fd = connect_ipv4(host, port, limit, err);
  if (fd < 0)
    return std::nullopt;
  std::vector<char> buf(caf::io::basp::header_size);
  size_t have = 0;
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::duration<double>(std::min(limit, 10.0)));
  while (have < buf.size()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0)
      break;
    auto n = ::recv(fd, buf.data() + have, buf.size() - have, 0);
    if (n <= 0)
      break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  if (have < buf.size())
    return std::nullopt;
  caf::io::basp::header hdr;
  caf::binary_deserializer source{sys, buf};
  if (source(hdr)
      || hdr.operation != caf::io::basp::message_type::server_handshake)
    return std::nullopt;
  return hdr.operation_data;
}

/// Why a TCP connection to `host:port` fails, in plain words, found by
/// connecting once more: CAF says only "ip_connect failed", not why.
std::string why_connect_fails(const std::string& host, uint16_t port,
                              double limit) {
  int err = 0;
  int fd = connect_ipv4(host, port, limit, err);
  if (fd >= 0) {
    ::close(fd);
    err = 0;
  } else if (err == unresolved_err) {
    return unresolved_words;
  }
  switch (err) {
    case 0:
      return "the connection failed, but a new one succeeds (the node may "
             "have just started: try again)";
    case ECONNREFUSED:
      return "connection refused (nothing listens there)";
    case EHOSTUNREACH:
    case ENETUNREACH:
      return "the host is unreachable (no route to it)";
    case ETIMEDOUT:
      return "the host does not answer (the connection timed out)";
    default:
      return std::string{"the connection failed: "} + std::strerror(err);
  }
}

/// Plain words for an error CAF's middleman gave while connecting to a
/// node's status port.
std::string unreachable_words(const caf::error& err, const std::string& host,
                              uint16_t port, double limit) {
  constexpr const char* not_publish_port
    = "(the port is not a pgw node's --publish port)";
  if (err.category() != caf::atom("system"))
    return words_of(err);
  switch (static_cast<caf::sec>(err.code())) {
    case caf::sec::cannot_connect_to_node: {
      auto& ctx = err.context();
      if (ctx.size() > 0 && ctx.match_element<std::string>(0)
          && ctx.get_as<std::string>(0) == "no such host")
        return why_no_address(host, port);
      return why_connect_fails(host, port, limit);
    }
    case caf::sec::request_timeout:
      return fmt::format("timed out after {} s waiting for the node's "
                         "handshake (the port accepts connections but does "
                         "not answer as a pgw node's --publish port)",
                         limit);
    case caf::sec::disconnect_during_handshake:
      return fmt::format("the peer closed the connection during the "
                         "handshake {}",
                         not_publish_port);
    case caf::sec::malformed_basp_message:
      return fmt::format("the peer answered in another protocol {}",
                         not_publish_port);
    case caf::sec::no_actor_published_at_port:
      return "a CAF node listens there but publishes nothing on that port";
    case caf::sec::incompatible_versions:
      return "the node there speaks another version of CAF's protocol (a "
             "pgw built with another CAF version)";
    case caf::sec::incompatible_application_ids:
      return "the node there is another CAF application, not pgw";
    case caf::sec::unexpected_actor_messaging_interface:
      return "the actor published there is not a pgw node's status (another "
             "program, or a pgw of another version)";
    default:
      return "CAF error " + to_string(static_cast<caf::sec>(err.code()));
  }
}

/// The status actor published at `host:port`, or why not (`why`, in plain
/// words). As `middleman::remote_actor`, but waiting at most `limit` for
/// the connection and CAF's handshake: a peer that accepts the connection
/// and never answers would hold `remote_actor` forever.
std::optional<node_status_actor>
reach(caf::actor_system& sys, const std::string& host, uint16_t port,
      double limit, std::string& why) {
  std::optional<node_status_actor> out;
  auto fail = [&](caf::sec code) {
    why = unreachable_words(caf::make_error(code), host, port, limit);
  };
  // CAF read a handshake there (whatever it made of it): a node of another
  // CAF release may be behind it, which CAF 0.17 does not check.
  bool handshake_read = false;
  caf::scoped_actor self{sys};
  self
    ->request(sys.middleman().actor_handle(), as_timespan(limit),
              caf::connect_atom_v, host, port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
          const std::set<std::string>& ifs) {
        handshake_read = true;
        if (!ptr)
          fail(caf::sec::no_actor_published_at_port);
        else if (!sys.assignable<node_status_actor>(ifs))
          fail(caf::sec::unexpected_actor_messaging_interface);
        else
          out = caf::actor_cast<node_status_actor>(std::move(ptr));
      },
      [&](caf::error& err) {
        handshake_read = err == caf::sec::malformed_basp_message
                         || err == caf::sec::incompatible_application_ids
                         || err == caf::sec::incompatible_versions;
        why = unreachable_words(err, host, port, limit);
      });
  if (handshake_read) {
    auto theirs = announced_basp_version(sys, host, port, limit);
    if (theirs && *theirs != caf::io::basp::version) {
      out.reset();
      why = fmt::format("the node there speaks another version of CAF's "
                        "protocol (BASP {}, this pgw's is {}: a pgw built "
                        "with another CAF version)",
                        *theirs, caf::io::basp::version);
    }
  }
  return out;
}

/// Plain words for a failed status request to a reached node.
std::string status_failure_words(const caf::error& err, double limit) {
  if (err == caf::sec::request_timeout)
    return fmt::format("the node did not send its status within {} s",
                       limit);
  if (err == caf::sec::request_receiver_down)
    return "the node's status actor stopped before it answered (the node "
           "is shutting down)";
  return words_of(err);
}

} // namespace

int status_main(const std::vector<std::string>& args) {
  std::string target;
  bool json_out = wants_json(args);
  std::optional<double> timeout_s = 10;
  std::string bad_arg;
  for (size_t i = 0; i < args.size() && bad_arg.empty(); ++i) {
    if (args[i] == "--connect" && i + 1 < args.size())
      target = args[++i];
    else if (args[i] == "--timeout" && i + 1 < args.size())
      timeout_s = parse_number(args[++i]);
    else if (args[i] != "--json")
      bad_arg = args[i];
  }
  // Every error is the one chat prints: "pgw-actor: CODE: MESSAGE" on
  // stderr, or with --json the error object on stdout.
  auto usage_error = [&](const std::string& msg) {
    auto rc = usage_failure(msg, json_out);
    if (!json_out)
      std::fprintf(stderr, "%s\n", status_usage);
    return rc;
  };
  if (!bad_arg.empty())
    return usage_error(bad_arg == "--connect" || bad_arg == "--timeout"
                         ? bad_arg + " needs a value"
                         : "unknown option " + bad_arg);
  if (target.empty())
    return usage_error("--connect HOST:PORT is required");
  if (!timeout_s || !(*timeout_s > 0 && *timeout_s <= 3600))
    return usage_failure("--timeout takes a number of seconds above 0 and "
                         "at most 3600",
                         json_out);
  auto hp = parse_host_port(target);
  if (!hp)
    return report_call_error(hp.error(), json_out);
  if (hp->second == 0)
    return usage_failure("port 0 in '" + target
                           + "': a node's --publish port is 1 to 65535",
                         json_out);
  // "[::1]:7700": the address without the brackets.
  auto& host = hp->first;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  auto failed = [json_out](const std::string& msg) {
    return report_call_error(make_error(error_code::internal, msg), json_out);
  };
  system_config cfg{true};
  caf::actor_system sys{cfg};
  std::string why;
  auto node = reach(sys, host, hp->second, *timeout_s, why);
  if (!node)
    return failed("cannot reach " + target + ": " + why);
  caf::scoped_actor self{sys};
  int rc = exit_ok;
  self->request(*node, as_timespan(*timeout_s), atom::status_v)
    .receive(
      [&](gateway_status& st) {
        auto text = json_out ? render_status_json(st) + "\n"
                             : render_status(st);
        std::fputs(text.c_str(), stdout);
      },
      [&](caf::error& err) {
        rc = failed("no status from " + target + ": "
                    + status_failure_words(err, *timeout_s));
      });
  return rc;
}

} // namespace pgw::cli
