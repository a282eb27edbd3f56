#include "apps/pgw-upstream-sim/sim.hpp"

#include "apps/pgw-upstream-sim/embeddings.hpp"
#include "apps/pgw-upstream-sim/http.hpp"
#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/tool_calls.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace pgw::sim {

namespace {

namespace json = boost::json;
using clock_type = std::chrono::steady_clock;
using detail::append_chunk;
using detail::append_json_string;
using detail::response_head;

constexpr size_t max_head_bytes = 64 * 1024;
constexpr size_t max_body_bytes = 64 * 1024 * 1024;
constexpr size_t thread_stack_bytes = 256 * 1024;
constexpr size_t npos = std::numeric_limits<size_t>::max();

enum class action : uint8_t { ok, error, hang, reset, cut, stall, malformed,
                              nodone };

const char* to_string(action a) {
  switch (a) {
    case action::ok: return "ok";
    case action::error: return "error";
    case action::hang: return "hang";
    case action::reset: return "reset";
    case action::cut: return "cut";
    case action::stall: return "stall";
    case action::malformed: return "malformed";
    case action::nodone: return "nodone";
  }
  return "ok";
}

/// One `/_sim/log` row.
struct log_entry {
  const std::string* model = nullptr;
  uint64_t n = 0;
  double arrived_ms = 0;
  double ended_ms = std::numeric_limits<double>::quiet_NaN(); ///< NaN = in progress
  uint32_t tokens_sent = 0;
  uint32_t prompt_tokens = 0; ///< what the usage reports for the request
  uint16_t status = 0;
  action act = action::ok;
  bool client_closed = false;
  bool stream = false;
  bool auth = false;
};

/// Where a request's row lives; rows of a previous generation (before a
/// reset) are gone and never updated.
struct ticket {
  uint64_t generation = 0;
  size_t index = npos;
};

/// How a wait ended.
enum class waited { elapsed, client_left, stopping };

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

clock_type::time_point after_ms(clock_type::time_point t, double ms) {
  ms = std::min(ms, 1e12); // ~30 years: "forever" without overflowing
  return t + std::chrono::duration_cast<clock_type::duration>(
           std::chrono::duration<double, std::milli>(ms));
}

/// Where the stream fault (if any) strikes, in content tokens.
struct stream_plan {
  action terminal = action::ok; ///< ok, cut or stall
  int terminal_at = -1;
  int malformed_at = -1;
  bool omit_done = false;
};

stream_plan plan_stream(const detail::stream_spec& s, int produced) {
  stream_plan out;
  if (s.cut_after && *s.cut_after <= produced) {
    out.terminal = action::cut;
    out.terminal_at = *s.cut_after;
  }
  if (s.stall_after && *s.stall_after <= produced
      && (out.terminal_at < 0 || *s.stall_after < out.terminal_at)) {
    out.terminal = action::stall;
    out.terminal_at = *s.stall_after;
  }
  if (s.malformed_at && *s.malformed_at <= produced)
    out.malformed_at = *s.malformed_at;
  out.omit_done = s.omit_done;
  return out;
}

action classify(const detail::plan& p, const stream_plan& sp, bool stream) {
  if (p.fault.reset)
    return action::reset;
  if (p.fault.hang_ms)
    return action::hang;
  if (p.fault.status != 0)
    return action::error;
  if (sp.terminal != action::ok)
    return sp.terminal;
  if (sp.malformed_at >= 0)
    return action::malformed;
  if (stream && sp.omit_done)
    return action::nodone;
  return action::ok;
}

const char* error_type(int status, const std::optional<std::string>& code) {
  if (code && *code == "insufficient_quota")
    return "insufficient_quota";
  switch (status) {
    case 400: case 404: case 409: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_body(int status, const std::string& message,
                       const std::optional<std::string>& code,
                       const std::optional<std::string>& param = std::nullopt) {
  std::string out = R"({"error":{"message":)";
  append_json_string(out, message);
  out += R"(,"type":)";
  append_json_string(out, error_type(status, code));
  out += R"(,"param":)";
  if (param)
    append_json_string(out, *param);
  else
    out += "null";
  out += R"(,"code":)";
  if (code)
    append_json_string(out, *code);
  else
    out += "null";
  out += "}}";
  return out;
}

/// The parts of a chat request the simulator looks at.
struct chat_request {
  std::string model;
  bool stream = false;
  bool include_usage = false;
  std::optional<int64_t> max_tokens;
  int prompt_tokens = 1;
  /// `response_format.type`, empty when absent.
  std::string response_format;
  /// A `data:` image part was sent: the non-streamed answer is the text
  /// the simulator "recognises" in it (a vision OCR model).
  std::optional<std::string> image_text;
};

/// A scripted answer cut into stream tokens of up to 8 bytes, never inside
/// a UTF-8 character.
std::vector<std::string> content_tokens(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = std::min(text.size(), i + 8);
    while (end < text.size()
           && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
      ++end;
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

/// The answer's tokens: the scripted content, else the generated words.
std::vector<std::string> answer_of(const detail::plan& p,
                                   const std::string& model, uint64_t seed,
                                   int produced) {
  if (!p.b.content)
    return detail::answer_tokens(model, seed, produced);
  auto tokens = content_tokens(*p.b.content);
  tokens.resize(std::min(tokens.size(), static_cast<size_t>(produced)));
  return tokens;
}

/// Returns an error message, or empty when `body` is a usable chat request.
std::string parse_chat(const std::string& body, chat_request& out) {
  json::value doc;
  if (auto err = detail::parse_request_head(body, doc, out.model); !err.empty())
    return err;
  auto& obj = doc.get_object();
  auto* messages = obj.if_contains("messages");
  if (!messages || !messages->is_array() || messages->get_array().empty())
    return "'messages' must be a non-empty array";
  size_t chars = 0;
  for (auto& m : messages->get_array()) {
    if (!m.is_object())
      return "each message must be an object";
    auto* content = m.get_object().if_contains("content");
    if (!content)
      continue;
    if (content->is_string()) {
      chars += content->get_string().size();
    } else if (content->is_array()) {
      for (auto& part : content->get_array()) {
        if (!part.is_object())
          continue;
        if (auto* text = part.get_object().if_contains("text");
            text && text->is_string())
          chars += text->get_string().size();
        std::string bytes;
        if (auto* image = part.get_object().if_contains("image_url");
            image && image->is_object())
          if (auto* url = image->get_object().if_contains("url");
              url && url->is_string()
              && detail::data_url_bytes(std::string(url->get_string()), bytes))
            out.image_text = detail::ocr_text_of(bytes);
      }
    }
  }
  out.prompt_tokens = static_cast<int>(std::max<size_t>(1, chars / 4));
  if (auto* s = obj.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool())
      return "'stream' must be a boolean";
    out.stream = s->get_bool();
  }
  if (auto* rf = obj.if_contains("response_format"); rf && rf->is_object())
    if (auto* type = rf->get_object().if_contains("type");
        type && type->is_string())
      out.response_format = std::string(type->get_string());
  if (auto* so = obj.if_contains("stream_options"); so && so->is_object())
    if (auto* iu = so->get_object().if_contains("include_usage");
        iu && iu->is_bool())
      out.include_usage = iu->get_bool();
  for (auto* key : {"max_tokens", "max_completion_tokens"}) {
    auto* mt = obj.if_contains(key);
    if (!mt || mt->is_null())
      continue;
    if (!mt->is_int64() || mt->get_int64() < 0)
      return fmt::format("'{}' must be a non-negative integer", key);
    if (!out.max_tokens || mt->get_int64() < *out.max_tokens)
      out.max_tokens = mt->get_int64();
  }
  return {};
}

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

} // namespace

// -- the server -----------------------------------------------------------------

/// What a POST asks for.
enum class request_kind { chat, embeddings, ocr_text, ocr_parse };

struct server::impl {
  explicit impl(options o) : opts(std::move(o)) {
  }

  options opts;
  detail::scenario models;
  std::unordered_map<std::string, size_t> model_index; ///< name -> slot
  std::vector<const std::string*> model_names;
  std::vector<const detail::model_spec*> model_specs;
  std::string models_json; ///< the GET /v1/models body
  uint16_t bound_port = 0;
  int listen_fd = -1;
  int stop_fd = -1;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_id{1};
  std::thread acceptor;
  std::mutex stop_mu;
  bool stopped = false;

  // Connections (guarded by conn_mu).
  std::mutex conn_mu;
  std::condition_variable conn_cv;
  std::unordered_set<int> conns;
  size_t threads = 0;

  // The log (guarded by log_mu).
  mutable std::mutex log_mu;
  clock_type::time_point epoch = clock_type::now();
  uint64_t generation = 0;
  std::vector<uint64_t> counters; ///< per model slot
  std::deque<log_entry> entries;
  uint64_t dropped = 0;
  std::set<std::string> unknown_names; ///< stable storage for unknown models' names

  void start();
  void accept_loop();
  void serve(int fd);
  bool handle(int fd, const detail::request_head& head, std::string& body,
              bool& closed);
  /// Chat completions, or (`kind`) embeddings and MonkeyOCR-style OCR
  /// (`ocr_model`: the model named by the path).
  bool handle_chat(int fd, const detail::request_head& head,
                   const std::string& body, bool& closed,
                   request_kind kind = request_kind::chat,
                   const std::string& ocr_model = {});
  waited wait_until(int fd, clock_type::time_point deadline);
  void close_conn(int fd, bool reset);
  void do_stop();
  std::string log_json() const;
  void reset();

  ticket arrive(size_t slot, const detail::request_head& head,
                const chat_request& req, detail::plan& p, stream_plan& sp,
                int& produced, uint64_t& n, clock_type::time_point& arrived);
  void log_rejected(const std::string& model, int status, bool stream,
                    bool auth);
  void mark_status(const ticket& t, int status);
  void finish(const ticket& t, int status, bool client_closed,
              uint32_t tokens_sent);
};

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
      size_t length = head.content_length.value_or(0);
      if (!head.content_length && head.method == "POST") {
        reject(411, "POST requires Content-Length");
        goto done;
      }
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

namespace {

/// Structured output: a model that rejects the request's response format
/// answers a 400 naming the param; one that honours JSON mode answers its
/// `json_content`; scripted content sets the answer's token count.
void apply_response_format(const chat_request& req, detail::plan& p) {
  auto& rf = req.response_format;
  auto& rejected = p.b.reject_formats;
  if (!rf.empty() && !p.fault.active()
      && std::find(rejected.begin(), rejected.end(), rf) != rejected.end()) {
    p.fault.status = 400;
    p.fault.message = fmt::format("Invalid parameter: 'response_format' of "
                                  "type '{}' is not supported with this "
                                  "model.",
                                  rf.substr(0, 64));
    p.fault.param = "response_format";
  }
  if ((rf == "json_object" || rf == "json_schema") && p.b.json_content)
    p.b.content = p.b.json_content;
  if (p.b.content)
    p.b.tokens = static_cast<int>(content_tokens(*p.b.content).size());
}

} // namespace

ticket server::impl::arrive(size_t slot, const detail::request_head& head,
                            const chat_request& req, detail::plan& p,
                            stream_plan& sp, int& produced, uint64_t& n,
                            clock_type::time_point& arrived) {
  std::lock_guard<std::mutex> guard(log_mu);
  arrived = clock_type::now();
  double since = ms_between(epoch, arrived);
  n = ++counters[slot];
  p = detail::decide(*model_names[slot], *model_specs[slot], opts.seed, n,
                     since, opts.time_scale);
  apply_response_format(req, p);
  produced = p.b.tokens;
  if (req.max_tokens && *req.max_tokens < produced)
    produced = static_cast<int>(*req.max_tokens);
  sp = plan_stream(p.b.stream, produced);
  ticket t{generation, npos};
  if (entries.size() >= opts.log_limit) {
    ++dropped;
    return t;
  }
  t.index = entries.size();
  auto& e = entries.emplace_back();
  e.model = model_names[slot];
  e.n = n;
  e.arrived_ms = since;
  e.act = classify(p, sp, req.stream);
  e.stream = req.stream;
  e.auth = head.has_bearer;
  e.prompt_tokens = static_cast<uint32_t>(req.prompt_tokens);
  return t;
}

void server::impl::log_rejected(const std::string& model, int status,
                                bool stream, bool auth) {
  std::lock_guard<std::mutex> guard(log_mu);
  if (entries.size() >= opts.log_limit) {
    ++dropped;
    return;
  }
  double now = ms_between(epoch, clock_type::now());
  auto& e = entries.emplace_back();
  e.model = &*unknown_names.insert(model.substr(0, 256)).first;
  e.arrived_ms = now;
  e.ended_ms = now;
  e.act = action::error;
  e.status = static_cast<uint16_t>(status);
  e.stream = stream;
  e.auth = auth;
}

void server::impl::mark_status(const ticket& t, int status) {
  std::lock_guard<std::mutex> guard(log_mu);
  if (t.generation == generation && t.index != npos)
    entries[t.index].status = static_cast<uint16_t>(status);
}

void server::impl::finish(const ticket& t, int status, bool client_closed,
                          uint32_t tokens_sent) {
  std::lock_guard<std::mutex> guard(log_mu);
  if (t.generation != generation || t.index == npos)
    return;
  auto& e = entries[t.index];
  e.ended_ms = ms_between(epoch, clock_type::now());
  e.status = static_cast<uint16_t>(status);
  e.client_closed = client_closed;
  e.tokens_sent = tokens_sent;
}

bool server::impl::handle_chat(int fd, const detail::request_head& head,
                               const std::string& body, bool& closed,
                               request_kind kind,
                               const std::string& ocr_model) {
  const bool embeddings = kind == request_kind::embeddings;
  const bool ocr = kind == request_kind::ocr_text
                   || kind == request_kind::ocr_parse;
  const bool keep = head.keep_alive;
  auto error_response = [&](int status, const std::string& message,
                            const std::optional<std::string>& code,
                            const std::string& extra) {
    auto content = error_body(status, message, code);
    auto out = response_head(status, "application/json", content.size(),
                             !keep, extra);
    out += content;
    return out;
  };
  chat_request req;
  detail::embed_request ereq;
  std::string file;
  auto problem = embeddings ? detail::parse_embed(body, ereq)
                 : ocr ? (detail::multipart_file(body, file)
                            ? std::string{}
                            : "the body must be multipart/form-data with a "
                              "file part")
                       : parse_chat(body, req);
  if (embeddings) {
    req.model = ereq.model;
    req.prompt_tokens = ereq.prompt_tokens;
  }
  if (ocr)
    req.model = ocr_model;
  if (!problem.empty()) {
    log_rejected(req.model, 400, req.stream, head.has_bearer);
    return send_all(fd, error_response(400, problem, std::nullopt, {}))
           && keep;
  }
  auto it = model_index.find(req.model);
  if (it == model_index.end()) {
    log_rejected(req.model, 404, req.stream, head.has_bearer);
    return send_all(fd, error_response(
                          404,
                          fmt::format("The model '{}' does not exist",
                                      req.model),
                          std::string("model_not_found"), {}))
           && keep;
  }
  if (auto& max = model_specs[it->second]->max_inputs;
      embeddings && max && ereq.inputs.size() > static_cast<size_t>(*max)) {
    log_rejected(req.model, 400, false, head.has_bearer);
    return send_all(fd, error_response(
                          400,
                          fmt::format("at most {} inputs per request, got {}",
                                      *max, ereq.inputs.size()),
                          std::string("too_many_inputs"), {}))
           && keep;
  }
  detail::plan p;
  stream_plan sp;
  int produced = 0;
  uint64_t n = 0;
  clock_type::time_point t0;
  auto t = arrive(it->second, head, req, p, sp, produced, n, t0);
  const double scale = opts.time_scale;
  const auto& f = p.fault;
  auto end_conn = [&](bool rst) {
    close_conn(fd, rst);
    closed = true;
    return false;
  };
  // The last write of a response: the log row is completed first, so a
  // client holding the whole response already finds it in the log.
  auto deliver = [&](const std::string& out, int status, uint32_t tokens,
                     int status_if_failed) {
    finish(t, status, false, tokens);
    if (send_all(fd, out))
      return true;
    finish(t, status_if_failed, true, status_if_failed ? tokens : 0);
    return false;
  };
  // A client that left (or a stop) while we waited: record it and close.
  auto left = [&](waited w, int status_sent, uint32_t tokens) {
    finish(t, status_sent, w == waited::client_left, tokens);
    return end_conn(false);
  };

  if (f.reset) {
    finish(t, 0, false, 0);
    return end_conn(true);
  }
  if (f.hang_ms) {
    auto w = wait_until(fd, after_ms(t0, *f.hang_ms * scale));
    finish(t, 0, w == waited::client_left, 0);
    return end_conn(false);
  }
  if (f.status != 0) {
    if (auto w = wait_until(fd, after_ms(t0, p.latency_ms * scale));
        w != waited::elapsed)
      return left(w, 0, 0);
    std::string extra;
    if (f.retry_after)
      extra += "Retry-After: " + *f.retry_after + "\r\n";
    if (f.retry_after_ms)
      extra += "retry-after-ms: " + *f.retry_after_ms + "\r\n";
    if (f.status < 400) // a redirect (a misconfigured proxy or provider)
      extra += "Location: http://elsewhere.invalid/v1/chat/completions\r\n";
    auto message = f.message ? *f.message
                             : fmt::format("simulated {}", f.status);
    if (f.echo_auth)
      message += " (you sent Authorization: " + head.authorization + ")";
    auto content = error_body(f.status, message, f.code, f.param);
    auto reply = response_head(f.status, "application/json", content.size(),
                               !keep, extra)
                 + content;
    if (!deliver(reply, f.status, 0, 0))
      return end_conn(false);
    return keep;
  }

  if (embeddings || ocr) {
    if (auto w = wait_until(fd, after_ms(t0, p.latency_ms * scale));
        w != waited::elapsed)
      return left(w, 0, 0);
    auto& spec = *model_specs[it->second];
    std::string content;
    if (embeddings)
      content = detail::embeddings_body(ereq, static_cast<size_t>(spec.dim),
                                        p.b.usage);
    else if (spec.ocr_fail
             && detail::draw(opts.seed, req.model, n, 77) < spec.ocr_fail_p)
      content = detail::ocr_failure_body(*spec.ocr_fail);
    else
      content = detail::ocr_body(file, kind == request_kind::ocr_parse);
    auto out = response_head(200, "application/json", content.size(), !keep);
    out += content;
    if (!deliver(out, 200, 0, 0))
      return end_conn(false);
    return keep;
  }

  // A normal answer, possibly with a stream fault.
  const auto& model = req.model;
  const char* finish_reason = produced < p.b.tokens ? "length" : "stop";
  // A tool-call model answers with its calls' deltas instead of tokens.
  const auto& tool_mode = p.b.tool_calls;
  std::vector<std::string> tool_deltas;
  if (!tool_mode.empty()) {
    tool_deltas = detail::tool_call_deltas(tool_mode);
    produced = static_cast<int>(tool_deltas.size());
    finish_reason = detail::tool_calls_finish_reason(tool_mode);
  }
  auto id = fmt::format("chatcmpl-sim-{}", next_id.fetch_add(1));
  auto created = static_cast<long long>(std::time(nullptr));
  std::string usage;
  if (p.b.usage)
    usage = fmt::format(
      R"("usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}})",
      req.prompt_tokens, produced, req.prompt_tokens + produced);

