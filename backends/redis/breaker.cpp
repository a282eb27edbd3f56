#include "backends/redis/breaker.hpp"

#include "messages/errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace pgw {

namespace detail {

namespace {

caf::error bad_reply(const std::string& what) {
  return make_error(error_code::governance_unavailable,
                    "redis breaker: unexpected reply to " + what);
}

bool integer_at(const redis_reply& r, size_t i, int64_t& out) {
  if (r.type != redis_reply::kind::array || i >= r.elements.size()
      || r.elements[i].type != redis_reply::kind::integer)
    return false;
  out = r.elements[i].integer;
  return true;
}

const char* feed_code(breaker_feed feed) {
  switch (feed) {
    case breaker_feed::success:
      return "s";
    case breaker_feed::success_no_count:
      return "n";
    case breaker_feed::failure:
      return "f";
    case breaker_feed::force_open:
      return "d";
    case breaker_feed::none:
      break;
  }
  return "x";
}

} // namespace

const redis_script& breaker_script() {
  static const redis_script script{embedded_lua("breaker.lua")};
  return script;
}

redis_breaker_calls::redis_breaker_calls(const std::string& prefix,
                                         breaker_settings settings)
  : settings_(std::move(settings)) {
  keys_ = {prefix + ":brk"};
  auto longest = std::max({settings_.max_cooldown_s, settings_.window_s,
                           settings_.probe_lease_s});
  common_ = {std::to_string(settings_.threshold),
             to_us_text(settings_.cooldown_s),
             std::to_string(settings_.min_calls),
             fmt::format("{:.17g}", settings_.fail_rate),
             to_us_text(settings_.window_s),
             to_us_text(settings_.max_cooldown_s),
             to_us_text(settings_.probe_lease_s),
             to_ms_text(redis_retention_s(longest))};
}

std::vector<std::string>
redis_breaker_calls::args(const char* op,
                          std::vector<std::string> extra) const {
  std::vector<std::string> out;
  out.reserve(1 + common_.size() + extra.size());
  out.emplace_back(op);
  out.insert(out.end(), common_.begin(), common_.end());
  for (auto& x : extra)
    out.push_back(std::move(x));
  return out;
}

std::vector<std::string>
redis_breaker_calls::record_args(uint64_t epoch, breaker_feed feed) const {
  return args("record", {std::to_string(epoch), feed_code(feed)});
}

caf::expected<breaker_entry>
redis_breaker_calls::enter_reply(const redis_reply& r) {
  int64_t v[4];
  for (size_t i = 0; i < 4; ++i)
    if (!integer_at(r, i, v[i]))
      return bad_reply("enter");
  breaker_entry entry;
  entry.allowed = v[0] == 1;
  entry.epoch = static_cast<uint64_t>(v[1]);
  entry.probe = v[2] == 1;
  entry.retry_after_s = static_cast<double>(v[3]) / 1e6;
  return entry;
}

} // namespace detail

namespace {

using detail::redis_breaker_calls;

class redis_breaker final : public breaker_backend {
public:
  redis_breaker(redis_client_ptr client, std::string prefix,
                breaker_settings settings)
    : client_(std::move(client)), calls_(prefix, std::move(settings)) {
    // nop
  }

  caf::expected<breaker_entry> enter(double) override {
    auto r = run(calls_.args("enter"));
    if (!r)
      return std::move(r.error());
    return redis_breaker_calls::enter_reply(*r);
  }

  caf::error record(uint64_t epoch, breaker_feed feed, double) override {
    return done(run(calls_.record_args(epoch, feed)), "record");
  }

  caf::error release_probe(uint64_t epoch, double) override {
    return done(run(calls_.args("release", {std::to_string(epoch)})),
                "release_probe");
  }

  caf::expected<breaker_status> status(double) override {
    auto r = run(calls_.args("status"));
    if (!r)
      return std::move(r.error());
    if (r->type != redis_reply::kind::array || r->elements.size() != 11
        || r->elements[0].type != redis_reply::kind::string)
      return detail::bad_reply("status");
    int64_t v[11];
    for (size_t i = 1; i < 11; ++i)
      if (!detail::integer_at(*r, i, v[i]))
        return detail::bad_reply("status");
    auto& settings = calls_.settings();
    breaker_status st;
    st.source = settings.source;
    st.state = r->elements[0].str;
    st.epoch = static_cast<uint64_t>(v[1]);
    st.failure_count = v[2];
    st.threshold = settings.threshold;
    st.reopen_streak = v[3];
    st.open_for_s = static_cast<double>(v[4]) / 1e6;
    st.window_attempts = v[5];
    st.window_failures = v[6];
    st.probe_in_flight = v[7] == 1;
    st.opens = static_cast<uint64_t>(v[8]);
    st.probes = static_cast<uint64_t>(v[9]);
    st.probe_failures = static_cast<uint64_t>(v[10]);
    return st;
  }

private:
  caf::expected<redis_reply> run(const std::vector<std::string>& args) {
    return client_->eval(detail::breaker_script(), calls_.keys(), args);
  }

  static caf::error done(caf::expected<redis_reply> r, const char* what) {
    if (!r)
      return std::move(r.error());
    if (r->type != redis_reply::kind::integer)
      return detail::bad_reply(what);
    return {};
  }

  redis_client_ptr client_;
  redis_breaker_calls calls_;
};

} // namespace

breaker_backend_ptr make_redis_breaker(redis_client_ptr client,
                                       std::string key_prefix,
                                       breaker_settings settings) {
  return std::make_unique<redis_breaker>(std::move(client),
                                         std::move(key_prefix),
                                         std::move(settings));
}

} // namespace pgw
