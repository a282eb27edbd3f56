#include "backends/memory/breaker.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pgw {

memory_breaker::memory_breaker(breaker_settings settings)
  : settings_(std::move(settings)),
    now_(-std::numeric_limits<double>::infinity()) {
  // nop
}

// -- clock and window ---------------------------------------------------------

void memory_breaker::advance_to(double now_s) {
  if (now_s > now_)
    now_ = now_s;
  auto half = settings_.window_s / 2;
  if (!(half > 0) || !std::isfinite(now_))
    return;
  auto id = static_cast<int64_t>(std::floor(now_ / half));
  if (bucket_ && id <= *bucket_)
    return;
  if (bucket_ && id == *bucket_ + 1) {
    attempts_[1] = attempts_[0];
    failures_[1] = failures_[0];
  } else {
    attempts_[1] = failures_[1] = 0;
  }
  attempts_[0] = failures_[0] = 0;
  bucket_ = id;
}

// -- transitions --------------------------------------------------------------

void memory_breaker::open_for(double seconds) {
  state_ = state::open;
  open_until_ = now_ + seconds;
  probe_until_ = 0;
  closed_since_.reset(); // so only time spent closed decays the streak
  ++epoch_;
  ++opens_;
}

void memory_breaker::decay_streak() {
  if (!closed_since_ || reopen_streak_ == 0 || !(settings_.cooldown_s > 0))
    return;
  auto steps = std::floor((now_ - *closed_since_) / settings_.cooldown_s);
  if (steps >= static_cast<double>(reopen_streak_))
    reopen_streak_ = 0;
  else if (steps > 0)
    reopen_streak_ -= static_cast<int64_t>(steps);
}

void memory_breaker::trip() {
  decay_streak();
  // cooldown × 2^streak; ldexp saturates to inf, which the cap absorbs.
  auto exponent = static_cast<int>(std::min<int64_t>(reopen_streak_, 4096));
  open_for(std::min(std::ldexp(settings_.cooldown_s, exponent),
                    settings_.max_cooldown_s));
}

void memory_breaker::force() {
  decay_streak();
  open_for(settings_.max_cooldown_s);
}

void memory_breaker::close() {
  state_ = state::closed;
  failure_count_ = 0;
  attempts_[0] = attempts_[1] = 0;
  failures_[0] = failures_[1] = 0;
  probe_until_ = 0;
  closed_since_ = now_;
}

void memory_breaker::give_back_probe() {
  state_ = state::open;
  open_until_ = now_;
  probe_until_ = 0;
}

// -- breaker_backend ----------------------------------------------------------

caf::expected<breaker_entry> memory_breaker::enter(double now_s) {
  advance_to(now_s);
  breaker_entry entry;
  entry.epoch = epoch_;
  switch (state_) {
    case state::closed:
      entry.allowed = true;
      return entry;
    case state::open:
      if (now_ < open_until_) {
        entry.retry_after_s = open_until_ - now_;
        return entry;
      }
      break;
    case state::half_open:
      if (now_ < probe_until_) {
        entry.retry_after_s = probe_until_ - now_;
        return entry;
      }
      break;
  }
  // Open past open_until, or half-open with an expired lease: this caller
  // probes.
  state_ = state::half_open;
  probe_until_ = now_ + settings_.probe_lease_s;
  ++probes_;
  entry.allowed = true;
  entry.probe = true;
  return entry;
}

caf::error memory_breaker::record(uint64_t epoch, breaker_feed feed,
                                  double now_s) {
  advance_to(now_s);
  if (epoch < epoch_)
    return {}; // from before the last open: fenced off
  if (state_ != state::closed) {
    // The probe's result (see the class comment).
    switch (feed) {
      case breaker_feed::success:
      case breaker_feed::success_no_count:
        close();
        break;
      case breaker_feed::failure:
        ++probe_failures_;
        ++reopen_streak_;
        trip();
        break;
      case breaker_feed::force_open:
        force();
        break;
      case breaker_feed::none:
        if (state_ == state::half_open)
          give_back_probe();
        break;
    }
    return {};
  }
  // Closed: the same feeds as the probe's switch above (duplicates pairs
  // their force_open / none cases), with the closed state's rules.
  switch (feed) {
    case breaker_feed::success:
      failure_count_ = 0;
      ++attempts_[0];
      break;
    case breaker_feed::success_no_count:
      failure_count_ = 0;
      break;
    case breaker_feed::failure: {
      ++failure_count_;
      ++attempts_[0];
      ++failures_[0];
      if (failure_count_ >= settings_.threshold) {
        trip();
        break;
      }
      auto attempts = window_attempts();
      auto failures = window_failures();
      if (attempts >= settings_.min_calls
          && static_cast<double>(failures) / static_cast<double>(attempts)
               >= settings_.fail_rate) {
        failure_count_ = settings_.threshold;
        trip();
      }
      break;
    }
    case breaker_feed::force_open:
      force();
      break;
    case breaker_feed::none:
      break;
  }
  return {};
}

caf::error memory_breaker::release_probe(uint64_t epoch, double now_s) {
  advance_to(now_s);
  if (state_ == state::half_open && epoch == epoch_)
    give_back_probe();
  return {};
}

caf::expected<breaker_status> memory_breaker::status(double now_s) {
  advance_to(now_s);
  breaker_status st;
  st.source = settings_.source;
  switch (state_) {
    case state::closed:
      st.state = "closed";
      break;
    case state::open:
      // Past open_until the next caller probes: shown as half-open with no
      // probe in flight, like a half-open breaker whose lease expired.
      st.state = now_ < open_until_ ? "open" : "half_open";
      st.open_for_s = std::max(open_until_ - now_, 0.0);
      break;
    case state::half_open:
      st.state = "half_open";
      st.probe_in_flight = now_ < probe_until_;
      break;
  }
  st.epoch = epoch_;
  st.failure_count = failure_count_;
  st.threshold = settings_.threshold;
  st.reopen_streak = reopen_streak_;
  st.window_attempts = window_attempts();
  st.window_failures = window_failures();
  st.opens = opens_;
  st.probes = probes_;
  st.probe_failures = probe_failures_;
  return st;
}

breaker_backend_ptr make_memory_breaker(breaker_settings settings) {
  return std::make_unique<memory_breaker>(std::move(settings));
}

} // namespace pgw
