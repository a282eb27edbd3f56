// The Redis pipeline (backends/redis/pipeline.hpp, issue 17) against real
// redis-server processes: calls queued while a batch is on the wire go out
// together and each reply reaches its own caller; NOSCRIPT in a batch;
// a dead server answers every call (none lost) and a restarted one is
// found again; calls still queued when the pipeline goes are answered.

#include "backends/redis/client.hpp"
#include "backends/redis/pipeline.hpp"
#include "fixtures/eventually.hpp"
#include "fixtures/redis_process.hpp"
#include "messages/errors.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

using namespace pgw;
using namespace pgw::test;
using namespace std::chrono_literals;

namespace {

const redis_script& echo_script() {
  static const redis_script script{"return KEYS[1] .. ':' .. ARGV[1]"};
  return script;
}

/// The replies of the calls of one case, by the argument they were sent
/// with ("error: ..." for an error), filled on the pipeline's thread. The
/// record is shared with the reply functions, so it outlives the last one
/// even when the case goes on first.
class replies {
public:
  redis_pipeline::reply_fn to(const std::string& arg) {
    return [st = st_, arg](caf::expected<redis_reply> r) {
      auto text = r ? r->str : "error: " + describe(r.error());
      std::lock_guard<std::mutex> guard{st->mtx};
      st->by_arg[arg] = text;
      st->cv.notify_all();
    };
  }

  /// Waits (at most 10 s) until `n` replies came.
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> guard{st_->mtx};
    return st_->cv.wait_for(guard, 10s,
                            [&] { return st_->by_arg.size() >= n; });
  }

  std::string of(const std::string& arg) {
    std::lock_guard<std::mutex> guard{st_->mtx};
    return st_->by_arg[arg];
  }

  std::map<std::string, std::string> all() {
    std::lock_guard<std::mutex> guard{st_->mtx};
    return st_->by_arg;
  }

private:
  struct state {
    std::mutex mtx;
    std::condition_variable cv;
    std::map<std::string, std::string> by_arg;
  };
  std::shared_ptr<state> st_ = std::make_shared<state>();
};

redis_client_ptr client_of(const redis_process& server,
                           redis_client_options opts = {}) {
  auto ep = parse_redis_url(server.url());
  REQUIRE(ep);
  return make_redis_client(*ep, opts);
}

/// Queues `n` echo calls ("b0" ... ) from inside the reply of a first call
/// ("a"): the pipeline's thread is busy handing out that reply, so the `n`
/// are all queued before it looks again and go out as one batch.
void queue_batch_behind_first(redis_pipeline& p, replies& got, int n) {
  p.eval(echo_script(), {"k"}, {"a"},
         [&p, &got, n, first = got.to("a")](caf::expected<redis_reply> r) {
           for (int i = 0; i < n; ++i) {
             auto arg = "b" + std::to_string(i);
             p.eval(echo_script(), {"k"}, {arg}, got.to(arg));
           }
           first(std::move(r));
         });
}

/// The first call's reply and the `n` queued behind it each reached its
/// own caller.
void check_echoes(replies& got, int n) {
  REQUIRE(got.wait_for(static_cast<size_t>(n) + 1));
  CHECK(got.of("a") == "k:a");
  for (int i = 0; i < n; ++i)
    CHECK(got.of("b" + std::to_string(i)) == "k:b" + std::to_string(i));
}

/// A counter of Redis' INFO stats section (e.g. total_reads_processed).
int64_t info_stat(redis_client& client, const std::string& name) {
  auto r = client.command({"INFO", "stats"});
  REQUIRE_MESSAGE(r, describe(r.error()));
  auto at = r->str.find(name + ":");
  REQUIRE(at != std::string::npos);
  return std::stoll(r->str.substr(at + name.size() + 1));
}

} // namespace

