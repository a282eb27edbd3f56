#pragma once

/// The event-driven upstream transport (issue 17, SPEC §10): Boost.Asio +
/// Boost.Beast with OpenSSL. A few `io_context` threads (one per core by
/// default) carry every call: connect, TLS handshake (SNI, host-name
/// verification, CA_FILE or the system store / SSL_CERT_FILE), request,
/// the bounded header phase and the body or SSE stream are asynchronous
/// operations on the call's loop, its timeouts (connect, TIMEOUT_S, TTFT,
/// STREAM_IDLE) one Asio timer, a cancel a close posted to that loop. A
/// keep-alive pool per source keeps idle connections. The attempt hears
/// from a call as from the cpp-httplib transport: `first_token`, then one
/// `done`.

#include "transport/transport.hpp"
#include "transport/transport_stats.hpp"

#include <memory>

namespace boost::asio {
class io_context;
} // namespace boost::asio

namespace pgw {

class beast_transport : public transport {
public:
  struct options {
    /// Event-loop threads; 0 = one per core.
    size_t threads = 0;
    /// Idle keep-alive connections kept per source.
    size_t max_idle_per_source = 256;
    /// How long a pooled connection may stay idle before it is closed (one
    /// the upstream closes, or writes to, is closed at once).
    std::chrono::milliseconds idle_timeout = default_idle_timeout;
    /// A loop run by someone else (serve's CAF worker) to carry every call
    /// instead of threads of the transport's own; `threads` is then unused.
    /// It must outlive the transport's calls: a call still running when the
    /// transport goes keeps the transport's state until it ends.
    boost::asio::io_context* loop = nullptr;
  };

  beast_transport();

  explicit beast_transport(options opts);

  /// Stops every running call (the sinks hear nothing more) and joins the
  /// loop threads; with an outside loop, the calls run on to their end.
  ~beast_transport() override;

  std::shared_ptr<call_handle>
  start(upstream_call call, caf::actor sink, uint64_t tag) override;

  transport_stats stats() const;

  struct impl;

private:
  std::shared_ptr<call_handle>
  start_call(upstream_call call, caf::actor sink, uint64_t tag);

  std::shared_ptr<impl> impl_;
};

/// A transport with `threads` loop threads (0 = one per core).
transport_ptr make_beast_transport(size_t threads = 0);

} // namespace pgw
