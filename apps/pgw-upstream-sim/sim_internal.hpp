#pragma once

/// What the simulator's three parts share (internal to apps/pgw-upstream-sim):
/// the server loop (sim.cpp: sockets, connections, routing), the behaviours
/// (sim_behaviours.cpp: what a request's model makes the answer do) and the
/// request log (sim_log.cpp: `/_sim/log`, `/_sim/reset`).

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

const char* to_string(action a);

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

inline double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline clock_type::time_point after_ms(clock_type::time_point t, double ms) {
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

stream_plan plan_stream(const detail::stream_spec& s, int produced);

/// The action a request's plan makes it take.
action classify(const detail::plan& p, const stream_plan& sp, bool stream);

/// An OpenAI-style error object.
std::string error_body(int status, const std::string& message,
                       const std::optional<std::string>& code,
                       const std::optional<std::string>& param = std::nullopt);

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

/// Returns an error message, or empty when `body` is a usable chat request.
std::string parse_chat(const std::string& body, chat_request& out);

/// The answer's tokens: the scripted content, else the generated words.
std::vector<std::string> answer_of(const detail::plan& p,
                                   const std::string& model, uint64_t seed,
                                   int produced);

/// Writes all of `data` (false when the connection broke).
bool send_all(int fd, const char* data, size_t size);
bool send_all(int fd, const std::string& s);

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

} // namespace pgw::sim
