#include "config/support/sigpipe_guard.hpp"

#include <cerrno>
#include <ctime>
#include <pthread.h>

namespace pgw {

sigpipe_guard::sigpipe_guard() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  if (was_pending_)
    return; // already blocked: ours would merge into it
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old);
  was_blocked_ = sigismember(&old, SIGPIPE) == 1;
}

sigpipe_guard::~sigpipe_guard() {
  if (was_pending_)
    return;
  auto saved_errno = errno;
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  if (sigismember(&pending, SIGPIPE) == 1) {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      // retry
    }
  }
  if (!was_blocked_)
    pthread_sigmask(SIG_UNBLOCK, &pipe_, nullptr);
  errno = saved_errno;
}

} // namespace pgw
