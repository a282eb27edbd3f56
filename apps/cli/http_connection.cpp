#include "apps/cli/http_connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace pgw::cli {

namespace {

constexpr size_t read_buffer_size = 4096;

timeval as_timeval(time_t sec, time_t usec) {
  timeval tv{};
  tv.tv_sec = sec;
  tv.tv_usec = static_cast<suseconds_t>(usec);
  return tv;
}

int as_ms(time_t sec, time_t usec) {
  return static_cast<int>(sec * 1000 + usec / 1000);
}

/// Numeric address and port of a socket address.
void describe(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    port = ntohs(in.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    port = ntohs(in6.sin6_port);
  } else {
    port = 0;
  }
  ip = text;
}

} // namespace

http_connection::http_connection(int sock, time_t read_timeout_sec,
                                 time_t read_timeout_usec,
                                 time_t write_timeout_sec,
                                 time_t write_timeout_usec)
  : sock_(sock),
    read_timeout_sec_(read_timeout_sec),
    read_timeout_usec_(read_timeout_usec),
    write_timeout_sec_(write_timeout_sec),
    write_timeout_usec_(write_timeout_usec),
    buf_(read_buffer_size) {
  auto rcv = as_timeval(read_timeout_sec, read_timeout_usec);
  auto snd = as_timeval(write_timeout_sec, write_timeout_usec);
  ::setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
  ::setsockopt(sock_, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
}

void http_connection::prefill(std::string_view bytes) {
  if (bytes.empty())
    return;
  buf_.assign(bytes.begin(), bytes.end());
  if (buf_.size() < read_buffer_size)
    buf_.resize(read_buffer_size);
  off_ = 0;
  len_ = bytes.size();
}

bool http_connection::is_readable() const {
  if (off_ < len_)
    return true;
  // Reads themselves wait on SO_RCVTIMEO; this is for those who ask.
  pollfd p{sock_, POLLIN, 0};
  int n;
  do
    n = ::poll(&p, 1, as_ms(read_timeout_sec_, read_timeout_usec_));
  while (n < 0 && errno == EINTR);
  return n > 0;
}

bool http_connection::is_writable() const {
  pollfd p{sock_, POLLOUT, 0};
  int n;
  do
    n = ::poll(&p, 1, as_ms(write_timeout_sec_, write_timeout_usec_));
  while (n < 0 && errno == EINTR);
  if (n <= 0 || (p.revents & (POLLERR | POLLHUP)) != 0)
    return false;
  // The peer still there: a readable socket with nothing to read has ended.
  pollfd r{sock_, POLLIN, 0};
  if (::poll(&r, 1, 0) <= 0)
    return true;
  char byte;
  return ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

ssize_t http_connection::read(char* ptr, size_t size) {
  if (!flush())
    return -1;
  hold_next_ = true;
  if (off_ == len_) {
    // Large reads go straight to the caller; small ones fill the buffer.
    if (size >= buf_.size()) {
      ssize_t n;
      do
        n = ::recv(sock_, ptr, size, 0);
      while (n < 0 && errno == EINTR);
      return n;
    }
    if (buf_.size() != read_buffer_size) // a large prefill was read
      buf_ = std::vector<char>(read_buffer_size);
    ssize_t n;
    do
      n = ::recv(sock_, buf_.data(), buf_.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
      return n; // 0: the peer closed; -1: an error or the read timeout
    off_ = 0;
    len_ = static_cast<size_t>(n);
  }
  auto n = std::min(size, len_ - off_);
  std::memcpy(ptr, buf_.data() + off_, n);
  off_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t http_connection::write(const char* ptr, size_t size) {
  if (failed_)
    return -1;
  if (hold_next_ && held_.empty()) {
    held_.assign(ptr, size);
    hold_next_ = false;
    return static_cast<ssize_t>(size);
  }
  hold_next_ = false;
  bool ok = send_all(held_.data(), held_.size(), ptr, size);
  held_.clear();
  return ok ? static_cast<ssize_t>(size) : -1;
}

bool http_connection::send_all(const char* a, size_t na, const char* b,
                               size_t nb) {
  iovec iov[2] = {{const_cast<char*>(a), na}, {const_cast<char*>(b), nb}};
  int first = na == 0 ? 1 : 0;
  while (first < 2) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = static_cast<size_t>(2 - first);
    ssize_t n = ::sendmsg(sock_, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    ++sends_;
    if (n < 0) {
      failed_ = true; // an error, or the write timeout (EAGAIN)
      return false;
    }
    auto left = static_cast<size_t>(n);
    while (first < 2 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (first < 2) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}

bool http_connection::flush() {
  if (held_.empty())
    return !failed_;
  bool ok = send_all(held_.data(), held_.size(), nullptr, 0);
  held_.clear();
  return ok;
}

bool http_connection::end_request() {
  bool ok = flush();
  hold_next_ = true;
  return ok;
}

void http_connection::addresses() const {
  if (have_addresses_)
    return;
  have_addresses_ = true;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    describe(addr, remote_ip_, remote_port_);
  len = sizeof addr;
  addr = {};
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    describe(addr, local_ip_, local_port_);
}

void http_connection::get_remote_ip_and_port(std::string& ip, int& port) const {
  addresses();
  ip = remote_ip_;
  port = remote_port_;
}

void http_connection::get_local_ip_and_port(std::string& ip, int& port) const {
  addresses();
  ip = local_ip_;
  port = local_port_;
}

} // namespace pgw::cli
