// The simulator's server loop: binding, accepting, one thread per
// connection, request framing and routing, stopping. What a request's model
// makes the answer do is in sim_behaviours.cpp, the request log in
// sim_log.cpp.

#include "apps/pgw-upstream-sim/sim_internal.hpp"

namespace pgw::sim {

bool send_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    auto n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool send_all(int fd, const std::string& s) {
  return send_all(fd, s.data(), s.size());
}

void server::impl::start() {
  models = detail::load_scenario(opts.scenario_json);
  if (!(opts.time_scale >= 0) || !std::isfinite(opts.time_scale))
    throw std::invalid_argument("time_scale: must be a finite number >= 0");
  std::string list = R"({"object":"list","data":[)";
  for (auto& kv : models) {
    model_index.emplace(kv.first, model_names.size());
    model_names.push_back(&kv.first);
    model_specs.push_back(&kv.second);
    if (model_names.size() > 1)
      list += ',';
    list += R"({"id":)";
    append_json_string(list, kv.first);
    list += R"(,"object":"model","created":0,"owned_by":"pgw-upstream-sim"})";
  }
  list += "]}";
  models_json = std::move(list);
  counters.assign(model_names.size(), 0);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto service = std::to_string(opts.port);
  if (int rc = ::getaddrinfo(opts.host.empty() ? nullptr : opts.host.c_str(),
                             service.c_str(), &hints, &res);
      rc != 0)
    throw std::runtime_error(fmt::format("cannot resolve {}: {}", opts.host,
                                         ::gai_strerror(rc)));
  std::string last_error = "no address";
  for (auto* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                      ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0
        || ::listen(fd, 4096) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd < 0)
    throw std::runtime_error(fmt::format("cannot listen on {}:{}: {}",
                                         opts.host, opts.port, last_error));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  bound_port = ntohs(ss.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    ::close(listen_fd);
    throw std::runtime_error("eventfd failed");
  }
  epoch = clock_type::now();
  acceptor = std::thread([this] { accept_loop(); });
}

namespace {

struct conn_start {
  server::impl* self;
  int fd;
};

void* conn_main(void* arg) {
  auto* start = static_cast<conn_start*>(arg);
  auto* self = start->self;
  int fd = start->fd;
  delete start;
  self->serve(fd);
  return nullptr;
}

} // namespace

void server::impl::accept_loop() {
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, thread_stack_bytes);
  ::pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
  while (!stopping.load()) {
    fds[0].revents = fds[1].revents = 0;
    if (::poll(fds, 2, -1) < 0)
      continue;
    if (fds[1].revents != 0 || stopping.load())
      break;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM
          || errno == ENOBUFS)
        ::poll(&fds[1], 1, 10); // out of resources: do not spin
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    {
      std::lock_guard<std::mutex> guard(conn_mu);
      conns.insert(fd);
      ++threads;
    }
    pthread_t tid;
    auto* arg = new conn_start{this, fd};
    if (::pthread_create(&tid, &attr, conn_main, arg) != 0) {
      delete arg;
      close_conn(fd, false);
      std::lock_guard<std::mutex> guard(conn_mu);
      --threads;
      conn_cv.notify_all();
    }
  }
  ::pthread_attr_destroy(&attr);
}

