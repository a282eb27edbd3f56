#include "backends/cache.hpp"

#include <list>
#include <unordered_map>

namespace pgw {

cache_backend::~cache_backend() = default;

caf::expected<cache_claim> claim_by_get(cache_backend& backend,
                                        const std::string& key, double now_s) {
  auto v = backend.get(key, now_s);
  if (!v)
    return std::move(v.error());
  cache_claim c;
  if (*v) {
    c.what = cache_claim::kind::value;
    c.value = std::move(**v);
  }
  return c;
}

caf::expected<cache_claim> cache_backend::claim(const std::string& key,
                                                const std::string&,
                                                double now_s) {
  return claim_by_get(*this, key, now_s);
}

caf::expected<bool> cache_backend::renew(const std::string&,
                                         const std::string&, double) {
  return true;
}

caf::expected<bool> cache_backend::release(const std::string&,
                                           const std::string&, double) {
  return true;
}

cache_limits cache_backend::limits() const {
  return {};
}

namespace {

/// An LRU list (most recent first) indexed by key.
class memory_cache final : public cache_backend {
public:
  explicit memory_cache(cache_limits limits) : limits_(limits) {
  }

  caf::expected<caf::optional<std::string>> get(const std::string& key,
                                                double now_s) override {
    auto i = index_.find(key);
    if (i == index_.end())
      return caf::optional<std::string>{};
    auto e = i->second;
    if (now_s - e->stored_at >= limits_.ttl_s) {
      erase(i);
      return caf::optional<std::string>{};
    }
    lru_.splice(lru_.begin(), lru_, e);
    return caf::optional<std::string>{e->value};
  }

  caf::expected<bool> put(const std::string& key, const std::string& value,
                          double now_s) override {
    if (auto i = index_.find(key); i != index_.end())
      erase(i);
    if (static_cast<int64_t>(value.size()) > limits_.max_value_bytes) {
      ++stats_.refused_too_large;
      return false;
    }
    lru_.push_front({key, value, now_s});
    index_.emplace(key, lru_.begin());
    stats_.bytes += size_of(lru_.front());
    ++stats_.entries;
    while (!lru_.empty()
           && (stats_.entries > limits_.max_entries
               || stats_.bytes > limits_.max_bytes)) {
      erase(index_.find(lru_.back().key));
      ++stats_.evictions;
    }
    return true;
  }

  cache_backend_stats stats() const override {
    return stats_;
  }

  bool blocking() const override {
    return false;
  }

  caf::expected<cache_claim> claim(const std::string& key,
                                   const std::string& token,
                                   double now_s) override {
    auto v = get(key, now_s);
    cache_claim c;
    if (*v) {
      c.what = cache_claim::kind::value;
      c.value = std::move(**v);
      return c;
    }
    auto& l = leases_[key];
    if (!l.token.empty() && now_s < l.until && l.token != token) {
      c.what = cache_claim::kind::wait;
      return c;
    }
    l = {token, now_s + limits_.lease_s};
    return c;
  }

  caf::expected<bool> renew(const std::string& key, const std::string& token,
                            double now_s) override {
    auto l = leases_.find(key);
    if (l == leases_.end() || l->second.token != token
        || now_s >= l->second.until)
      return false;
    l->second.until = now_s + limits_.lease_s;
    return true;
  }

  caf::expected<bool> release(const std::string& key, const std::string& token,
                              double now_s) override {
    auto l = leases_.find(key);
    if (l == leases_.end() || l->second.token != token)
      return false;
    bool held = now_s < l->second.until;
    leases_.erase(l);
    return held;
  }

  cache_limits limits() const override {
    return limits_;
  }

private:
  struct entry {
    std::string key;
    std::string value;
    double stored_at;
  };
  using iterator = std::list<entry>::iterator;

  static int64_t size_of(const entry& e) {
    return static_cast<int64_t>(e.key.size() + e.value.size());
  }

  void erase(std::unordered_map<std::string, iterator>::iterator i) {
    stats_.bytes -= size_of(*i->second);
    --stats_.entries;
    lru_.erase(i->second);
    index_.erase(i);
  }

  struct lease {
    std::string token;
    double until = 0;
  };

  cache_limits limits_;
  /// Leases of keys (at most one per key in flight; released ones go).
  std::unordered_map<std::string, lease> leases_;
  std::list<entry> lru_;
  std::unordered_map<std::string, iterator> index_;
  cache_backend_stats stats_;
};

} // namespace

cache_backend_ptr make_memory_cache(cache_limits limits) {
  return std::make_unique<memory_cache>(limits);
}

} // namespace pgw
