#pragma once

/// The cpp-httplib implementation of the OpenAI-compatible chat transport
/// (SPEC §10): status checked before the body, SSE parsed incrementally,
/// connect / total / time-to-first-token / idle timeouts, a keep-alive
/// connection pool per source with TCP_NODELAY, and cancellation that closes
/// the connection within milliseconds.

#include "transport/transport.hpp"
#include "transport/transport_stats.hpp"

#include <memory>

namespace pgw {

class httplib_transport : public transport {
public:
  struct options {
    /// Idle keep-alive connections kept per source.
    size_t max_idle_per_source = 256;
    /// How long a pooled connection may stay idle before it is closed; one
    /// the upstream closes, or writes to, is closed within a second (the
    /// pool is checked every second, or every half idle_timeout if
    /// shorter).
    std::chrono::milliseconds idle_timeout = default_idle_timeout;
  };

  httplib_transport();

  explicit httplib_transport(options opts);

  /// Cancels every running call and joins the I/O threads.
  ~httplib_transport() override;

  std::shared_ptr<call_handle>
  start(upstream_call call, caf::actor sink, uint64_t tag) override;

  transport_stats stats() const;

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

/// A transport with default options, ready to share.
transport_ptr make_httplib_transport();

} // namespace pgw
