#include "backends/redis/client.hpp"

#include "config/keys.hpp"
#include "config/scrub.hpp"
#include "config/url.hpp"
#include "config/support/log.hpp"
#include "config/support/sigpipe_guard.hpp"
#include "messages/errors.hpp"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <string_view>
#include <sys/time.h>
#include <utility>

namespace pgw {

// -- endpoint -------------------------------------------------------------------

std::string redis_endpoint::describe() const {
  auto h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return fmt::format("{}:{}/{}", h, port, db);
}

namespace {

/// The problem with `url`, or "" when `out` was filled. The grammar is
/// REDIS_URL's, parsed by the project's one parser (config/url.hpp); the
/// port defaults to 6379 here.
std::string parse_url(const std::string& url, redis_endpoint& out) {
  redis_url_parts parts;
  auto problem = split_redis_url(url, parts, false);
  if (!problem.empty())
    return problem;
  out.host = parts.host;
  out.port = parts.port.value_or(out.port);
  out.user = parts.user;
  out.password = parts.password;
  out.db = parts.db;
  return {};
}

} // namespace

caf::expected<redis_endpoint> parse_redis_url(const std::string& url) {
  redis_endpoint result;
  if (auto problem = parse_url(url, result); !problem.empty())
    return make_error(error_code::invalid_config,
                      fmt::format("REDIS_URL={}: {}", detail::mask_url(url),
                                  problem));
  return result;
}

// -- scripts --------------------------------------------------------------------

std::string sha1_hex(const std::string& data) {
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
       digest);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA_DIGEST_LENGTH);
  for (auto byte : digest) {
    out.push_back(hex[byte >> 4]);
    out.push_back(hex[byte & 0x0f]);
  }
  return out;
}

redis_script::redis_script(std::string text)
  : text_(std::move(text)), sha1_(sha1_hex(text_)) {
  // nop
}

redis_client::~redis_client() = default;

std::vector<caf::expected<redis_reply>>
redis_client::eval_batch(const std::vector<script_call>& calls) {
  std::vector<caf::expected<redis_reply>> out;
  out.reserve(calls.size());
  for (auto& c : calls)
    out.push_back(eval(*c.script, c.keys, c.args));
  return out;
}

namespace {

// -- helpers --------------------------------------------------------------------

using clock_type = std::chrono::steady_clock;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

struct context_deleter {
  void operator()(redisContext* ctx) const {
    if (ctx != nullptr)
      redisFree(ctx);
  }
};

using context_ptr = std::unique_ptr<redisContext, context_deleter>;

redis_reply convert(const redisReply* r) {
  redis_reply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = redis_reply::kind::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = redis_reply::kind::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = redis_reply::kind::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = redis_reply::kind::array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i)
        out.elements.push_back(convert(r->element[i]));
      break;
    default: // REDIS_REPLY_NIL
      break;
  }
  return out;
}

/// The outcome of one command on one connection.
struct exchange {
  enum class status { ok, error_reply, io_error };
  status st = status::ok;
  redis_reply reply;
  std::string message; ///< error_reply: Redis' text; io_error: what failed
};

using exchange_list = std::vector<exchange>;

/// Appends one command in Redis' wire format (RESP: an array of bulk
/// strings) to `wire`: what hiredis' format functions produce, written
/// into one buffer for a whole batch.
class wire_command {
public:
  wire_command(std::string& wire, size_t argc) : wire_(wire) {
    header('*', argc);
  }

  void arg(std::string_view a) {
    header('$', a.size());
    wire_.append(a.data(), a.size());
    wire_.append("\r\n", 2);
  }

  /// A number as its decimal text.
  void arg(size_t n) {
    char buf[24];
    auto end = std::to_chars(buf, buf + sizeof(buf), n).ptr;
    arg(std::string_view{buf, static_cast<size_t>(end - buf)});
  }

private:
  void header(char kind, size_t n) {
    char buf[24];
    auto end = std::to_chars(buf, buf + sizeof(buf), n).ptr;
    wire_.push_back(kind);
    wire_.append(buf, static_cast<size_t>(end - buf));
    wire_.append("\r\n", 2);
  }

  std::string& wire_;
};

/// `argvs` as commands in wire format, one after the other.
std::string to_wire(const std::vector<std::vector<std::string>>& argvs) {
  std::string wire;
  for (auto& args : argvs) {
    wire_command cmd{wire, args.size()};
    for (auto& a : args)
      cmd.arg(a);
  }
  return wire;
}

/// One pooled connection.
struct connection {
  context_ptr ctx;
  uint64_t generation = 0; ///< the client's generation when it connected
};

// -- the client -----------------------------------------------------------------

