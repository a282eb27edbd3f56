#pragma once

// The example backend's own configuration header. Its path is the one pgw
// used to export as a top-level include name (config/settings.hpp): this
// consumer builds only because pgw's installed headers live under pgw/.

namespace app {

/// The pgw scope this backend calls.
inline const char* gateway_scope = "APP";

} // namespace app
