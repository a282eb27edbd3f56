#include "transport/httplib_errors.hpp"

#include "transport/classify.hpp"

namespace pgw {

bool httplib_connected(httplib::Error err) {
  return err != httplib::Error::Connection
         && err != httplib::Error::ConnectionTimeout
         && err != httplib::Error::SSLConnection;
}

void classify_httplib_error(httplib::Error err, httplib::ClientImpl& cli,
                            const std::string& host, transport_warnings& warn,
                            attempt_result& res) {
  switch (err) {
    case httplib::Error::Connection:
      res.upstream_reached = false;
      if (local_resources_exhausted()) {
        fail_local_exhaustion(res, warn);
        break;
      }
      res.reason = "connect_error";
      break;
    case httplib::Error::ConnectionTimeout:
      res.reason = "connect_timeout";
      res.upstream_reached = false;
      break;
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification:
      // Which failure it was: handshake, unknown CA, host name, expiry.
      if (auto* tls = dynamic_cast<httplib::SSLClient*>(&cli))
        classify_tls_failure(err == httplib::Error::SSLServerVerification,
                             tls->get_openssl_verify_result(), res, host);
      else
        classify_tls_failure(false, 0, res);
      break;
    default:
      fail_before_status(res, err == httplib::Error::Write);
      break;
  }
}

} // namespace pgw
