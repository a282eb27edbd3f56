#include "backends/redis/limiter.hpp"

#include "config/limits.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <chrono>
#include <charconv>
#include <utility>
#include <vector>

namespace pgw {

namespace detail {

namespace {

caf::error bad_reply(const std::string& what) {
  return make_error(error_code::governance_unavailable,
                    "redis limiter: unexpected reply to " + what);
}

/// An integer element of an array reply.
bool integer_at(const redis_reply& r, size_t i, int64_t& out) {
  if (i >= r.elements.size()
      || r.elements[i].type != redis_reply::kind::integer)
    return false;
  out = r.elements[i].integer;
  return true;
}

std::string optional_text(const std::optional<int64_t>& x) {
  return x ? std::to_string(*x) : std::string{};
}

} // namespace

const redis_script& limiter_script() {
  static const redis_script script{embedded_lua("limiter.lua")};
  return script;
}

int64_t not_after_us(const redis_client& client) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           (std::chrono::system_clock::now() + client.command_timeout())
             .time_since_epoch())
    .count();
}

redis_limiter_calls::redis_limiter_calls(const std::string& prefix,
                                         limiter_limits limits)
  : limits_(std::move(limits)) {
  auto base = prefix + ":lim:";
  keys_ = {base + "win",  base + "tok",   base + "lease",
           base + "seq",  base + "stats", base + "open"};
  id_prefix_ = limits_.source + "-" + sha1_hex(prefix).substr(0, 8) + "-";
  window_us_ = to_us_text(limits_.window_s);
  lease_us_ = to_us_text(limits_.lease_s);
  retention_ms_ = to_ms_text(
    redis_retention_s(std::max(limits_.lease_s, limits_.window_s)));
}

std::vector<std::string>
redis_limiter_calls::args(const char* op,
                          std::vector<std::string> extra) const {
  std::vector<std::string> out;
  out.reserve(4 + extra.size());
  out.emplace_back(op);
  out.push_back(window_us_);
  out.push_back(lease_us_);
  out.push_back(retention_ms_);
  for (auto& x : extra)
    out.push_back(std::move(x));
  return out;
}

std::vector<std::string>
redis_limiter_calls::acquire_args(int64_t est, int64_t not_after) const {
  return args("acquire", {std::to_string(clamp_tokens(est)),
                          optional_text(limits_.rpm),
                          optional_text(limits_.tpm),
                          optional_text(limits_.max_concurrency),
                          to_us_text(limits_.concurrency_retry_s),
                          std::to_string(not_after)});
}

caf::expected<acquire_result>
redis_limiter_calls::acquire_reply(const redis_reply& r, int64_t est) const {
  int64_t granted = 0;
  if (r.type != redis_reply::kind::array || !integer_at(r, 0, granted)
      || r.elements.size() < 2
      || r.elements[1].type != redis_reply::kind::string)
    return bad_reply("acquire");
  acquire_result result;
  if (granted == 1) {
    result.granted = true;
    result.granted_permit.id = id_prefix_ + r.elements[1].str;
    result.granted_permit.source = limits_.source;
    result.granted_permit.est = clamp_tokens(est);
    return result;
  }
  int64_t retry_us = 0;
  if (!integer_at(r, 2, retry_us))
    return bad_reply("acquire");
  result.reason = r.elements[1].str;
  result.retry_after_s = static_cast<double>(retry_us) / 1e6;
  return result;
}

std::string redis_limiter_calls::permit_number(const std::string& id) const {
  if (id.size() <= id_prefix_.size()
      || id.compare(0, id_prefix_.size(), id_prefix_) != 0)
    return {};
  auto first = id.data() + id_prefix_.size();
  auto last = id.data() + id.size();
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(first, last, n);
  if (ec != std::errc{} || end != last || *first == '0')
    return {};
  return std::string{first, last};
}

std::vector<std::string>
redis_limiter_calls::settle_release_args(const std::string& n,
                                         int64_t actual) const {
  actual = std::max<int64_t>(actual, 0);
  return args("settle_release", {n, std::to_string(clamp_tokens(actual))});
}

