#include "backends/limiter.hpp"

namespace pgw {

limiter_backend::~limiter_backend() = default;

caf::expected<std::pair<bool, bool>>
limiter_backend::settle_and_release(const std::string& permit_id,
                                    int64_t actual, double now_s) {
  auto settled = settle(permit_id, actual, now_s);
  if (!settled)
    return std::move(settled.error());
  auto released = release(permit_id, now_s);
  if (!released)
    return std::move(released.error());
  return std::make_pair(*settled, *released);
}

limiter_status limiter_status_of(const limiter_limits& limits) {
  limiter_status st;
  st.source = limits.source;
  if (limits.rpm)
    st.rpm_limit = *limits.rpm;
  if (limits.tpm)
    st.tpm_limit = *limits.tpm;
  if (limits.max_concurrency)
    st.concurrency_limit = *limits.max_concurrency;
  return st;
}

} // namespace pgw
