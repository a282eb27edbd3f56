#pragma once

/// The upstream simulator (SPEC §11, §11.1): an OpenAI-compatible HTTP/1.1
/// server on raw POSIX sockets whose behaviour is selected by the request's
/// `model`. Integration tests, benchmarks and the CLI's demo run it, either as
/// the `pgw-upstream-sim` program or in-process through `server`.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pgw::sim {

/// How a simulator starts.
struct options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;         ///< 0 = the kernel picks
  std::string scenario_json; ///< scenario text (extends/overrides the built-ins); empty = built-ins only
  uint64_t seed = 1;
  double time_scale = 1.0;   ///< multiplies every simulated delay (>= 0)
  size_t log_limit = 1000000; ///< log entries kept; more are counted as dropped
};

/// Parses and validates scenario text; throws std::invalid_argument whose
/// what() names the JSON path, e.g.
/// "models.flaky.faults[0].p: must be a number in [0, 1]".
void check_scenario(const std::string& scenario_json);

/// The deterministic answer text `model` produces with `tokens` tokens under
/// `seed`: what a complete answer's content equals, so tests detect
/// truncation. A shorter answer is a prefix of a longer one. `token_bytes`:
/// the model's `token_bytes` (each word repeated to at least that length).
std::string answer_text(const std::string& model, uint64_t seed, int tokens,
                        int token_bytes = 0);

/// A running simulator: binds in the constructor, serves on its own threads
/// (one per connection) until `stop()` or destruction.
class server {
public:
  /// Binds and starts serving; throws std::runtime_error (socket errors) or
  /// std::invalid_argument (bad scenario, bad options).
  explicit server(options opts);

  /// Stops, closes every connection, waits for every thread.
  ~server();

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound port (the kernel's choice when options.port was 0).
  uint16_t port() const;

  /// Stops accepting, interrupts every waiting request, closes every
  /// connection and waits for their threads. Idempotent.
  void stop();

  /// The `GET /_sim/log` document.
  std::string log_json() const;

  /// What `POST /_sim/reset` does: clears the log, resets the per-model
  /// request counters, restarts outage windows and the random draws.
  void reset();

  struct impl; ///< implementation detail (sim_internal.hpp)

private:
  std::unique_ptr<impl> impl_;
};

} // namespace pgw::sim
