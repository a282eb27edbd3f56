#pragma once

#include <cstddef>
#include <cstdint>

namespace pgw {

/// Counters of one transport instance (httplib_transport, beast_transport).
struct transport_stats {
  uint64_t started = 0;
  uint64_t finished = 0;
  uint64_t cancelled = 0;
  uint64_t connections_opened = 0; ///< new TCP connections
  uint64_t connections_reused = 0; ///< requests on a pooled connection
  size_t io_threads = 0;
  size_t watched = 0; ///< calls whose timeouts are armed (those running)
  /// httplib: times a new deadline woke the watchdog (one earlier than its
  /// wait). Beast has no watchdog (an Asio timer per call).
  uint64_t watchdog_wakes = 0;
};

} // namespace pgw
