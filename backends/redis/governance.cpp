#include "backends/redis/governance.hpp"

#include "backends/redis/breaker.hpp"
#include "backends/redis/limiter.hpp"
#include "messages/errors.hpp"

#include <utility>
#include <vector>

namespace pgw {

namespace {

/// breaker.lua and limiter.lua as functions, then governance.lua.
const redis_script& governance_script() {
  static const redis_script script{
    "local function breaker_op(KEYS, ARGV)\n"
    + detail::embedded_lua("breaker.lua")
    + "\nend\nlocal function limiter_op(KEYS, ARGV)\n"
    + detail::embedded_lua("limiter.lua") + "\nend\n"
    + detail::embedded_lua("governance.lua")};
  return script;
}

caf::error bad_reply(const char* what) {
  return make_error(error_code::governance_unavailable,
                    std::string{"redis governance: unexpected reply to "}
                      + what);
}

class redis_governance_pair final : public governance_pair {
public:
  redis_governance_pair(redis_client_ptr client, const std::string& prefix,
                        limiter_limits limits, breaker_settings settings)
    : client_(std::move(client)),
      limiter_(prefix, std::move(limits)),
      breaker_(prefix, std::move(settings)) {
    keys_ = breaker_.keys();
    keys_.insert(keys_.end(), limiter_.keys().begin(), limiter_.keys().end());
  }

  caf::expected<std::pair<breaker_entry, acquire_result>>
  enter_and_acquire(int64_t est, double) override {
    auto r = run("admit", breaker_.args("enter"),
                 limiter_.acquire_args(est, detail::not_after_us(*client_)));
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
  finish(uint64_t epoch, breaker_feed feed, const std::string& permit_id,
         int64_t actual, double) override {
    auto n = limiter_.permit_number(permit_id);
    // A permit of another prefix is unknown here: the outcome still counts.
    auto r = run("finish", breaker_.record_args(epoch, feed),
                 n.empty() ? limiter_.args("release", {"0"})
                           : limiter_.settle_release_args(n, actual));
    if (!r)
      return std::move(r.error());
    if (n.empty())
      return std::make_pair(false, false);
    return detail::redis_limiter_calls::settle_release_reply(*r);
  }

private:
  caf::expected<redis_reply> run(const char* op,
                                 const std::vector<std::string>& breaker_args,
                                 const std::vector<std::string>& limiter_args) {
    std::vector<std::string> args;
    args.reserve(2 + breaker_args.size() + limiter_args.size());
    args.emplace_back(op);
    args.push_back(std::to_string(breaker_args.size()));
    args.insert(args.end(), breaker_args.begin(), breaker_args.end());
    args.insert(args.end(), limiter_args.begin(), limiter_args.end());
    return client_->eval(governance_script(), keys_, args);
  }

  redis_client_ptr client_;
  detail::redis_limiter_calls limiter_;
  detail::redis_breaker_calls breaker_;
  std::vector<std::string> keys_;
};

} // namespace

governance_pair_ptr make_redis_governance_pair(redis_client_ptr client,
                                               std::string key_prefix,
                                               limiter_limits limits,
                                               breaker_settings settings) {
  return std::make_shared<redis_governance_pair>(std::move(client),
                                                 key_prefix,
                                                 std::move(limits),
                                                 std::move(settings));
}

} // namespace pgw
