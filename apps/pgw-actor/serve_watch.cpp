// `pgw-actor serve`: the watch on the clients' sockets (disconnects cancel
// their calls).

#include "serve_app.hpp"

#include "config/support/log.hpp"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

namespace pgw::serve {

thread_local int client_socket = -1;
thread_local std::string stream_outcome;

disconnect_watch::registration&
disconnect_watch::registration::operator=(registration&& other) noexcept {
  if (this != &other) {
    reset();
    watch_ = std::exchange(other.watch_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

void disconnect_watch::registration::reset() {
  if (auto w = std::exchange(watch_, nullptr))
    w->forget(id_);
}

disconnect_watch::disconnect_watch()
  : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
    wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    log::write(log::level::warn, "serve",
               std::string{"no disconnect watch (epoll/eventfd: "}
                 + std::strerror(errno)
                 + "): a client that leaves does not cancel its call");
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0; // id 0 = the wake-up
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  // The thread takes no signal (serve's signal watch takes SIGTERM/SIGINT).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

disconnect_watch::~disconnect_watch() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (epoll_fd_ >= 0)
    ::close(epoll_fd_);
  if (wake_fd_ >= 0)
    ::close(wake_fd_);
}

disconnect_watch::registration disconnect_watch::watch(int fd, cancel_fn cancel) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (all_cancelled_) {
    cancel(false);
    return {};
  }
  if (fd < 0 || !thread_.joinable())
    return {};
  auto id = next_id_++;
  // One-shot: a hung-up socket stays ready, it is reported once.
  epoll_event ev{};
  ev.events = EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    return {};
  calls_.emplace(id, std::make_pair(fd, std::move(cancel)));
  return registration{this, id};
}

void disconnect_watch::forget(uint64_t id) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = calls_.find(id);
  if (i == calls_.end())
    return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, i->second.first, nullptr);
  calls_.erase(i);
}

void disconnect_watch::cancel_all() {
  std::lock_guard<std::mutex> guard{mtx_};
  all_cancelled_ = true;
  for (auto& [id, call] : calls_)
    call.second(false);
}

void disconnect_watch::run() {
  std::vector<epoll_event> events(64);
  for (;;) {
    int n = ::epoll_wait(epoll_fd_, events.data(),
                         static_cast<int>(events.size()), -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return;
    std::lock_guard<std::mutex> guard{mtx_};
    for (int k = 0; k < n; ++k) {
      auto id = events[k].data.u64;
      if (id == 0)
        return; // the destructor's wake-up
      // A registration forgotten since the event was taken is gone from
      // `calls_`: ids are never reused, so a reused fd is never mistaken.
      auto i = calls_.find(id);
      if (i != calls_.end())
        i->second.second(true);
    }
  }
}

} // namespace pgw::serve
