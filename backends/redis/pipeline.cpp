#include "backends/redis/pipeline.hpp"

#include "messages/errors.hpp"

#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <pthread.h>

namespace pgw {

namespace {

struct job {
  redis_client::script_call call;
  redis_pipeline::reply_fn done;
};

} // namespace

/// Shared by the pipeline and its thread: the thread keeps it alive when
/// the pipeline is destroyed from one of its reply functions.
struct redis_pipeline::core {
  redis_client_ptr client;
  size_t max_batch;
  mutable std::mutex mtx;
  std::condition_variable cv;
  std::deque<job> jobs;
  bool stop = false;
  counts sent;
  std::thread thread;

  static void run(const std::shared_ptr<core>& c) {
    for (;;) {
      std::vector<job> batch;
      {
        std::unique_lock<std::mutex> guard{c->mtx};
        c->cv.wait(guard, [&] { return c->stop || !c->jobs.empty(); });
        if (c->stop)
          break;
        auto n = std::min(c->jobs.size(), c->max_batch);
        batch.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(c->jobs.front()));
          c->jobs.pop_front();
        }
        ++c->sent.batches;
        c->sent.calls += n;
      }
      std::vector<redis_client::script_call> calls;
      calls.reserve(batch.size());
      for (auto& j : batch)
        calls.push_back(std::move(j.call));
      auto replies = c->client->eval_batch(calls);
      for (size_t i = 0; i < batch.size(); ++i)
        batch[i].done(std::move(replies[i]));
    }
    // Stopped: what is still queued is answered, not lost.
    std::deque<job> left;
    {
      std::lock_guard<std::mutex> guard{c->mtx};
      left.swap(c->jobs);
    }
    for (auto& j : left)
      j.done(make_error(error_code::governance_unavailable,
                        "redis " + c->client->endpoint()
                          + ": the pipeline stopped before the call was sent"));
  }
};

redis_pipeline::redis_pipeline(redis_client_ptr client, size_t max_batch)
  : core_(std::make_shared<core>()) {
  core_->client = std::move(client);
  core_->max_batch = std::max<size_t>(max_batch, 1);
  // The thread takes no signal (a signal watch may expect them blocked).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  core_->thread = std::thread([c = core_] { core::run(c); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

redis_pipeline::~redis_pipeline() {
  {
    std::lock_guard<std::mutex> guard{core_->mtx};
    core_->stop = true;
  }
  core_->cv.notify_one();
  if (core_->thread.get_id() == std::this_thread::get_id())
    core_->thread.detach(); // a reply function released the last owner
  else
    core_->thread.join();
}

void redis_pipeline::eval(const redis_script& script,
                          std::vector<std::string> keys,
                          std::vector<std::string> args, reply_fn done) {
  bool wake;
  {
    std::lock_guard<std::mutex> guard{core_->mtx};
    if (core_->stop) {
      wake = false;
    } else {
      // One wake for a batch: the thread takes every call queued.
      wake = core_->jobs.empty();
      core_->jobs.push_back(
        job{{&script, std::move(keys), std::move(args)}, std::move(done)});
      done = nullptr;
    }
  }
  if (done) {
    done(make_error(error_code::governance_unavailable,
                    "redis " + core_->client->endpoint()
                      + ": the pipeline is stopped"));
    return;
  }
  // Notified after the lock is released (a woken thread finds it free).
  if (wake)
    core_->cv.notify_one();
}

const redis_client_ptr& redis_pipeline::client() const {
  return core_->client;
}

redis_pipeline::counts redis_pipeline::sent() const {
  std::lock_guard<std::mutex> guard{core_->mtx};
  return core_->sent;
}

} // namespace pgw
