// TLS as a user meets it (issue 12, item 7): the simulator behind stunnel4
// with a throwaway CA made by the test. Verification stays on; a refused
// certificate names its kind and is not retried on that source. Each case
// runs once per transport (PGW_TRANSPORT=beast|httplib).

#include "fixtures/process.hpp"
#include "fixtures/sim_process.hpp"
#include "fixtures/tls_proxy.hpp"
#include "fixtures/transport_kinds.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <httplib.h>

using namespace pgw::test;
namespace json = boost::json;

namespace {

struct tls_fixture {
  sim_process sim{{"--seed", "7"}};
  std::string transport;

  explicit tls_fixture(std::string kind) : transport(std::move(kind)) {
    // nop
  }

  run_result chat(const std::string& base_url, std::vector<std::string> env) {
    env.push_back("PGW_TRANSPORT=" + transport);
    env.push_back("LLM__GENERIC__A__BASE_URL=" + base_url);
    env.push_back("LLM__GENERIC__A__MODEL=ok");
    return run_program({PGW_ACTOR_BIN, "chat", "--json", "hi"}, env);
  }

  size_t requests() {
    httplib::Client cli{"127.0.0.1", sim.port()};
    auto res = cli.Get("/_sim/log");
    REQUIRE(res);
    return json::parse(res->body).at("requests").as_array().size();
  }
};

json::object error_of(const run_result& r) {
  return json::parse(r.out).at("error").as_object();
}

} // namespace

PGW_TRANSPORT_CASE(tls_fixture, "TLS: a source's CA_FILE or SSL_CERT_FILE trusts the test CA") {
  tls_proxy tls{sim.port()};
  auto with_ca = chat(tls.base_url(), {"LLM__GENERIC__A__CA_FILE=" + tls.ca_file()});
  INFO(with_ca.err);
  CHECK(with_ca.exit_code == 0);
  auto with_env = chat(tls.base_url(), {"SSL_CERT_FILE=" + tls.ca_file()});
  INFO(with_env.err);
  CHECK(with_env.exit_code == 0);
  CHECK(requests() == 2);
}

PGW_TRANSPORT_CASE(tls_fixture, "TLS: an unknown CA is tls_unknown_ca, asked once, never reached") {
  tls_proxy tls{sim.port()};
  auto r = chat(tls.base_url(), {"LLM__MAX_ATTEMPTS=3"});
  CHECK(r.exit_code == 4);
  auto err = error_of(r);
  CHECK(err.at("per_source").at("a").at("reason").as_string()
        == "tls_unknown_ca");
  CHECK(std::string(err.at("message").as_string()).find(
          "every source is unusable: a: tls_unknown_ca")
        != std::string::npos);
  CHECK(requests() == 0);
}

PGW_TRANSPORT_CASE(tls_fixture, "TLS: a certificate for another name is tls_hostname_mismatch") {
  tls_proxy tls{sim.port(), "DNS:wrong.example"};
  auto r = chat(tls.base_url(), {"LLM__GENERIC__A__CA_FILE=" + tls.ca_file()});
  CHECK(r.exit_code == 4);
  auto a = error_of(r).at("per_source").at("a");
  CHECK(a.at("reason").as_string() == "tls_hostname_mismatch");
  CHECK(a.at("message").as_string()
        == "certificate does not match host 127.0.0.1");
  CHECK(requests() == 0);
}
