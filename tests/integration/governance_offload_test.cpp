// Limiter and breaker actors over a blocking backend: calls run on the
// offload threads, and a settle or release that fails while the backend is
// down goes through once it is back.

#include "actors/breaker.hpp"
#include "actors/limiter.hpp"
#include "backends/governance.hpp"
#include "fixtures/eventually.hpp"
#include "messages/registry.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using namespace pgw;

namespace {

struct config : caf::actor_system_config {
  config() {
    pgw::add_message_types(*this);
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

/// A memory limiter that fails every call while `down` is set, and records
/// which thread ran it.
class switchable_limiter : public limiter_backend {
public:
  explicit switchable_limiter(limiter_limits limits)
    : inner_(make_memory_limiter(std::move(limits))) {
    // nop
  }

  std::atomic<bool> down{false};
  std::atomic<std::thread::id> last_thread{};

  caf::expected<acquire_result> try_acquire(int64_t est, double now) override {
    last_thread = std::this_thread::get_id();
    if (down)
      return make_error(error_code::governance_unavailable, "backend down");
    return inner_->try_acquire(est, now);
  }

  caf::expected<bool> settle(const std::string& id, int64_t actual,
                             double now) override {
    if (down)
      return make_error(error_code::governance_unavailable, "backend down");
    return inner_->settle(id, actual, now);
  }

  caf::expected<bool> release(const std::string& id, double now) override {
    if (down)
      return make_error(error_code::governance_unavailable, "backend down");
    return inner_->release(id, now);
  }

  caf::expected<limiter_status> status(double now) override {
    if (down)
      return make_error(error_code::governance_unavailable, "backend down");
    return inner_->status(now);
  }

private:
  limiter_backend_ptr inner_;
};

/// A governance pair whose first attempt end fails (backend down). When
/// `pipelined`, like Redis' with its pipeline: its `_async` steps answer
/// from threads of its own and its blocking steps must never be asked.
/// Otherwise its steps block (the base class's `_async` forms run them)
/// and must run on the limiter's offload pool.
class threaded_pair : public governance_pair {
public:
  explicit threaded_pair(bool pipelined) : pipelined_(pipelined) {
    // nop
  }

  std::atomic<int> blocking{0};
  std::atomic<int> admits{0};
  std::atomic<int> finishes{0};
  std::atomic<int> finished_ok{0};
  std::atomic<bool> foreign_threads{true};
  const std::thread::id test_thread = std::this_thread::get_id();

  ~threaded_pair() override {
    join();
  }

  void join() {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& t : threads_)
      t.join();
    threads_.clear();
  }

  caf::expected<admission> enter_and_acquire(int64_t est, double) override {
    ++blocking;
    if (pipelined_)
      return make_error(error_code::governance_unavailable, "blocking step");
    return admit(est);
  }

  caf::expected<std::pair<bool, bool>>
  finish(uint64_t, breaker_feed, const std::string&, int64_t,
         double) override {
    ++blocking;
    if (pipelined_)
      return make_error(error_code::governance_unavailable, "blocking step");
    return end(++finishes);
  }

  bool pipelined() const override {
    return pipelined_;
  }

  void enter_and_acquire_async(int64_t est, double now_s,
                               admission_fn done) override {
    if (!pipelined_)
      return governance_pair::enter_and_acquire_async(est, now_s,
                                                      std::move(done));
    later([this, est, done = std::move(done)] { done(admit(est)); });
  }

  void finish_async(uint64_t epoch, breaker_feed feed, const std::string& id,
                    int64_t actual, double now_s, finish_fn done) override {
    if (!pipelined_)
      return governance_pair::finish_async(epoch, feed, id, actual, now_s,
                                           std::move(done));
    later([this, n = ++finishes, done = std::move(done)] { done(end(n)); });
  }

private:
  void note_thread() {
    if (std::this_thread::get_id() == test_thread)
      foreign_threads = false;
  }

  admission admit(int64_t est) {
    note_thread();
    ++admits;
    breaker_entry entry;
    entry.allowed = true;
    entry.epoch = 7;
    acquire_result r;
    r.granted = true;
    r.granted_permit = permit{"p-1", "a", est};
    return {entry, r};
  }

  /// The `n`th attempt end: the first fails.
  caf::expected<std::pair<bool, bool>> end(int n) {
    note_thread();
    if (n == 1)
      return make_error(error_code::governance_unavailable, "down");
    ++finished_ok;
    return std::make_pair(true, true);
  }

  template <class F>
  void later(F f) {
    std::lock_guard<std::mutex> guard{mtx_};
    threads_.emplace_back(std::move(f));
  }

  bool pipelined_;
  std::mutex mtx_;
  std::vector<std::thread> threads_;
};

/// An admission and an attempt's end through a limiter over `pair`, with an
/// offload pool: the admission is answered, the failed end retried until
/// taken.
void admit_and_finish(threaded_pair& pair, std::shared_ptr<io_pool> pool) {
  config cfg;
  caf::actor_system sys{cfg};
  limiter_limits limits;
  limits.source = "a";
  auto lim = sys.spawn(governed_limiter,
                       std::shared_ptr<limiter_backend>{
                         make_memory_limiter(limits)},
                       std::move(pool),
                       governance_pair_ptr{&pair, [](auto*) {}},
                       breaker_actor{});
  caf::scoped_actor self{sys};
  self->request(lim, caf::infinite, atom::acquire_v, int64_t{100},
                atom::enter_v)
    .receive(
      [&](breaker_entry& e, acquire_result& r) {
        CHECK(e.allowed);
        CHECK(e.epoch == 7);
        CHECK(r.granted);
        CHECK(r.granted_permit.id == "p-1");
      },
      [](caf::error& err) { FAIL(to_string(err)); });
  self->send(lim, atom::settle_v, std::string{"p-1"}, int64_t{42},
             atom::release_v, uint64_t{7}, outcome::ok);
  // The first end fails; the limiter tries again after its retry delay.
  CHECK(test::eventually([&] { return pair.finished_ok.load() == 1; },
                         std::chrono::seconds(5)));
  caf::anon_send_exit(lim, caf::exit_reason::user_shutdown);
  self->wait_for(lim);
  pair.join();
}

} // namespace

TEST_CASE("a pipelined governance pair is asked without the offload pool, "
          "its replies come back as messages and a failed attempt end is "
          "retried") {
  threaded_pair pair{true};
  auto pool = std::make_shared<io_pool>();
  admit_and_finish(pair, pool);
  CHECK(pair.admits == 1);
  CHECK(pair.finishes == 2);
  CHECK(pair.blocking == 0);
  CHECK(pair.foreign_threads);
  CHECK(pool->threads() == 0); // nothing ran on the offload pool
}

TEST_CASE("a governance pair whose steps block is asked on the offload pool "
          "and a failed attempt end is retried") {
  threaded_pair pair{false};
  auto pool = std::make_shared<io_pool>();
  admit_and_finish(pair, pool);
  CHECK(pair.admits == 1);
  CHECK(pair.finishes == 2);
  CHECK(pair.blocking == 3); // the admission and both ends, blocking
  CHECK(pair.foreign_threads);
  CHECK(pool->threads() > 0);
}

TEST_CASE("an offloaded limiter answers from its own threads and retries settlement until the backend is back") {
  config cfg;
  caf::actor_system sys{cfg};
  limiter_limits limits;
  limits.source = "a";
  limits.tpm = 10000;
  auto backend = std::make_shared<switchable_limiter>(limits);
  auto pool = std::make_shared<io_pool>();
  auto lim = sys.spawn(limiter, std::shared_ptr<limiter_backend>{backend},
                       pool);
  caf::scoped_actor self{sys};
  permit p;
  self->request(lim, caf::infinite, atom::acquire_v, int64_t{100})
    .receive([&](acquire_result& r) {
               REQUIRE(r.granted);
               p = r.granted_permit;
             },
             [](caf::error& err) { FAIL(to_string(err)); });
  // The backend call did not run on this thread nor on a CAF worker.
  CHECK(backend->last_thread.load() != std::this_thread::get_id());
  // Down: acquire fails with governance_unavailable; settle/release queue.
  backend->down = true;
  self->request(lim, caf::infinite, atom::acquire_v, int64_t{100})
    .receive([](acquire_result&) { FAIL("acquired while down"); },
             [](caf::error& err) {
               CHECK(code_of(err) == error_code::governance_unavailable);
             });
  self->send(lim, atom::settle_v, p.id, int64_t{42});
  self->send(lim, atom::release_v, p.id);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  backend->down = false;
  // Back: the retried settle and release went through.
  limiter_status st;
  for (int i = 0; i < 100; ++i) {
    self->request(lim, caf::infinite, atom::status_v)
      .receive([&](limiter_status& s) { st = s; },
               [](caf::error& err) { FAIL(to_string(err)); });
    if (st.settled == 1 && st.released == 1)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(st.settled == 1);
  CHECK(st.released == 1);
  CHECK(st.tpm_used == 42);
  CHECK(st.in_flight == 0);
  caf::anon_send_exit(lim, caf::exit_reason::user_shutdown);
}

TEST_CASE("a limiter told to exit drains its pending settlements first, for "
          "at most 2 s") {
  config cfg;
  caf::actor_system sys{cfg};
  limiter_limits limits;
  limits.source = "a";
  limits.tpm = 10000;
  auto pool = std::make_shared<io_pool>();
  caf::scoped_actor self{sys};
  auto grant = [&](const caf::actor& lim) {
    permit p;
    self->request(lim, caf::infinite, atom::acquire_v, int64_t{100})
      .receive([&](acquire_result& r) { p = r.granted_permit; },
               [](caf::error& err) { FAIL(to_string(err)); });
    return p;
  };
  auto wait_down = [&](const caf::actor& lim, std::chrono::seconds limit) {
    auto t0 = std::chrono::steady_clock::now();
    bool down = false;
    self->receive([&](caf::down_msg& msg) { down = msg.source == lim; },
                  caf::after(limit) >> [] {});
    CHECK(down);
    return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                         - t0)
      .count();
  };
  SUBCASE("the backend comes back: the settlement lands, then it exits") {
    auto backend = std::make_shared<switchable_limiter>(limits);
    auto lim = caf::actor_cast<caf::actor>(
      sys.spawn(limiter, std::shared_ptr<limiter_backend>{backend}, pool));
    self->monitor(lim);
    auto p = grant(lim);
    backend->down = true;
    self->send(lim, atom::settle_v, p.id, int64_t{42}, atom::release_v);
    self->send_exit(lim, caf::exit_reason::user_shutdown);
    // Still there while the settlement is pending.
    bool early = false;
    self->receive([&](caf::down_msg&) { early = true; },
                  caf::after(std::chrono::milliseconds(300)) >> [] {});
    CHECK_FALSE(early);
    backend->down = false;
    CHECK(wait_down(lim, std::chrono::seconds(3)) < 1.5);
    auto st = backend->status(0);
    REQUIRE(st);
    CHECK(st->settled == 1);
    CHECK(st->released == 1);
  }
  SUBCASE("the backend stays down: it gives up after the drain limit") {
    auto backend = std::make_shared<switchable_limiter>(limits);
    auto lim = caf::actor_cast<caf::actor>(
      sys.spawn(limiter, std::shared_ptr<limiter_backend>{backend}, pool));
    self->monitor(lim);
    auto p = grant(lim);
    backend->down = true;
    self->send(lim, atom::settle_v, p.id, int64_t{42});
    auto t0 = std::chrono::steady_clock::now();
    self->send_exit(lim, caf::exit_reason::user_shutdown);
    wait_down(lim, std::chrono::seconds(5));
    auto took = std::chrono::duration<double>(std::chrono::steady_clock::now()
                                              - t0)
                  .count();
    CHECK(took >= 1.9);
    CHECK(took < 4.0);
  }
}
