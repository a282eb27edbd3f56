#include "backends/redis/cache.hpp"

#include "messages/errors.hpp"

#include <atomic>
#include <vector>

namespace pgw {

namespace {

const redis_script& lease_script() {
  static const redis_script script{detail::embedded_lua("cache_lease.lua")};
  return script;
}

class redis_cache final : public cache_backend {
public:
  redis_cache(redis_client_ptr client, std::string prefix, cache_limits limits)
    : client_(std::move(client)), prefix_(std::move(prefix)), limits_(limits) {
  }

  caf::expected<caf::optional<std::string>> get(const std::string& key,
                                                double) override {
    auto r = client_->command({"GET", full(key)});
    if (!r)
      return std::move(r.error());
    if (r->is_nil())
      return caf::optional<std::string>{};
    if (r->type != redis_reply::kind::string)
      return make_error(error_code::internal,
                        "cache: Redis GET answered something other than a "
                        "string");
    return caf::optional<std::string>{std::move(r->str)};
  }

  caf::expected<bool> put(const std::string& key, const std::string& value,
                          double) override {
    if (static_cast<int64_t>(value.size()) > limits_.max_value_bytes) {
      ++refused_;
      auto r = client_->command({"DEL", full(key)});
      if (!r)
        return std::move(r.error());
      return false;
    }
    auto r = client_->command({"SET", full(key), value, "PX",
                               detail::to_ms_text(limits_.ttl_s)});
    if (!r)
      return std::move(r.error());
    return true;
  }

  cache_backend_stats stats() const override {
    cache_backend_stats s;
    s.entries = -1;
    s.bytes = -1;
    s.refused_too_large = refused_.load();
    return s;
  }

  bool blocking() const override {
    return true;
  }

  caf::expected<cache_claim> claim(const std::string& key,
                                   const std::string& token,
                                   double) override {
    auto r = lease(key, "claim", token, true);
    if (!r)
      return std::move(r.error());
    cache_claim c;
    auto& e = r->elements;
    auto code = e.empty() || e[0].type != redis_reply::kind::integer
                  ? 0
                  : e[0].integer;
    if (code == 1 && e.size() == 2 && e[1].type == redis_reply::kind::string) {
      c.what = cache_claim::kind::value;
      c.value = std::move(e[1].str);
    } else if (code == 2) {
      c.what = cache_claim::kind::lead;
    } else if (code == 3) {
      c.what = cache_claim::kind::wait;
    } else {
      return make_error(error_code::internal,
                        "cache: the Redis lease script answered something "
                        "unexpected");
    }
    return c;
  }

  caf::expected<bool> renew(const std::string& key, const std::string& token,
                            double) override {
    return flag(lease(key, "renew", token, false));
  }

  caf::expected<bool> release(const std::string& key, const std::string& token,
                              double) override {
    return flag(lease(key, "release", token, false));
  }

  cache_limits limits() const override {
    return limits_;
  }

private:
  std::string full(const std::string& key) const {
    return prefix_ + ":" + key;
  }

  caf::expected<redis_reply> lease(const std::string& key, const char* op,
                                   const std::string& token, bool with_value) {
    std::vector<std::string> keys{prefix_ + ":lease:" + key};
    if (with_value)
      keys.push_back(full(key));
    return client_->eval(lease_script(), keys,
                         {op, token, detail::to_ms_text(limits_.lease_s)});
  }

  static caf::expected<bool> flag(caf::expected<redis_reply> r) {
    if (!r)
      return std::move(r.error());
    if (r->type != redis_reply::kind::integer)
      return make_error(error_code::internal,
                        "cache: the Redis lease script answered something "
                        "other than a number");
    return r->integer == 1;
  }

  redis_client_ptr client_;
  std::string prefix_;
  cache_limits limits_;
  std::atomic<uint64_t> refused_{0};
};

} // namespace

cache_backend_ptr make_redis_cache(redis_client_ptr client,
                                   std::string key_prefix,
                                   cache_limits limits) {
  return std::make_unique<redis_cache>(std::move(client),
                                       std::move(key_prefix), limits);
}

} // namespace pgw
