// TLS failures say which kind they are (issue 12, item 7).

#include "transport/classify.hpp"

#include <doctest/doctest.h>
#include <openssl/x509_vfy.h>

using namespace pgw;

namespace {

attempt_result tls(bool rejected, long verify_result) {
  attempt_result r;
  r.upstream_reached = true;
  classify_tls_failure(rejected, verify_result, r);
  CHECK_FALSE(r.upstream_reached);
  return r;
}

} // namespace

TEST_CASE("a refused certificate names why and is source_dead") {
  struct row {
    long verify;
    const char* reason;
  };
  for (auto [verify, reason] : {
         row{X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, "tls_unknown_ca"},
         row{X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, "tls_unknown_ca"},
         row{X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, "tls_unknown_ca"},
         row{X509_V_ERR_CERT_HAS_EXPIRED, "tls_expired"},
         row{X509_V_ERR_CERT_NOT_YET_VALID, "tls_expired"},
         row{X509_V_ERR_HOSTNAME_MISMATCH, "tls_hostname_mismatch"},
         row{X509_V_OK, "tls_hostname_mismatch"},
       }) {
    CAPTURE(verify);
    auto r = tls(true, verify);
    CHECK(r.kind == outcome::source_dead);
    CHECK(r.reason == reason);
    CHECK_FALSE(r.error_message.empty());
  }
}

TEST_CASE("a host name mismatch names the host, never OpenSSL's \"ok\"") {
  // cpp-httplib checks the name itself: the chain verified (X509_V_OK).
  for (long verify : {long{X509_V_OK}, long{X509_V_ERR_HOSTNAME_MISMATCH}}) {
    CAPTURE(verify);
    attempt_result r;
    classify_tls_failure(true, verify, r, "api.example");
    CHECK(r.reason == "tls_hostname_mismatch");
    CHECK(r.error_message == "certificate does not match host api.example");
  }
  CHECK(tls(true, X509_V_OK).error_message
        == "certificate does not match the host name");
}

TEST_CASE("a failed handshake is a transient tls_handshake") {
  auto r = tls(false, X509_V_OK);
  CHECK(r.kind == outcome::transient);
  CHECK(r.reason == "tls_handshake");
}
