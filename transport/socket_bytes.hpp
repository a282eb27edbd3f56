#pragma once

#include <chrono>
#include <cstdint>

namespace pgw {

/// Bytes received on TCP socket `fd` so far (the kernel's TCP_INFO
/// `tcpi_bytes_received`), or 0 when unknown. Its own file: glibc's
/// <netinet/tcp.h> (which cpp-httplib includes) lacks the field.
uint64_t tcp_bytes_received(int fd);

/// Bytes of socket `fd` the program has read so far: those received less
/// those still queued unread in the kernel (SIOCINQ); 0 when unknown. Read
/// in that order, a byte arriving in between only lowers the figure.
uint64_t tcp_bytes_consumed(int fd);

/// True when idle keep-alive socket `fd` may carry a request: nothing is
/// pending on it (a peek that does not wait finds no EOF, no reset and no
/// byte: an idle connection has nothing to say, a stray byte would be read
/// as the next answer).
bool idle_socket_usable(int fd);

/// How long after a request went out on `fd` a failure with no response
/// byte still shows a connection the upstream had closed before it could
/// take the request (a stale keep-alive connection): its FIN or RST was on
/// its way, or answers our bytes, within a round trip. Twice the kernel's
/// smoothed round trip (TCP_INFO), at least 50 ms for scheduling on a busy
/// host; later, the upstream may have taken the request.
std::chrono::milliseconds stale_failure_window(int fd);

} // namespace pgw
