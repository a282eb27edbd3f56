#include "backends/telemetry.hpp"

namespace pgw {

telemetry_sink::~telemetry_sink() = default;

} // namespace pgw