TEST_CASE("redis pipeline: calls queued behind a batch go out together and "
          "each reply reaches its own caller") {
  redis_process server;
  auto client = client_of(server);
  redis_pipeline p{client};
  REQUIRE(client->command({"CONFIG", "RESETSTAT"}));
  auto reads = info_stat(*client, "total_reads_processed");
  replies got;
  queue_batch_behind_first(p, got, 20);
  check_echoes(got, 20);
  // On the wire too: the twenty reached Redis in one write, not twenty
  // (reads Redis made: the first call's, the batch's, and the INFOs').
  auto reads_for_calls = info_stat(*client, "total_reads_processed") - reads;
  CAPTURE(reads_for_calls);
  CHECK(reads_for_calls < 10);
  auto sent = p.sent();
  CHECK(sent.calls == 21);
  CHECK(sent.batches == 2); // the first call alone, then the twenty
  CHECK(client->stats().failures == 0);
  CHECK(client->stats().connects == 1); // one connection carried them all
}

TEST_CASE("redis pipeline: after SCRIPT FLUSH every call of a batch is "
          "answered (reloaded by EVAL)") {
  redis_process server;
  auto client = client_of(server);
  REQUIRE(client->eval(echo_script(), {"k"}, {"warm"}));
  REQUIRE(client->command({"SCRIPT", "FLUSH"}));
  auto reloads = client->stats().script_reloads;
  redis_pipeline p{client};
  replies got;
  queue_batch_behind_first(p, got, 5);
  check_echoes(got, 5);
  CHECK(client->stats().script_reloads > reloads);
  CHECK(client->stats().failures == 0);
}

TEST_CASE("redis pipeline: a dead server answers every call with "
          "governance_unavailable, and a restarted one is found again") {
  redis_process server;
  redis_client_options opts;
  opts.max_backoff = 200ms;
  auto client = client_of(server, opts);
  redis_pipeline p{client};
  {
    replies got;
    queue_batch_behind_first(p, got, 3);
    REQUIRE(got.wait_for(4));
    CHECK(got.of("b2") == "k:b2");
  }
  server.kill();
  {
    replies got;
    queue_batch_behind_first(p, got, 10);
    REQUIRE(got.wait_for(11)); // none lost
    for (auto& [arg, text] : got.all()) {
      CAPTURE(arg);
      CHECK(text.rfind("error: ", 0) == 0);
      CHECK(text.find("governance_unavailable") != std::string::npos);
      CHECK(text.find("redis 127.0.0.1:") != std::string::npos);
    }
  }
  server.restart();
  // Calls fail fast during the client's backoff, then one reconnects.
  CHECK(eventually(
    [&] {
      replies got;
      p.eval(echo_script(), {"k"}, {"again"}, got.to("again"));
      return got.wait_for(1) && got.of("again") == "k:again";
    },
    5s));
}

TEST_CASE("redis pipeline: calls still queued when it goes are answered, "
          "also when a reply released its last owner") {
  redis_process server;
  auto client = client_of(server);
  auto owner = std::make_shared<redis_pipeline>(client);
  replies got;
  // The first reply queues three more calls, then destroys the pipeline
  // from the pipeline's own thread: the three are answered with an error.
  owner->eval(echo_script(), {"k"}, {"a"},
              [&owner, &got, first = got.to("a")](
                caf::expected<redis_reply> r) {
                for (int i = 0; i < 3; ++i) {
                  auto arg = "b" + std::to_string(i);
                  owner->eval(echo_script(), {"k"}, {arg}, got.to(arg));
                }
                first(std::move(r));
                owner.reset();
              });
  REQUIRE(got.wait_for(4));
  CHECK(got.of("a") == "k:a");
  for (int i = 0; i < 3; ++i) {
    auto text = got.of("b" + std::to_string(i));
    CAPTURE(text);
    CHECK(text.find("governance_unavailable") != std::string::npos);
    CHECK(text.find("pipeline stopped") != std::string::npos);
  }
}
