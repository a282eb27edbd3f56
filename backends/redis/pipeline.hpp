#pragma once

/// A thread that sends the Redis script calls of many callers pipelined
/// (issue 17). A caller queues a call with the function its reply goes to
/// and goes on; the thread takes every call queued (up to a bound), runs
/// them as one `redis_client::eval_batch` on one connection (their
/// commands in one write, the replies read in order) and hands each reply
/// to its function. Calls queued while a batch is on the wire form the
/// next batch: under load one write and one read carry many calls, and no
/// caller holds a thread of its own while Redis works. A call that comes
/// to an idle pipeline goes out at once, as a batch of one.

#include "backends/redis/client.hpp"

#include <caf/expected.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

class redis_pipeline {
public:
  using reply_fn = std::function<void(caf::expected<redis_reply>)>;

  /// Starts the thread; batches hold at most `max_batch` calls.
  explicit redis_pipeline(redis_client_ptr client, size_t max_batch = 128);

  /// Stops the thread once the batch on the wire is answered; calls still
  /// queued get a `governance_unavailable` error. May run on the
  /// pipeline's own thread (a reply function released the last owner).
  ~redis_pipeline();

  redis_pipeline(const redis_pipeline&) = delete;
  redis_pipeline& operator=(const redis_pipeline&) = delete;

  /// Queues `script` with `keys` and `args`; `done` gets the reply, on the
  /// pipeline's thread. `done` must not block (it delays every call after
  /// it); it may release the last owner of this pipeline.
  void eval(const redis_script& script, std::vector<std::string> keys,
            std::vector<std::string> args, reply_fn done);

  const redis_client_ptr& client() const;

  /// Batches sent so far and the calls they carried (for benchmarks and
  /// tests).
  struct counts {
    uint64_t batches = 0;
    uint64_t calls = 0;
  };
  counts sent() const;

private:
  struct core;
  std::shared_ptr<core> core_;
};

} // namespace pgw
