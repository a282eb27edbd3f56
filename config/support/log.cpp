#include "config/support/log.hpp"
#include "config/scrub.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace pgw::log {

namespace {

level initial_level() {
  const char* env = std::getenv("PGW_LOG");
  if (env == nullptr)
    return level::warn;
  // Any other text is refused when the configuration is loaded.
  return parse_level(env).value_or(level::warn);
}

std::atomic<level>& threshold() {
  static std::atomic<level> lvl{initial_level()};
  return lvl;
}

std::mutex& sink_mutex() {
  static std::mutex mtx;
  return mtx;
}

std::function<void(level, const std::string&)>& sink() {
  static std::function<void(level, const std::string&)> fn;
  return fn;
}

const char* name_of(level lvl) {
  switch (lvl) {
    case level::debug:
      return "debug";
    case level::info:
      return "info";
    case level::warn:
      return "warn";
    case level::error:
      return "error";
    default:
      return "off";
  }
}

} // namespace

std::optional<level> parse_level(std::string_view text) {
  if (text == "debug")
    return level::debug;
  if (text == "info")
    return level::info;
  if (text == "warn")
    return level::warn;
  if (text == "error")
    return level::error;
  if (text == "off")
    return level::off;
  return std::nullopt;
}

void set_level(level lvl) {
  threshold() = lvl;
}

level current_level() {
  return threshold().load(std::memory_order_relaxed);
}

void set_sink(std::function<void(level, const std::string&)> fn) {
  std::lock_guard<std::mutex> guard{sink_mutex()};
  sink() = std::move(fn);
}

std::string line(level lvl, const char* component, const std::string& text) {
  // Log lines may carry upstream text: scrubbed of secrets (config/scrub.hpp).
  return fmt::format("[{}] {}: {}", name_of(lvl), component, scrub(text));
}

void write(level lvl, const char* component, const std::string& text) {
  auto out = line(lvl, component, text);
  std::lock_guard<std::mutex> guard{sink_mutex()};
  if (sink())
    sink()(lvl, out);
  else
    std::fprintf(stderr, "%s\n", out.c_str());
}

} // namespace pgw::log
