#pragma once

/// The stream of one keep-alive HTTP connection of `pgw-actor serve`,
/// handed to cpp-httplib's request processing in place of its per-request
/// `SocketStream`. cpp-httplib 0.11.4 polls before every read and twice
/// before every write, reads the peer's and its own address with two
/// system calls per request, and sends a response's head and body in two
/// sends (two wake-ups of the client, which waits for both). This stream
/// lives as long as the connection and:
/// - holds back the first write after a read (the response's head) and
///   sends it together with the next write (the body, or the first chunk)
///   in one `sendmsg`, or at the request's end (`end_request`) when no body
///   follows; anything held is also sent before the next read, so a
///   `100 Continue` reaches the client before its body is awaited;
/// - reads through its own buffer, bounded by the read timeout set once on
///   the socket (`SO_RCVTIMEO`) instead of a poll per read; bytes of a
///   pipelined next request stay buffered for it (`buffered`);
/// - writes everything or fails, bounded by the write timeout
///   (`SO_SNDTIMEO`);
/// - reads both addresses once, when first asked.

#include <httplib.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace pgw::cli {

class http_connection final : public httplib::Stream {
public:
  http_connection(int sock, time_t read_timeout_sec, time_t read_timeout_usec,
                  time_t write_timeout_sec, time_t write_timeout_usec);

  http_connection(const http_connection&) = delete;
  http_connection& operator=(const http_connection&) = delete;

  /// Readable within the read timeout (buffered bytes count).
  bool is_readable() const override;
  /// Writable within the write timeout and the peer has not closed.
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }

  /// One request is answered: sends what is held back; false when that
  /// fails (the connection is then unusable).
  bool end_request();

  /// Bytes of the next request already read.
  bool buffered() const { return off_ < len_; }

  /// Bytes read from the socket by someone else before the connection was
  /// handed over (serve's front): read before anything from the socket.
  void prefill(std::string_view bytes);

  /// Send calls made so far (for tests: one per response).
  size_t sends() const { return sends_; }

private:
  bool send_all(const char* a, size_t na, const char* b, size_t nb);
  bool flush();
  void addresses() const;

  int sock_;
  time_t read_timeout_sec_;
  time_t read_timeout_usec_;
  time_t write_timeout_sec_;
  time_t write_timeout_usec_;
  std::vector<char> buf_;
  size_t off_ = 0;
  size_t len_ = 0;
  std::string held_;
  bool hold_next_ = true; ///< the next write is a response's head
  bool failed_ = false;
  size_t sends_ = 0;
  mutable bool have_addresses_ = false;
  mutable std::string remote_ip_, local_ip_;
  mutable int remote_port_ = 0, local_port_ = 0;
};

} // namespace pgw::cli
