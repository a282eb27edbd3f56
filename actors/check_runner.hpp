#pragma once

/// Where structured-output checks run (SPEC §10). Checking one answer is
/// bounded, not cheap: a large answer against a schema of patterns, or of
/// wide fan-out, may take up to about a second (actors/structured_checks.cpp
/// bounds the pattern work to ~0.8 s, actors/structured_schema.hpp the
/// subschema checks). Inside an attempt actor that second holds one of CAF's
/// scheduler threads — by default the only one — and with it every other
/// call of the process: their timers, hedges and answers. A gateway given a
/// runner hands every check to it and the attempt waits for the result as a
/// message; without one (the actor tests, on CAF's test coordinator) checks
/// run inside the attempt.

#include <cstddef>
#include <functional>
#include <memory>

namespace pgw {

class check_runner {
public:
  virtual ~check_runner() = default;

  /// Runs `task` soon, on a thread that is not one of CAF's (the
  /// interface of `io_pool`: actors/backend_call.hpp's `run` takes either).
  virtual void submit(std::function<void()> task) = 0;
};

using check_runner_ptr = std::shared_ptr<check_runner>;

/// Runs checks on a pool of the project's own threads, at most
/// `max_threads` of them (0: as many as the machine has cores, at least 2),
/// with stacks as large as a CAF worker's (valijson recurses once per schema
/// level); idle threads exit. Checks are CPU work: past the bound they wait
/// in order rather than start threads that would only share the cores (and
/// each reserve a stack).
check_runner_ptr make_pool_check_runner(size_t max_threads = 0);

/// The process's runner: one `make_pool_check_runner()` for every gateway
/// that asks, so that checks of all scopes together use at most one thread
/// per core. Made on first use; it ends when the last holder lets it go,
/// and the next call makes a new one.
check_runner_ptr process_check_runner();

} // namespace pgw
