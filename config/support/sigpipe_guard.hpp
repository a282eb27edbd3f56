#pragma once

/// Per-thread SIGPIPE protection for writes that cannot pass MSG_NOSIGNAL:
/// hiredis writes with write(2), and OpenSSL's socket BIO writes TLS records
/// (SSL_write, the close_notify of SSL_shutdown) with write(2) too. Writing
/// to a connection the peer has reset raises SIGPIPE, whose default action
/// ends the process; pgw is a library embedded in other processes, so it
/// never changes the process' disposition.

#include <csignal>

namespace pgw {

/// Blocks SIGPIPE in the calling thread for its lifetime and discards a
/// SIGPIPE raised meanwhile; restores the thread's mask (and errno) when it
/// ends. Nests: a guard inside another (or in a thread that blocks SIGPIPE
/// already) leaves the mask as it found it.
class sigpipe_guard {
public:
  sigpipe_guard();

  ~sigpipe_guard();

  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

private:
  sigset_t pipe_;
  bool was_pending_ = false;
  bool was_blocked_ = false;
};

} // namespace pgw