  if (!req.stream) {
    auto total_ms = p.latency_ms + p.b.ttft_ms + produced * p.b.token_ms;
    if (auto w = wait_until(fd, after_ms(t0, total_ms * scale));
        w != waited::elapsed)
      return left(w, 0, 0);
    std::string content = R"({"id":")" + id
                          + R"(","object":"chat.completion","created":)"
                          + std::to_string(created) + R"(,"model":)";
    append_json_string(content, model);
    if (tool_mode.empty()) {
      content += R"(,"choices":[{"index":0,"message":{"role":"assistant","content":)";
      std::string text;
      if (req.image_text)
        text = *req.image_text;
      else
        for (auto& token : answer_of(p, model, opts.seed, produced))
          text += token;
      append_json_string(content, text);
      content += "}";
    } else {
      content += R"(,"choices":[{"index":0,"message":)";
      content += detail::tool_calls_message(tool_mode);
    }
    content += R"(,"finish_reason":")";
    content += finish_reason;
    content += "\"}]";
    if (!usage.empty())
      content += "," + usage;
    content += "}";
    if (sp.terminal != action::ok) {
      // Full Content-Length, half the body, then (after a stall) close.
      auto out = response_head(200, "application/json", content.size(), false);
      out.append(content, 0, content.size() / 2);
      if (!send_all(fd, out))
        return left(waited::client_left, 200, 0);
      waited w = waited::elapsed;
      if (sp.terminal == action::stall)
        w = wait_until(fd, after_ms(clock_type::now(),
                                    p.b.stream.stall_ms * scale));
      finish(t, 200, w == waited::client_left, 0);
      return end_conn(false);
    }
    if (sp.malformed_at >= 0)
      content.resize(content.size() / 2); // valid prefix, invalid JSON
    auto out = response_head(200, "application/json", content.size(), !keep);
    out += content;
    if (!deliver(out, 200,
                 sp.malformed_at < 0 ? static_cast<uint32_t>(produced) : 0, 0))
      return end_conn(false);
    return keep;
  }

  // Streaming.
  if (auto w = wait_until(fd, after_ms(t0, p.latency_ms * scale));
      w != waited::elapsed)
    return left(w, 0, 0);
  std::string prefix = R"({"id":")" + id
                       + R"(","object":"chat.completion.chunk","created":)"
                       + std::to_string(created) + R"(,"model":)";
  append_json_string(prefix, model);
  prefix += R"(,"choices":)";
  auto event = [&](std::string& out, std::string_view choices_and_rest) {
    std::string payload = "data: " + prefix;
    payload += choices_and_rest;
    payload += "}\n\n";
    append_chunk(out, payload);
  };
  std::string out = response_head(200, "text/event-stream", std::nullopt,
                                  !keep, "Cache-Control: no-cache\r\n");
  event(out, R"([{"index":0,"delta":{"role":"assistant"},"finish_reason":null}])");
  mark_status(t, 200);
  if (!send_all(fd, out))
    return left(waited::client_left, 0, 0);
  auto t1 = clock_type::now();
  auto tokens = answer_of(p, model, opts.seed, produced);
  uint32_t sent = 0;
  for (int i = 0; i <= produced; ++i) {
    out.clear();
    if (i > 0) {
      auto due = p.b.ttft_ms + (i - 1) * p.b.token_ms;
      if (auto w = wait_until(fd, after_ms(t1, due * scale));
          w != waited::elapsed)
        return left(w, 200, sent);
      std::string choice = R"([{"index":0,"delta":)";
      if (tool_mode.empty()) {
        choice += R"({"content":)";
        append_json_string(choice, tokens[static_cast<size_t>(i - 1)]);
        choice += "}";
      } else {
        choice += tool_deltas[static_cast<size_t>(i - 1)];
      }
      choice += R"(,"finish_reason":null}])";
      event(out, choice);
    }
    if (i == sp.malformed_at)
      append_chunk(out, "data: {\"choices\": [\n\n");
    if (!out.empty()) {
      if (!send_all(fd, out))
        return left(waited::client_left, 200, sent);
      if (i > 0)
        sent = static_cast<uint32_t>(i);
    }
    if (i == sp.terminal_at) {
      waited w = waited::elapsed;
      if (sp.terminal == action::stall)
        w = wait_until(fd, after_ms(clock_type::now(),
                                    p.b.stream.stall_ms * scale));
      finish(t, 200, w == waited::client_left, sent);
      return end_conn(false);
    }
  }
  if (produced == 0)
    if (auto w = wait_until(fd, after_ms(t1, p.b.ttft_ms * scale));
        w != waited::elapsed)
      return left(w, 200, sent);
  out.clear();
  event(out, fmt::format(R"([{{"index":0,"delta":{{}},"finish_reason":"{}"}}])",
                         finish_reason));
  // Hostile endings: the answer is complete, the connection is held open
  // until the client leaves.
  auto hold_open = [&] {
    if (!send_all(fd, out))
      return left(waited::client_left, 200, sent);
    return left(wait_until(fd, after_ms(clock_type::now(), 600000 * scale)),
                200, sent);
  };
  if (p.b.stream.hang_after_finish)
    return hold_open();
  if (req.include_usage && !usage.empty())
    event(out, "[]," + usage);
  if (!sp.omit_done)
    append_chunk(out, "data: [DONE]\n\n");
  if (p.b.stream.hang_after_done)
    return hold_open();
  out += "0\r\n\r\n";
  if (!deliver(out, 200, sent, 200))
    return end_conn(false);
  return keep;
}

