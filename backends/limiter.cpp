#include "backends/limiter.hpp"

namespace pgw {

limiter_backend::~limiter_backend() = default;

} // namespace pgw