class redis_client_impl final : public redis_client {
public:
  redis_client_impl(redis_endpoint ep, redis_client_options opts)
    : ep_(std::move(ep)), opts_(opts), backoff_(opts.initial_backoff) {
    opts_.pool_size = std::max<size_t>(opts_.pool_size, 1);
    connections_.resize(opts_.pool_size);
    for (auto& c : connections_)
      idle_.push_back(&c);
  }

  caf::expected<redis_reply>
  command(const std::vector<std::string>& args) override {
    if (args.empty())
      return failure("empty command");
    auto conn = lease();
    if (!conn)
      return std::move(conn.error());
    auto x = send(**conn, args);
    give_back(*conn);
    if (x.st != exchange::status::ok)
      return failure(x.message);
    return std::move(x.reply);
  }

  caf::expected<redis_reply>
  eval(const redis_script& script, const std::vector<std::string>& keys,
       const std::vector<std::string>& args) override {
    auto argv = evalsha_argv(script, keys, args);
    auto conn = lease();
    if (!conn)
      return std::move(conn.error());
    auto x = send(**conn, argv);
    if (is_noscript(x))
      x = reload(**conn, script, argv);
    give_back(*conn);
    if (x.st != exchange::status::ok)
      return failure(x.message);
    return std::move(x.reply);
  }

  std::vector<caf::expected<redis_reply>>
  eval_batch(const std::vector<script_call>& calls) override {
    std::vector<caf::expected<redis_reply>> out;
    out.reserve(calls.size());
    if (calls.empty())
      return out;
    auto conn = lease();
    if (!conn) {
      for (size_t i = 0; i < calls.size(); ++i)
        out.push_back(conn.error());
      return out;
    }
    // The batch in one buffer, written with one append (no per-command
    // formatting, copies of the arguments, or output-buffer regrowth).
    std::string wire;
    size_t bytes = 0;
    for (auto& c : calls) {
      bytes += 96 + c.script->sha1().size();
      for (auto& k : c.keys)
        bytes += k.size() + 16;
      for (auto& a : c.args)
        bytes += a.size() + 16;
    }
    wire.reserve(bytes);
    for (auto& c : calls) {
      wire_command cmd{wire, 3 + c.keys.size() + c.args.size()};
      cmd.arg("EVALSHA");
      cmd.arg(c.script->sha1());
      cmd.arg(c.keys.size());
      for (auto& k : c.keys)
        cmd.arg(k);
      for (auto& a : c.args)
        cmd.arg(a);
    }
    auto xs = pipeline(**conn, wire, calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      if (is_noscript(xs[i]) && (*conn)->ctx)
        xs[i] = reload(**conn, *calls[i].script,
                       evalsha_argv(*calls[i].script, calls[i].keys,
                                    calls[i].args));
      if (xs[i].st != exchange::status::ok)
        out.push_back(failure(xs[i].message));
      else
        out.push_back(std::move(xs[i].reply));
    }
    give_back(*conn);
    return out;
  }

  std::string endpoint() const override {
    return ep_.describe();
  }

  std::chrono::milliseconds command_timeout() const override {
    return opts_.command_timeout;
  }

  redis_client_stats stats() const override {
    std::lock_guard<std::mutex> guard{mtx_};
    auto result = stats_;
    result.down = down_;
    return result;
  }

private:
  // -- errors -------------------------------------------------------------------

  /// Never lets the password through, whatever a server or the OS says
  /// (config/scrub.hpp's rules: one shorter than 4 bytes is not matched,
  /// it would garble an address and so show itself).
  std::string scrub(std::string text) const {
    return redact_secrets(text, {ep_.password}, "***");
  }

