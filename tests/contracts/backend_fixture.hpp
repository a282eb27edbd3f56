#pragma once

/// The backends every contract case runs against, and the small drivers the
/// cases use. A case is written once as
///
///   TEST_CASE_TEMPLATE("limiter: ...", B, PGW_CONTRACT_BACKENDS) {
///     B fx;
///     auto lim = make_limiter(fx, limits);
///     ...
///   }
///
/// and doctest instantiates it per backend ("limiter: ...<memory>"), so each
/// backend is its own CTest entry and a failure names its backend.
///
/// A backend fixture provides:
///   static constexpr const char* name;
///   limiter_backend_ptr make_limiter(limiter_limits);
///   breaker_backend_ptr make_breaker(breaker_settings);
///   cache_backend_ptr make_cache(cache_limits);
///   double now();               // the clock the cases pass as `now_s`
///   void advance(double s);     // lets `s` seconds pass
/// Time comes from `virtual_clock` (a number the case advances: the memory
/// backend reads `now_s`) or `real_clock` (steady clock and real sleeps: for
/// a backend that ignores `now_s` and reads its own clock, like Redis).
///
/// Cases are written for both clocks: durations of at most ~3 s per case,
/// windows of 1 s, cooldowns of 0.2-0.5 s, and time checks with a margin
/// of `margin_s` on either side.
///
/// Adding a backend (as `redis_backend` below was added):
///   1. a struct `x_backend : real_clock` (or `virtual_clock`) below with
///      `name` and the two factories (each fixture gets its own key
///      namespace, so cases do not see each other's state);
///   2. `TYPE_TO_STRING_AS("x", pgw::contract::x_backend);`
///   3. append it to PGW_CONTRACT_BACKENDS.
/// The Redis entry starts its own redis-server (tests/fixtures/
/// redis_process.hpp; `redis-server` on PATH or $PGW_REDIS_SERVER) and
/// runs every case on the real clock (about 20 s).
/// Configure with -DCMAKE_CXX_FLAGS=-DPGW_CONTRACT_REAL_TIME_MEMORY to also
/// run every case against the memory backend on the real clock: the whole
/// suite as a real-time backend sees it (about 17 s of sleeps).

#include "backends/breaker.hpp"
#include "backends/cache.hpp"
#include "backends/limiter.hpp"
#include "backends/redis/breaker.hpp"
#include "backends/redis/cache.hpp"
#include "backends/redis/limiter.hpp"
#include "fixtures/redis_process.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <utility>

namespace pgw::contract {

/// Tolerance of every time check (a real sleep overshoots a little).
inline constexpr double margin_s = 0.05;

// -- clocks -------------------------------------------------------------------

/// A clock the case advances; nothing sleeps.
class virtual_clock {
public:
  double now() const {
    return now_;
  }

  void advance(double seconds) {
    now_ += seconds;
  }

private:
  // Not a multiple of typical half-windows: bucket edges fall mid-case, as
  // they do on a real clock.
  double now_ = 1000.37;
};

/// The steady clock; `advance` really sleeps.
class real_clock {
public:
  double now() const {
    using seconds = std::chrono::duration<double>;
    return seconds(std::chrono::steady_clock::now().time_since_epoch())
      .count();
  }

  void advance(double seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};

// -- backends -----------------------------------------------------------------

/// The in-process backends on a virtual clock.
struct memory_backend : virtual_clock {
  static constexpr const char* name = "memory";

  limiter_backend_ptr make_limiter(limiter_limits limits) {
    return make_memory_limiter(std::move(limits));
  }

  breaker_backend_ptr make_breaker(breaker_settings settings) {
    return make_memory_breaker(std::move(settings));
  }

  cache_backend_ptr make_cache(cache_limits limits) {
    return make_memory_cache(limits);
  }
};

/// The in-process backends on the real clock: the cases as a real-time
/// backend sees them.
struct memory_real_time_backend : real_clock {
  static constexpr const char* name = "memory_real_time";

  limiter_backend_ptr make_limiter(limiter_limits limits) {
    return make_memory_limiter(std::move(limits));
  }

  breaker_backend_ptr make_breaker(breaker_settings settings) {
    return make_memory_breaker(std::move(settings));
  }

  cache_backend_ptr make_cache(cache_limits limits) {
    return make_memory_cache(limits);
  }
};

/// The Redis backends on the real clock. One redis-server for the whole
/// test process (`shared_redis`, started on first use on a free loopback
/// port) and one client; every limiter or breaker a case makes gets a key
/// prefix of its own, so no case sees another's state.
struct redis_backend : real_clock {
  static constexpr const char* name = "redis";

  limiter_backend_ptr make_limiter(limiter_limits limits) {
    return make_redis_limiter(client(), fresh_prefix(), std::move(limits));
  }

  breaker_backend_ptr make_breaker(breaker_settings settings) {
    return make_redis_breaker(client(), fresh_prefix(), std::move(settings));
  }

  cache_backend_ptr make_cache(cache_limits limits) {
    return make_redis_cache(client(), fresh_prefix(), limits);
  }

  static redis_client_ptr client() {
    static const redis_client_ptr instance = [] {
      auto c = make_redis_client(test::shared_redis().url());
      REQUIRE_MESSAGE(c, describe(c.error()));
      return *c;
    }();
    return instance;
  }

