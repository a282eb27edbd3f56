#include "backends/redis/governance.hpp"

#include "backends/redis/breaker.hpp"
#include "backends/redis/limiter.hpp"
#include "messages/errors.hpp"

#include <string>
#include <utility>
#include <vector>

namespace pgw {

namespace {

/// `text` with every `redis.call('TIME')` read through `shared_time()`.
std::string with_shared_time(std::string text) {
  const std::string call = "redis.call('TIME')";
  const std::string shared = "shared_time()";
  for (auto at = text.find(call); at != std::string::npos;
       at = text.find(call, at + shared.size()))
    text.replace(at, call.size(), shared);
  return text;
}

/// breaker.lua and limiter.lua as functions, then governance.lua. Both
/// read Redis TIME through one `shared_time()`: a script runs at one
/// instant, so an attempt's end asks Redis the time once for the
/// breaker's record and the limiter's release, not twice.
const redis_script& governance_script() {
  static const redis_script script{
    "local time_now = nil\n"
    "local function shared_time()\n"
    "  if not time_now then time_now = redis.call('TIME') end\n"
    "  return time_now\n"
    "end\n"
    "local function breaker_op(KEYS, ARGV)\n"
    + with_shared_time(detail::embedded_lua("breaker.lua"))
    + "\nend\nlocal function limiter_op(KEYS, ARGV)\n"
    + with_shared_time(detail::embedded_lua("limiter.lua")) + "\nend\n"
    + detail::embedded_lua("governance.lua")};
  return script;
}

caf::error bad_reply(const char* what) {
  return make_error(error_code::governance_unavailable,
                    std::string{"redis governance: unexpected reply to "}
                      + what);
}

class redis_governance_pair final
  : public governance_pair,
    public std::enable_shared_from_this<redis_governance_pair> {
public:
  redis_governance_pair(redis_client_ptr client, const std::string& prefix,
                        limiter_limits limits, breaker_settings settings,
                        std::shared_ptr<redis_pipeline> pipeline)
    : client_(std::move(client)),
      pipeline_(std::move(pipeline)),
      limiter_(prefix, std::move(limits)),
      breaker_(prefix, std::move(settings)) {
    keys_ = breaker_.keys();
    keys_.insert(keys_.end(), limiter_.keys().begin(), limiter_.keys().end());
  }

  caf::expected<std::pair<breaker_entry, acquire_result>>
  enter_and_acquire(int64_t est, double) override {
    return admitted(client_->eval(governance_script(), keys_, admit_args(est)),
                    est);
  }

  caf::expected<std::pair<bool, bool>>
  finish(uint64_t epoch, breaker_feed feed, const std::string& permit_id,
         int64_t actual, double) override {
    auto n = limiter_.permit_number(permit_id);
    return finished(client_->eval(governance_script(), keys_,
                                  finish_args(epoch, feed, n, actual)),
                    n);
  }

  bool pipelined() const override {
    return pipeline_ != nullptr;
  }

  void enter_and_acquire_async(int64_t est, double now_s,
                               admission_fn done) override {
    if (!pipeline_)
      return done(enter_and_acquire(est, now_s));
    // The reply is read on the pipeline's thread; the pair lives until it.
    pipeline_->eval(governance_script(), keys_, admit_args(est),
                    [self = shared_from_this(), est,
                     done = std::move(done)](caf::expected<redis_reply> r) {
                      done(self->admitted(std::move(r), est));
                    });
  }

  void finish_async(uint64_t epoch, breaker_feed feed,
                    const std::string& permit_id, int64_t actual,
                    double now_s, finish_fn done) override {
    if (!pipeline_)
      return done(finish(epoch, feed, permit_id, actual, now_s));
    auto n = limiter_.permit_number(permit_id);
    pipeline_->eval(governance_script(), keys_,
                    finish_args(epoch, feed, n, actual),
                    [self = shared_from_this(), n,
                     done = std::move(done)](caf::expected<redis_reply> r) {
                      done(self->finished(std::move(r), n));
                    });
  }

private:
  std::vector<std::string> admit_args(int64_t est) const {
    return args("admit", breaker_.args("enter"),
                limiter_.acquire_args(est, detail::not_after_us(*client_)));
  }

  /// A permit of another prefix is unknown here (`n` empty): the outcome
  /// still counts.
  std::vector<std::string> finish_args(uint64_t epoch, breaker_feed feed,
                                       const std::string& n,
                                       int64_t actual) const {
    return args("finish", breaker_.record_args(epoch, feed),
                n.empty() ? limiter_.args("release", {"0"})
                          : limiter_.settle_release_args(n, actual));
  }

  caf::expected<std::pair<breaker_entry, acquire_result>>
  admitted(caf::expected<redis_reply> r, int64_t est) const {
    if (!r)
      return std::move(r.error());
    if (r->type != redis_reply::kind::array || r->elements.size() != 2)
      return bad_reply("admit");
    auto entry = detail::redis_breaker_calls::enter_reply(r->elements[0]);
    if (!entry)
      return std::move(entry.error());
    if (!entry->allowed)
      return std::make_pair(*entry, acquire_result{});
    auto permit = limiter_.acquire_reply(r->elements[1], est);
    if (!permit)
      return std::move(permit.error());
    return std::make_pair(*entry, std::move(*permit));
  }

  caf::expected<std::pair<bool, bool>>
  finished(caf::expected<redis_reply> r, const std::string& n) const {
    if (!r)
      return std::move(r.error());
    if (n.empty())
      return std::make_pair(false, false);
    return detail::redis_limiter_calls::settle_release_reply(*r);
  }

  static std::vector<std::string>
  args(const char* op, const std::vector<std::string>& breaker_args,
       const std::vector<std::string>& limiter_args) {
    std::vector<std::string> out;
    out.reserve(2 + breaker_args.size() + limiter_args.size());
    out.emplace_back(op);
    out.push_back(std::to_string(breaker_args.size()));
    out.insert(out.end(), breaker_args.begin(), breaker_args.end());
    out.insert(out.end(), limiter_args.begin(), limiter_args.end());
    return out;
  }

  redis_client_ptr client_;
  std::shared_ptr<redis_pipeline> pipeline_;
  detail::redis_limiter_calls limiter_;
  detail::redis_breaker_calls breaker_;
  std::vector<std::string> keys_;
};

} // namespace

governance_pair_ptr
make_redis_governance_pair(redis_client_ptr client, std::string key_prefix,
                           limiter_limits limits, breaker_settings settings,
                           std::shared_ptr<redis_pipeline> pipeline) {
  return std::make_shared<redis_governance_pair>(
    std::move(client), key_prefix, std::move(limits), std::move(settings),
    std::move(pipeline));
}

} // namespace pgw
