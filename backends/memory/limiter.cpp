#include "backends/memory/limiter.hpp"

#include "config/limits.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <limits>

namespace pgw {

namespace {

std::atomic<uint64_t> memory_limiter_instances{0};

} // namespace

memory_limiter::memory_limiter(limiter_limits limits)
  : limits_(std::move(limits)),
    now_(-std::numeric_limits<double>::infinity()) {
  id_prefix_ = limits_.source + "-" + std::to_string(++memory_limiter_instances)
               + "-";
}

// -- clock --------------------------------------------------------------------

void memory_limiter::advance_to(double now_s) {
  if (now_s > now_)
    now_ = now_s;
  // Leases first: a lease that ran out frees its slot.
  while (!leases_.empty() && leases_.begin()->first <= now_) {
    auto n = leases_.begin()->second;
    leases_.erase(leases_.begin());
    ++leases_expired_;
    if (auto i = permits_.find(n); i != permits_.end())
      i->second.lease_live = false;
    forget_if_done(n);
  }
  // Then the window: an entry leaves it `window_s` after its acquisition.
  while (!window_.empty() && window_.front().at + limits_.window_s <= now_) {
    auto n = window_.front().n;
    window_tokens_ = saturating_sub(window_tokens_, window_.front().tokens);
    window_.pop_front();
    forget_if_done(n);
  }
}

bool memory_limiter::in_window(uint64_t n) const noexcept {
  return !window_.empty() && n >= window_.front().n;
}

void memory_limiter::forget_if_done(uint64_t n) {
  auto i = permits_.find(n);
  if (i == permits_.end() || i->second.lease_live)
    return;
  if (i->second.settled || !in_window(n))
    permits_.erase(i);
}

std::optional<uint64_t> memory_limiter::parse_id(const std::string& id) const {
  if (id.size() <= id_prefix_.size()
      || id.compare(0, id_prefix_.size(), id_prefix_) != 0)
    return std::nullopt;
  auto first = id.data() + id_prefix_.size();
  auto last = id.data() + id.size();
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(first, last, n);
  // Only the canonical spelling this limiter issued: no sign, no leading 0.
  if (ec != std::errc{} || end != last || *first == '0' || n >= next_n_)
    return std::nullopt;
  return n;
}

// -- limiter_backend ----------------------------------------------------------

acquire_result memory_limiter::refuse(const char* reason,
                                      double retry_after_s) {
  acquire_result result;
  result.granted = false;
  result.reason = reason;
  result.retry_after_s = std::max(retry_after_s, 0.0);
  return result;
}

caf::expected<acquire_result> memory_limiter::try_acquire(int64_t est,
                                                          double now_s) {
  advance_to(now_s);
  est = clamp_tokens(est);
  auto window_end = [this](const entry& e) {
    return e.at + limits_.window_s - now_;
  };
  if (limits_.rpm) {
    auto rpm = *limits_.rpm;
    auto used = static_cast<int64_t>(window_.size());
    if (rpm <= 0) {
      ++refused_rpm_;
      return refuse("rpm", limits_.window_s);
    }
    if (used + 1 > rpm) {
      // The request fits once used + 1 - rpm entries have aged out; the
      // last of them is at index used - rpm (0 = the oldest).
      ++refused_rpm_;
      auto last_out = static_cast<size_t>(used - rpm);
      return refuse("rpm", window_end(window_[last_out]));
    }
  }
  if (limits_.tpm) {
    auto tpm = *limits_.tpm;
    if (est > tpm) {
      ++refused_tpm_;
      return refuse("tpm", limits_.window_s);
    }
    if (saturating_add(window_tokens_, est) > tpm) {
      // The earliest time enough tokens have aged out for `est` to fit.
      auto excess = saturating_sub(saturating_add(window_tokens_, est), tpm);
      int64_t freed = 0;
      double retry = limits_.window_s;
      for (const auto& e : window_) {
        freed = saturating_add(freed, e.tokens);
        if (freed >= excess) {
          retry = window_end(e);
          break;
        }
      }
      ++refused_tpm_;
      return refuse("tpm", retry);
    }
  }
  if (limits_.max_concurrency) {
    auto cap = *limits_.max_concurrency;
    if (static_cast<int64_t>(leases_.size()) >= cap) {
      auto retry = limits_.concurrency_retry_s;
      if (!leases_.empty())
        retry = std::min(retry, leases_.begin()->first - now_);
      ++refused_concurrency_;
      return refuse("concurrency", retry);
    }
  }
  auto n = next_n_++;
  window_.push_back(entry{n, now_, est});
  window_tokens_ = saturating_add(window_tokens_, est);
  auto lease_until = now_ + limits_.lease_s;
  leases_.emplace(lease_until, n);
  permits_.emplace(n, record{lease_until});
  ++acquired_;
  acquire_result result;
  result.granted = true;
  result.granted_permit.id = id_prefix_ + std::to_string(n);
  result.granted_permit.source = limits_.source;
  result.granted_permit.est = est;
  return result;
}

caf::expected<bool> memory_limiter::settle(const std::string& permit_id,
                                           int64_t actual, double now_s) {
  advance_to(now_s);
  auto n = parse_id(permit_id);
  if (!n)
    return false;
  auto i = permits_.find(*n);
  if (i == permits_.end() || i->second.settled)
    return false;
  i->second.settled = true;
  ++settled_;
  if (in_window(*n)) {
    // May exceed what the estimate reserved (see the class comment).
    auto& e = window_[static_cast<size_t>(*n - window_.front().n)];
    actual = clamp_tokens(actual);
    window_tokens_ = saturating_add(window_tokens_,
                                    saturating_sub(actual, e.tokens));
    e.tokens = actual;
  }
  forget_if_done(*n);
  return true;
}

caf::expected<bool> memory_limiter::release(const std::string& permit_id,
                                            double now_s) {
  advance_to(now_s);
  auto n = parse_id(permit_id);
  if (!n)
    return false;
  auto i = permits_.find(*n);
  if (i == permits_.end() || !i->second.lease_live)
    return false;
  leases_.erase({i->second.lease_until, *n});
  i->second.lease_live = false;
  ++released_;
  forget_if_done(*n);
  return true;
}

// Counters copied one by one into the status, like memory_breaker::status
// and the Redis limiter's (duplicates pairs them): one struct, one copy each.
caf::expected<limiter_status> memory_limiter::status(double now_s) {
  advance_to(now_s);
  auto st = limiter_status_of(limits_);
  st.rpm_used = static_cast<int64_t>(window_.size());
  st.tpm_used = window_tokens_;
  st.in_flight = static_cast<int64_t>(leases_.size());
  st.acquired = acquired_;
  st.settled = settled_;
  st.released = released_;
  st.refused_rpm = refused_rpm_;
  st.refused_tpm = refused_tpm_;
  st.refused_concurrency = refused_concurrency_;
  st.leases_expired = leases_expired_;
  return st;
}

limiter_backend_ptr make_memory_limiter(limiter_limits limits) {
  return std::make_unique<memory_limiter>(std::move(limits));
}

} // namespace pgw
