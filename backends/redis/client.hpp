#pragma once

/// A small blocking Redis client (hiredis) for the Redis governance backends
/// (SPEC §5, §6): a parsed REDIS_URL, a per-process pool of connections,
/// short timeouts, reconnection with exponential backoff and Lua scripts run
/// by EVALSHA with a transparent fallback on NOSCRIPT.
///
/// Callers block: they are the project's own I/O threads, never CAF
/// scheduler threads. Every failure is a `governance_unavailable` error
/// whose message names the server (host:port/db) and never the password.

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

// -- endpoint -------------------------------------------------------------------

/// Where a Redis server is, as REDIS_URL says.
struct redis_endpoint {
  std::string host;
  uint16_t port = 6379;
  std::string user;     ///< an ACL user for AUTH; empty: the default user
  std::string password; ///< empty: no AUTH
  int64_t db = 0;       ///< SELECTed after connecting when not 0

  /// "host:port/db", for messages: never the password.
  std::string describe() const;
};

/// Parses `redis://[[user]:password@]host[:port][/db]`, credentials
/// percent-decoded (the grammar of REDIS_URL,
/// config/validate.cpp; the port defaults to 6379). An IPv6 host is written
/// in brackets. Fails with `invalid_config` and a message that masks the
/// password.
caf::expected<redis_endpoint> parse_redis_url(const std::string& url);

// -- replies and scripts --------------------------------------------------------

/// One Redis reply. Error replies never become a `redis_reply`: they come
/// back as a `governance_unavailable` error carrying Redis' message.
struct redis_reply {
  enum class kind { nil, integer, string, status, array };
  kind type = kind::nil;
  int64_t integer = 0;              ///< kind::integer
  std::string str;                  ///< kind::string, kind::status
  std::vector<redis_reply> elements; ///< kind::array

  bool is_nil() const noexcept {
    return type == kind::nil;
  }
};

/// A Lua script and the SHA1 of its text, computed locally (what SCRIPT
/// LOAD would answer), so EVALSHA needs no round trip to learn it.
class redis_script {
public:
  explicit redis_script(std::string text);

  const std::string& text() const noexcept {
    return text_;
  }

  /// Lower-case hex SHA1 of `text()`.
  const std::string& sha1() const noexcept {
    return sha1_;
  }

private:
  std::string text_;
  std::string sha1_;
};

/// Lower-case hex SHA1 of `data`.
std::string sha1_hex(const std::string& data);

// -- client ---------------------------------------------------------------------

/// Timeouts, pool and reconnect policy.
struct redis_client_options {
  /// Connections opened at most (lazily, when a caller needs one).
  size_t pool_size = 4;
  /// TCP connect, and the AUTH/SELECT/PING handshake of a new connection.
  std::chrono::milliseconds connect_timeout{1000};
  /// One command's send and reply; also how long a caller waits for a free
  /// connection when all of them are busy.
  std::chrono::milliseconds command_timeout{1000};
  /// The wait after a failed connection attempt; doubles with every further
  /// failure up to `max_backoff` and resets after a success.
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{2000};
};

/// What the client did so far.
struct redis_client_stats {
  uint64_t commands = 0;          ///< commands sent (EVALSHA fallbacks count)
  uint64_t failures = 0;          ///< calls that returned an error
  uint64_t connects = 0;          ///< connections established
  uint64_t connect_failures = 0;  ///< connection attempts that failed
  uint64_t fast_failures = 0;     ///< calls refused during a backoff wait
  uint64_t script_reloads = 0;    ///< NOSCRIPT answered by EVAL
  bool down = false;              ///< the last connection attempt failed
};

/// A thread-safe pool of blocking connections to one Redis server.
///
/// Connection policy:
/// - A connection is opened when a caller needs one and the pool has no
///   idle connected one; a new connection sends AUTH (when the URL has a
///   password) and SELECT (db ≠ 0), or PING, before it is used.
/// - A call whose connection fails (I/O error, EOF, timeout) returns an
///   error at once and never retries the command (it may have run); every
///   other connection opened before the failure is discarded when next
///   used, so a restarted server costs one failed call, not one per pooled
///   connection.
/// - The next call reconnects at once. When a connection attempt fails,
///   calls fail fast (no network I/O) until the backoff has passed; then
///   one caller tries again. The backoff starts at `initial_backoff` and
///   doubles up to `max_backoff`; a successful connection resets it.
/// - Error replies (a script error, WRONGTYPE) leave the connection in use.
class redis_client {
public:
  virtual ~redis_client();

  /// Sends one command (`args[0]` is the command name) and returns its reply.
  virtual caf::expected<redis_reply>
  command(const std::vector<std::string>& args) = 0;

  /// Runs `script` with EVALSHA; when Redis answers NOSCRIPT (after SCRIPT
  /// FLUSH or a restart) runs it with EVAL, which also caches it again.
  virtual caf::expected<redis_reply>
  eval(const redis_script& script, const std::vector<std::string>& keys,
       const std::vector<std::string>& args) = 0;

  /// One script call of `eval_batch`.
  struct script_call {
    const redis_script* script = nullptr;
    std::vector<std::string> keys;
    std::vector<std::string> args;
  };

  /// Runs `calls` pipelined on one connection (their commands written
  /// together, the replies read in order) and returns one result per call,
  /// in order; NOSCRIPT falls back to EVAL per call. An I/O error fails the
  /// calls whose replies were not read (they may have run). The base class
  /// runs them one by one with `eval`.
  virtual std::vector<caf::expected<redis_reply>>
  eval_batch(const std::vector<script_call>& calls);

  /// The server, as "host:port/db" (no password).
  virtual std::string endpoint() const = 0;

  virtual redis_client_stats stats() const = 0;

  /// How long a command may take before the caller gives up on it.
  virtual std::chrono::milliseconds command_timeout() const = 0;
};

using redis_client_ptr = std::shared_ptr<redis_client>;

/// A client for `endpoint`. Connects lazily: an unreachable server is not
/// an error here, only calls fail.
redis_client_ptr make_redis_client(redis_endpoint endpoint,
                                   redis_client_options opts = {});

/// Parses `url` (see `parse_redis_url`) and makes a client with a pool of
/// `pool_size` connections. Fails only for a malformed URL.
caf::expected<redis_client_ptr> make_redis_client(const std::string& url,
                                                  size_t pool_size = 4);

// -- helpers of the governance backends ----------------------------------------

/// How long the long-lived keys of a source (limiter counters, sequence and
/// leases; the breaker hash) live after its last use: a day, or twice
/// `longest_s` (the longest duration of its settings) when that is longer.
double redis_retention_s(double longest_s);

namespace detail {

/// `seconds` as whole microseconds in decimal, clamped to ±1e15 µs (about
/// 31 years) so a huge setting cannot overflow.
std::string to_us_text(double seconds);

/// `seconds` as whole milliseconds in decimal, clamped likewise.
std::string to_ms_text(double seconds);

/// The text of a script of backends/redis by file name (compiled in by
/// CMake; "" if unknown).
const std::string& embedded_lua(const std::string& file_name);

} // namespace detail

} // namespace pgw