  /// "pgw-contract:<pid>:<n>", unique in this process and among processes
  /// sharing a server.
  static std::string fresh_prefix() {
    static std::atomic<uint64_t> next{0};
    return "pgw-contract:" + std::to_string(::getpid()) + ":"
           + std::to_string(++next);
  }
};

// -- drivers ------------------------------------------------------------------

/// A limiter under test: every call passes the fixture's clock and
/// requires the backend to answer.
template <class Backend>
class limiter_driver {
public:
  limiter_driver(Backend& fx, limiter_limits limits)
    : fx_(fx), impl_(fx.make_limiter(std::move(limits))) {
    REQUIRE(impl_ != nullptr);
  }

  acquire_result acquire(int64_t est) {
    auto r = impl_->try_acquire(est, fx_.now());
    REQUIRE_MESSAGE(r, "try_acquire failed: ", describe(r.error()));
    return *r;
  }

  /// Acquires and requires a grant.
  permit grant(int64_t est) {
    auto r = acquire(est);
    INFO("refused: ", r.reason, ", retry after ", r.retry_after_s);
    REQUIRE(r.granted);
    return r.granted_permit;
  }

  bool settle(const std::string& id, int64_t actual) {
    auto r = impl_->settle(id, actual, fx_.now());
    REQUIRE_MESSAGE(r, "settle failed: ", describe(r.error()));
    return *r;
  }

  bool settle(const permit& p, int64_t actual) {
    return settle(p.id, actual);
  }

  bool release(const std::string& id) {
    auto r = impl_->release(id, fx_.now());
    REQUIRE_MESSAGE(r, "release failed: ", describe(r.error()));
    return *r;
  }

  bool release(const permit& p) {
    return release(p.id);
  }

  limiter_status status() {
    auto r = impl_->status(fx_.now());
    REQUIRE_MESSAGE(r, "status failed: ", describe(r.error()));
    return *r;
  }

private:
  Backend& fx_;
  limiter_backend_ptr impl_;
};

/// A breaker under test, as the limiter driver.
template <class Backend>
class breaker_driver {
public:
  breaker_driver(Backend& fx, breaker_settings settings)
    : fx_(fx), impl_(fx.make_breaker(std::move(settings))) {
    REQUIRE(impl_ != nullptr);
  }

  breaker_entry enter() {
    auto r = impl_->enter(fx_.now());
    REQUIRE_MESSAGE(r, "enter failed: ", describe(r.error()));
    return *r;
  }

  void record(uint64_t epoch, breaker_feed feed) {
    auto err = impl_->record(epoch, feed, fx_.now());
    REQUIRE_MESSAGE(!err, "record failed: ", describe(err));
  }

  void release_probe(uint64_t epoch) {
    auto err = impl_->release_probe(epoch, fx_.now());
    REQUIRE_MESSAGE(!err, "release_probe failed: ", describe(err));
  }

  /// One attempt through a closed circuit: enter (required to be let in,
  /// not as a probe) and record `feed` with the entry's epoch.
  void attempt(breaker_feed feed) {
    auto e = enter();
    REQUIRE(e.allowed);
    REQUIRE_FALSE(e.probe);
    record(e.epoch, feed);
  }

  /// `attempt(feed)` `n` times.
  void attempts(int n, breaker_feed feed) {
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      attempt(feed);
    }
  }

  /// Enters and requires the probe lease.
  breaker_entry probe() {
    auto e = enter();
    INFO("refused, retry after ", e.retry_after_s);
    REQUIRE(e.allowed);
    REQUIRE(e.probe);
    return e;
  }

  breaker_status status() {
    auto r = impl_->status(fx_.now());
    REQUIRE_MESSAGE(r, "status failed: ", describe(r.error()));
    return *r;
  }

  std::string state() {
    return status().state;
  }

private:
  Backend& fx_;
  breaker_backend_ptr impl_;
};

template <class Backend>
limiter_driver<Backend> make_limiter(Backend& fx, limiter_limits limits) {
  return {fx, std::move(limits)};
}

template <class Backend>
breaker_driver<Backend> make_breaker(Backend& fx, breaker_settings settings) {
  return {fx, std::move(settings)};
}

} // namespace pgw::contract

TYPE_TO_STRING_AS("memory", pgw::contract::memory_backend);
TYPE_TO_STRING_AS("memory_real_time", pgw::contract::memory_real_time_backend);
TYPE_TO_STRING_AS("redis", pgw::contract::redis_backend);

/// Every backend the contract cases run against.
#ifdef PGW_CONTRACT_REAL_TIME_MEMORY
#  define PGW_CONTRACT_BACKENDS                                                \
    pgw::contract::memory_backend, pgw::contract::memory_real_time_backend,   \
    pgw::contract::redis_backend
#else
#  define PGW_CONTRACT_BACKENDS                                                \
    pgw::contract::memory_backend, pgw::contract::redis_backend
#endif

/// Checks that a duration is `expected` within `margin_s`.
#define CHECK_NEAR(actual, expected)                                           \
  do {                                                                         \
    const double pgw_actual_ = (actual);                                       \
    const double pgw_expected_ = (expected);                                   \
    INFO(#actual " = ", pgw_actual_, ", expected ", pgw_expected_, " +- ",     \
         ::pgw::contract::margin_s);                                           \
    CHECK(std::abs(pgw_actual_ - pgw_expected_)                                \
          <= ::pgw::contract::margin_s);                                       \
  } while (false)
