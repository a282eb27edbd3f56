#pragma once

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

} // namespace pgw
