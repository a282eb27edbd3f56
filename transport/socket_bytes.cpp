#include "transport/socket_bytes.hpp"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace pgw {

uint64_t tcp_bytes_received(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
    return 0;
  return info.tcpi_bytes_received;
}

} // namespace pgw
