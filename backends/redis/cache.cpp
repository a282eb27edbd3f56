#include "backends/redis/cache.hpp"

#include "messages/errors.hpp"

#include <atomic>

namespace pgw {

namespace {

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

private:
  std::string full(const std::string& key) const {
    return prefix_ + ":" + key;
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
