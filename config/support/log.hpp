#pragma once

/// A thin process-wide logger: "subject verb object", actor or component
/// name first. Never pass an API key or a full prompt.

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace pgw::log {

enum class level { debug, info, warn, error, off };

/// Sets the threshold (default: warn, or `PGW_LOG` = debug|info|warn|error|off).
void set_level(level lvl);

/// The level a `PGW_LOG` value names; nullopt for any other text.
std::optional<level> parse_level(std::string_view text);

level current_level();

/// Replaces the output (default: stderr). Tests capture lines with this;
/// pass an empty function to restore stderr.
void set_sink(std::function<void(level, const std::string&)> sink);

/// Writes one line "[level] component: text" when `lvl` passes.
void write(level lvl, const char* component, const std::string& text);

/// The line `write` would write (text scrubbed of secrets), for a caller
/// that hands it to a writer of its own (serve's stderr thread).
std::string line(level lvl, const char* component, const std::string& text);

template <class... Ts>
void warn(const char* component, fmt::format_string<Ts...> fmt_str,
          Ts&&... xs) {
  if (current_level() <= level::warn)
    write(level::warn, component, fmt::format(fmt_str, std::forward<Ts>(xs)...));
}

template <class... Ts>
void info(const char* component, fmt::format_string<Ts...> fmt_str,
          Ts&&... xs) {
  if (current_level() <= level::info)
    write(level::info, component, fmt::format(fmt_str, std::forward<Ts>(xs)...));
}

template <class... Ts>
void debug(const char* component, fmt::format_string<Ts...> fmt_str,
           Ts&&... xs) {
  if (current_level() <= level::debug)
    write(level::debug, component,
          fmt::format(fmt_str, std::forward<Ts>(xs)...));
}

template <class... Ts>
void error(const char* component, fmt::format_string<Ts...> fmt_str,
           Ts&&... xs) {
  if (current_level() <= level::error)
    write(level::error, component,
          fmt::format(fmt_str, std::forward<Ts>(xs)...));
}

} // namespace pgw::log