caf::expected<std::pair<bool, bool>>
redis_limiter_calls::settle_release_reply(const redis_reply& r) {
  int64_t settled = 0, released = 0;
  if (r.type != redis_reply::kind::array || !integer_at(r, 0, settled)
      || !integer_at(r, 1, released))
    return bad_reply("settle_release");
  return std::make_pair(settled == 1, released == 1);
}

} // namespace detail

namespace {

using detail::redis_limiter_calls;

class redis_limiter final : public limiter_backend {
public:
  redis_limiter(redis_client_ptr client, std::string prefix,
                limiter_limits limits)
    : client_(std::move(client)), calls_(prefix, std::move(limits)) {
    // nop
  }

  caf::expected<acquire_result> try_acquire(int64_t est, double) override {
    // Not after the moment this client stops waiting for the answer: a late
    // run (Redis stalled, the command still in its socket buffer) is a no-op
    // instead of a permit nobody settles.
    auto r = run(calls_.acquire_args(est, detail::not_after_us(*client_)));
    if (!r)
      return std::move(r.error());
    return calls_.acquire_reply(*r, est);
  }

  caf::expected<bool> settle(const std::string& permit_id, int64_t actual,
                             double) override {
    auto n = calls_.permit_number(permit_id);
    if (n.empty())
      return false; // not issued under this prefix: nothing to change
    actual = std::max<int64_t>(actual, 0);
    return flag(run(calls_.args("settle",
                                {n, std::to_string(clamp_tokens(actual))})),
                "settle");
  }

  caf::expected<bool> release(const std::string& permit_id, double) override {
    auto n = calls_.permit_number(permit_id);
    if (n.empty())
      return false;
    return flag(run(calls_.args("release", {n})), "release");
  }

  caf::expected<std::pair<bool, bool>>
  settle_and_release(const std::string& permit_id, int64_t actual,
                     double) override {
    auto n = calls_.permit_number(permit_id);
    if (n.empty())
      return std::make_pair(false, false);
    auto r = run(calls_.settle_release_args(n, actual));
    if (!r)
      return std::move(r.error());
    return redis_limiter_calls::settle_release_reply(*r);
  }

  caf::expected<limiter_status> status(double) override {
    auto r = run(calls_.args("status"));
    if (!r)
      return std::move(r.error());
    int64_t v[10];
    for (size_t i = 0; i < 10; ++i)
      if (r->type != redis_reply::kind::array
          || !detail::integer_at(*r, i, v[i]))
        return detail::bad_reply("status");
    auto st = limiter_status_of(calls_.limits());
    st.rpm_used = v[0];
    st.tpm_used = v[1];
    st.in_flight = v[2];
    st.acquired = static_cast<uint64_t>(v[3]);
    st.settled = static_cast<uint64_t>(v[4]);
    st.released = static_cast<uint64_t>(v[5]);
    st.refused_rpm = static_cast<uint64_t>(v[6]);
    st.refused_tpm = static_cast<uint64_t>(v[7]);
    st.refused_concurrency = static_cast<uint64_t>(v[8]);
    st.leases_expired = static_cast<uint64_t>(v[9]);
    return st;
  }

private:
  caf::expected<redis_reply> run(const std::vector<std::string>& args) {
    return client_->eval(detail::limiter_script(), calls_.keys(), args);
  }

  static caf::expected<bool> flag(caf::expected<redis_reply> r,
                                  const char* what) {
    if (!r)
      return std::move(r.error());
    if (r->type != redis_reply::kind::integer)
      return detail::bad_reply(what);
    return r->integer == 1;
  }

  redis_client_ptr client_;
  redis_limiter_calls calls_;
};

} // namespace

limiter_backend_ptr make_redis_limiter(redis_client_ptr client,
                                       std::string key_prefix,
                                       limiter_limits limits) {
  return std::make_unique<redis_limiter>(std::move(client),
                                         std::move(key_prefix),
                                         std::move(limits));
}

} // namespace pgw
