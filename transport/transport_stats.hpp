#pragma once

#include <atomic>
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
  /// Pooled connections closed while idle: idle too long, or the upstream
  /// closed (or wrote to) them.
  uint64_t connections_closed_idle = 0;
  size_t io_threads = 0;
  size_t watched = 0; ///< calls whose timeouts are armed (those running)
  /// httplib: times a new deadline woke the watchdog (one earlier than its
  /// wait). Beast has no watchdog (an Asio timer per call).
  uint64_t watchdog_wakes = 0;
};

/// The counters both transports bump from their threads (their `impl`
/// derives from it); `snapshot` fills the fields of a transport_stats they
/// share, each transport adds its own.
struct transport_counters {
  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<uint64_t> cancelled{0};
  std::atomic<uint64_t> opened{0};
  std::atomic<uint64_t> reused{0};
  std::atomic<uint64_t> closed_idle{0};

  transport_stats snapshot() const {
    transport_stats out;
    out.started = started.load();
    out.finished = finished.load();
    out.cancelled = cancelled.load();
    out.connections_opened = opened.load();
    out.connections_reused = reused.load();
    out.connections_closed_idle = closed_idle.load();
    return out;
  }
};

} // namespace pgw
