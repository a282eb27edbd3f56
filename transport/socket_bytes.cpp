#include "transport/socket_bytes.hpp"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace pgw {

uint64_t tcp_bytes_received(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
    return 0;
  return info.tcpi_bytes_received;
}

uint64_t tcp_bytes_consumed(int fd) {
  auto received = tcp_bytes_received(fd);
  int unread = 0;
  if (received == 0 || ::ioctl(fd, SIOCINQ, &unread) != 0 || unread < 0)
    return 0;
  auto queued = static_cast<uint64_t>(unread);
  return received > queued ? received - queued : 0;
}

bool idle_socket_usable(int fd) {
  if (fd < 0)
    return false;
  char byte = 0;
  auto n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::chrono::milliseconds stale_failure_window(int fd) {
  constexpr std::chrono::milliseconds floor{50};
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
    return floor;
  auto rtt = std::chrono::microseconds{info.tcpi_rtt}; // smoothed
  using std::chrono::milliseconds;
  return std::max(floor, std::chrono::ceil<milliseconds>(2 * rtt));
}

} // namespace pgw