std::string server::impl::log_json() const {
  std::deque<log_entry> copy;
  uint64_t dropped_copy;
  {
    std::lock_guard<std::mutex> guard(log_mu);
    copy = entries;
    dropped_copy = dropped;
  }
  std::string out;
  out.reserve(copy.size() * 190 + 64);
  out += R"({"requests":[)";
  bool first = true;
  for (auto& e : copy) {
    if (!first)
      out += ',';
    first = false;
    out += R"({"model":)";
    append_json_string(out, *e.model);
    fmt::format_to(std::back_inserter(out),
                   R"(,"n":{},"arrived_ms":{:.3f},"action":"{}","status":{},"ended_ms":)",
                   e.n, e.arrived_ms, to_string(e.act), e.status);
    if (std::isnan(e.ended_ms))
      out += "null";
    else
      fmt::format_to(std::back_inserter(out), "{:.3f}", e.ended_ms);
    fmt::format_to(std::back_inserter(out),
                   R"(,"client_closed":{},"stream":{},"auth":{},"tokens_sent":{},)"
                   R"("prompt_tokens":{}}})",
                   e.client_closed, e.stream, e.auth, e.tokens_sent,
                   e.prompt_tokens);
  }
  fmt::format_to(std::back_inserter(out), R"(],"dropped":{}}})", dropped_copy);
  return out;
}

void server::impl::reset() {
  std::lock_guard<std::mutex> guard(log_mu);
  entries.clear();
  dropped = 0;
  counters.assign(counters.size(), 0);
  ++generation;
  epoch = clock_type::now();
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