  caf::error failure(const std::string& what) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ++stats_.failures;
    }
    return make_error(error_code::governance_unavailable,
                      scrub(fmt::format("redis {}: {}", ep_.describe(), what)));
  }

  // -- pool ---------------------------------------------------------------------

  /// An idle connection, connected to the server (see the policy in the
  /// header).
  caf::expected<connection*> lease() {
    connection* conn = nullptr;
    {
      std::unique_lock<std::mutex> guard{mtx_};
      if (!cv_.wait_for(guard, opts_.command_timeout,
                        [this] { return !idle_.empty(); })) {
        guard.unlock();
        return failure(fmt::format("all {} connections busy for {} ms",
                                   opts_.pool_size,
                                   opts_.command_timeout.count()));
      }
      // Last in, first out: a recently used connection is likely open.
      conn = idle_.back();
      idle_.pop_back();
    }
    if (auto err = ensure_connected(*conn)) {
      give_back(conn);
      return err;
    }
    return conn;
  }

  void give_back(connection* conn) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      idle_.push_back(conn);
    }
    cv_.notify_one();
  }

  caf::error ensure_connected(connection& conn) {
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (conn.ctx && conn.generation == generation_)
        return {};
      auto now = clock_type::now();
      if (down_ && now < retry_at_) {
        ++stats_.fast_failures;
        ++stats_.failures;
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          retry_at_ - now);
        return make_error(
          error_code::governance_unavailable,
          scrub(fmt::format("redis {}: unavailable ({}); next connection "
                            "attempt in {} ms",
                            ep_.describe(), last_error_, wait.count())));
      }
      // This caller makes the attempt; others fail fast meanwhile.
      if (down_)
        retry_at_ = now + backoff_;
      generation = generation_;
    }
    conn.ctx.reset(); // stale: opened before a failure
    std::string problem;
    auto ctx = open(problem);
    bool was_down = false;
    std::unique_lock<std::mutex> guard{mtx_};
    was_down = down_;
    if (!ctx) {
      ++stats_.connect_failures;
      ++stats_.failures;
      down_ = true;
      last_error_ = problem;
      retry_at_ = clock_type::now() + backoff_;
      auto wait = backoff_;
      backoff_ = std::min(backoff_ * 2, opts_.max_backoff);
      guard.unlock();
      auto text = scrub(fmt::format("redis {}: {}", ep_.describe(), problem));
      // Once per outage; the retries are in the errors callers get.
      if (!was_down)
        log::warn("redis-client", "{}; retrying after {} ms, backing off up "
                                  "to {} ms",
                  text, wait.count(), opts_.max_backoff.count());
      return make_error(error_code::governance_unavailable, std::move(text));
    }
    ++stats_.connects;
    down_ = false;
    backoff_ = opts_.initial_backoff;
    conn.ctx = std::move(ctx);
    conn.generation = generation;
    guard.unlock();
    if (was_down)
      log::warn("redis-client", "redis {}: connected again", ep_.describe());
    return {};
  }

  /// A new connection, authenticated and on the right database, or nullptr
  /// with `problem` set.
  context_ptr open(std::string& problem) {
    sigpipe_guard no_sigpipe;
    context_ptr ctx{redisConnectWithTimeout(ep_.host.c_str(), ep_.port,
                                            to_timeval(opts_.connect_timeout))};
    if (!ctx) {
      problem = "connect failed: out of memory";
      return nullptr;
    }
    if (ctx->err != 0) {
      problem = fmt::format("connect failed: {}", describe_io(ctx.get()));
      return nullptr;
    }
    redisSetTimeout(ctx.get(), to_timeval(opts_.connect_timeout));
    redisEnableKeepAlive(ctx.get());
    auto handshake = [&](std::vector<std::string> argv,
                         const char* what) -> bool {
      auto x = roundtrip(ctx, argv);
      if (x.st == exchange::status::ok)
        return true;
      problem = fmt::format("{} failed: {}", what, x.message);
      return false;
    };
    auto auth = ep_.user.empty()
                  ? std::vector<std::string>{"AUTH", ep_.password}
                  : std::vector<std::string>{"AUTH", ep_.user, ep_.password};
    if (!ep_.password.empty() && !handshake(auth, "AUTH"))
      return nullptr;
    if (ep_.db != 0
        && !handshake({"SELECT", std::to_string(ep_.db)}, "SELECT"))
      return nullptr;
    // A server that accepts connections but does not answer (stopped,
    // overloaded) fails here, so the backoff applies to it.
    if (ep_.password.empty() && ep_.db == 0
        && !handshake({"PING"}, "PING"))
      return nullptr;
    redisSetTimeout(ctx.get(), to_timeval(opts_.command_timeout));
    return ctx;
  }

  std::string describe_io(const redisContext* ctx) const {
    std::string text = ctx->errstr;
    // hiredis reports a socket timeout as EAGAIN.
    if (text.find("Resource temporarily unavailable") != std::string::npos)
      return "timed out";
    if (ctx->err == REDIS_ERR_EOF)
      return "connection closed by server";
    return text.empty() ? "I/O error" : text;
  }

  /// Commands written together on `ctx` (one write), their replies read
  /// in order. On an I/O error `ctx` is closed (hiredis contexts are
  /// unusable after one) and the replies not read are io_error.
  exchange_list exchanges(context_ptr& ctx,
                          const std::vector<std::vector<std::string>>& argvs) {
    return exchanges(ctx, to_wire(argvs), argvs.size());
  }

  /// `count` commands already in wire format in `wire` (see above).
  exchange_list exchanges(context_ptr& ctx, const std::string& wire,
                          size_t count) {
    exchange_list xs(count);
    sigpipe_guard no_sigpipe;
    size_t appended = 0;
    if (count > 0
        && redisAppendFormattedCommand(ctx.get(), wire.data(), wire.size())
             == REDIS_OK)
      appended = count; // else out of memory: every call fails below
    size_t read = 0;
    std::string problem = "out of memory";
    for (; read < appended; ++read) {
      void* raw = nullptr;
      if (redisGetReply(ctx.get(), &raw) != REDIS_OK || raw == nullptr) {
        problem = describe_io(ctx.get());
        break;
      }
      auto* r = static_cast<redisReply*>(raw);
      if (r->type == REDIS_REPLY_ERROR) {
        xs[read].st = exchange::status::error_reply;
        xs[read].message.assign(r->str, r->len);
      } else {
        xs[read].reply = convert(r);
      }
      freeReplyObject(r);
    }
    if (read < xs.size()) {
      ctx.reset();
      for (size_t i = read; i < xs.size(); ++i) {
        xs[i].st = exchange::status::io_error;
        xs[i].message = problem;
      }
    }
    return xs;
  }

  /// One command on `ctx` (see `exchanges`).
  exchange roundtrip(context_ptr& ctx, const std::vector<std::string>& args) {
    return std::move(exchanges(ctx, {args}).front());
  }

  static std::vector<std::string>
  evalsha_argv(const redis_script& script, const std::vector<std::string>& keys,
               const std::vector<std::string>& args) {
    std::vector<std::string> argv;
    argv.reserve(3 + keys.size() + args.size());
    argv.emplace_back("EVALSHA");
    argv.push_back(script.sha1());
    argv.push_back(std::to_string(keys.size()));
    argv.insert(argv.end(), keys.begin(), keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  static bool is_noscript(const exchange& x) {
    return x.st == exchange::status::error_reply
           && x.message.rfind("NOSCRIPT", 0) == 0;
  }

  /// Flushed or restarted: EVAL runs the script and caches it again.
  exchange reload(connection& conn, const redis_script& script,
                  std::vector<std::string> argv) {
    argv[0] = "EVAL";
    argv[1] = script.text();
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ++stats_.script_reloads;
    }
    return send(conn, argv);
  }

  /// `argvs` on a pooled connection (see `exchanges`); an I/O error
  /// retires every connection opened so far.
  exchange_list pipeline(connection& conn,
                         const std::vector<std::vector<std::string>>& argvs) {
    return pipeline(conn, to_wire(argvs), argvs.size());
  }

  /// `count` commands in wire format (see `wire_command`).
  exchange_list pipeline(connection& conn, const std::string& wire,
                         size_t count) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stats_.commands += count;
    }
    auto xs = exchanges(conn.ctx, wire, count);
    if (!xs.empty() && xs.back().st == exchange::status::io_error) {
      std::lock_guard<std::mutex> guard{mtx_};
      ++generation_;
      last_error_ = xs.back().message;
    }
    return xs;
  }

  /// A command on a pooled connection; an I/O error retires every
  /// connection opened so far.
  exchange send(connection& conn, const std::vector<std::string>& args) {
    return std::move(pipeline(conn, {args}).front());
  }

  redis_endpoint ep_;
  redis_client_options opts_;

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  /// Fixed size: `idle_` points into it.
  std::vector<connection> connections_;
  std::vector<connection*> idle_;
  /// Incremented by every connection failure: connections of an older
  /// generation are closed before use.
  uint64_t generation_ = 0;
  bool down_ = false;
  clock_type::time_point retry_at_;
  std::chrono::milliseconds backoff_;
  std::string last_error_;
  redis_client_stats stats_;
};

} // namespace

redis_client_ptr make_redis_client(redis_endpoint endpoint,
                                   redis_client_options opts) {
  return std::make_shared<redis_client_impl>(std::move(endpoint), opts);
}

double redis_retention_s(double longest_s) {
  constexpr double day = 86400;
  return std::isfinite(longest_s) ? std::max(day, 2 * longest_s) : day;
}

namespace detail {

namespace {

double clamped(double x) {
  constexpr double limit = 1e15;
  if (std::isnan(x))
    return 0;
  return std::clamp(x, -limit, limit);
}

} // namespace

std::string to_us_text(double seconds) {
  return std::to_string(std::llround(clamped(seconds * 1e6)));
}

std::string to_ms_text(double seconds) {
  return std::to_string(std::llround(clamped(seconds * 1e3)));
}

} // namespace detail

caf::expected<redis_client_ptr> make_redis_client(const std::string& url,
                                                  size_t pool_size) {
  auto ep = parse_redis_url(url);
  if (!ep)
    return std::move(ep.error());
  redis_client_options opts;
  opts.pool_size = pool_size;
  return make_redis_client(std::move(*ep), opts);
}

} // namespace pgw