void server::impl::close_conn(int fd, bool reset) {
  {
    std::lock_guard<std::mutex> guard(conn_mu);
    conns.erase(fd);
  }
  if (reset) {
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  ::close(fd);
}

waited server::impl::wait_until(int fd, clock_type::time_point deadline) {
  pollfd fds[2] = {{fd, POLLRDHUP, 0}, {stop_fd, POLLIN, 0}};
  for (;;) {
    if (stopping.load())
      return waited::stopping;
    auto now = clock_type::now();
    if (now >= deadline)
      return waited::elapsed;
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
      deadline - now);
    // Cap a single poll so very long waits stay well within timespec.
    if (left > std::chrono::hours(1))
      left = std::chrono::hours(1);
    timespec ts{static_cast<time_t>(left.count() / 1000000000),
                static_cast<long>(left.count() % 1000000000)};
    fds[0].revents = fds[1].revents = 0;
    int rc = ::ppoll(fds, 2, &ts, nullptr);
    if (rc < 0) {
      if (errno == EINTR)
        continue;
      return waited::client_left;
    }
    if (rc == 0)
      continue;
    if (fds[1].revents != 0 || stopping.load())
      return waited::stopping;
    if (fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
      return waited::client_left;
  }
}

void server::impl::serve(int fd) {
  std::string buf;
  size_t scan_from = 0;
  bool closed = false;
  auto read_more = [&]() -> bool {
    if (stopping.load())
      return false;
    auto old = buf.size();
    buf.resize(old + 16384);
    ssize_t n;
    do {
      n = ::recv(fd, &buf[old], 16384, 0);
    } while (n < 0 && errno == EINTR);
    buf.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    return n > 0;
  };
  auto reject = [&](int status, const std::string& message) {
    auto body = error_body(status, message, std::nullopt);
    auto out = response_head(status, "application/json", body.size(), true);
    out += body;
    send_all(fd, out);
  };
  for (;;) {
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n", scan_from)) == std::string::npos) {
      if (buf.size() > max_head_bytes) {
        reject(431, "request head too large");
        goto done;
      }
      scan_from = buf.size() >= 3 ? buf.size() - 3 : 0;
      if (!read_more())
        goto done;
    }
    {
      detail::request_head head;
      auto problem = detail::parse_request_head(
        std::string_view(buf.data(), head_end), head);
      if (!problem.empty()) {
        reject(400, problem);
        goto done;
      }
      if (head.has_transfer_encoding) {
        reject(411, "request bodies must be sent with Content-Length");
        goto done;
      }
      // Neither Content-Length nor Transfer-Encoding: no body (RFC 9112
      // §6.3), as serve reads it — `curl -X POST …/_sim/reset` works.
      size_t length = head.content_length.value_or(0);
      if (length > max_body_bytes) {
        reject(413, "request body too large");
        goto done;
      }
      size_t total = head_end + 4 + length;
      if (head.expect_continue && buf.size() < total
          && !send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n"))
        goto done;
      while (buf.size() < total)
        if (!read_more())
          goto done;
      std::string body = buf.substr(head_end + 4, length);
      buf.erase(0, total);
      scan_from = 0;
      if (!handle(fd, head, body, closed) || closed)
        goto done;
    }
  }
done:
  if (!closed)
    close_conn(fd, false);
  std::lock_guard<std::mutex> guard(conn_mu);
  if (--threads == 0)
    conn_cv.notify_all();
}

bool server::impl::handle(int fd, const detail::request_head& head,
                          std::string& body, bool& closed) {
  auto& path = head.path;
  auto reply = [&](int status, const std::string& content) {
    auto out = response_head(status, "application/json", content.size(),
                             !head.keep_alive);
    out += content;
    return send_all(fd, out) && head.keep_alive;
  };
  static const std::string suffix = "/chat/completions";
  if (path.size() >= suffix.size()
      && path.compare(path.size() - suffix.size(), suffix.size(), suffix)
           == 0) {
    if (head.method != "POST")
      return reply(405, error_body(405, "use POST", std::nullopt));
    return handle_chat(fd, head, body, closed);
  }
  if (path == "/v1/embeddings" || path == "/embeddings") {
    if (head.method != "POST")
      return reply(405, error_body(405, "use POST", std::nullopt));
    return handle_chat(fd, head, body, closed, request_kind::embeddings);
  }
  // MonkeyOCR-style: {BASE_URL}/ocr/text and {BASE_URL}/parse, where the
  // last segment of BASE_URL's path names the model ("ok" when none).
  for (auto [suffix, kind] : {std::pair{"/ocr/text", request_kind::ocr_text},
                              std::pair{"/parse", request_kind::ocr_parse}}) {
    std::string s = suffix;
    if (path.size() < s.size()
        || path.compare(path.size() - s.size(), s.size(), s) != 0)
      continue;
    if (head.method != "POST")
      return reply(405, error_body(405, "use POST", std::nullopt));
    auto base = path.substr(0, path.size() - s.size());
    auto model = base.substr(base.rfind('/') + 1);
    return handle_chat(fd, head, body, closed, kind,
                       model.empty() ? "ok" : model);
  }
  if (path == "/v1/models" || path == "/models") {
    if (head.method != "GET")
      return reply(405, error_body(405, "use GET", std::nullopt));
    return reply(200, models_json);
  }
  if (path == "/_sim/log") {
    if (head.method != "GET")
      return reply(405, error_body(405, "use GET", std::nullopt));
    return reply(200, log_json());
  }
  if (path == "/_sim/reset") {
    if (head.method != "POST")
      return reply(405, error_body(405, "use POST", std::nullopt));
    reset();
    return reply(200, R"({"ok":true})");
  }
  return reply(404, error_body(404, "no such endpoint: " + path,
                               std::nullopt));
}

void server::impl::do_stop() {
  std::lock_guard<std::mutex> stop_guard(stop_mu);
  if (stopped)
    return;
  stopped = true;
  stopping.store(true);
  uint64_t one = 1;
  auto rc = ::write(stop_fd, &one, sizeof(one));
  (void) rc;
  if (acceptor.joinable())
    acceptor.join();
  std::unique_lock<std::mutex> guard(conn_mu);
  for (int fd : conns)
    ::shutdown(fd, SHUT_RDWR);
  conn_cv.wait(guard, [this] { return threads == 0; });
  guard.unlock();
  ::close(listen_fd);
  listen_fd = -1;
}

// -- the public face ---------------------------------------------------------------

server::server(options opts) : impl_(std::make_unique<impl>(std::move(opts))) {
  impl_->start();
}

server::~server() {
  stop();
  if (impl_->stop_fd >= 0)
    ::close(impl_->stop_fd);
}

uint16_t server::port() const {
  return impl_->bound_port;
}

void server::stop() {
  impl_->do_stop();
}

std::string server::log_json() const {
  return impl_->log_json();
}

void server::reset() {
  impl_->reset();
}

} // namespace pgw::sim
