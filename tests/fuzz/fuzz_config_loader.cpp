// libFuzzer target: the configuration a user writes — a `.env` file read by
// `read_env_file`, then `load_settings` (every SPEC §3 rule) and, when it
// loads, `config show` in text and JSON. Properties:
//  - a rejected configuration comes back as an error with a message that
//    names something (never an empty message);
//  - an API key never appears in an error message or in `config show`
//    output: it may not appear there more often than with the key replaced
//    by another value of the same length.
// Keys naming other files (PGW_*_PATH) are dropped: the fuzzer must not read
// whatever file the bytes happen to name.

#include "config/loader.hpp"
#include "messages/errors.hpp"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

std::string scratch_path() {
  return "/tmp/pgw-fuzz-config-" + std::to_string(::getpid()) + ".env";
}

bool is_secret_key(const std::string& key) {
  return key.size() >= 7 && key.compare(key.size() - 7, 7, "API_KEY") == 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path();
  {
    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    out.write(reinterpret_cast<const char*>(data),
              static_cast<std::streamsize>(size));
  }
  auto env = pgw::read_env_file(path);
  if (!env) {
    if (pgw::describe(env.error()).empty())
      std::abort();
    return 0;
  }
  for (auto i = env->begin(); i != env->end();) {
    auto& key = i->first;
    if (key.size() >= 5 && key.compare(key.size() - 5, 5, "_PATH") == 0)
      i = env->erase(i);
    else
      ++i;
  }
  // An API key leaks when it shows up more often than it does with the key
  // replaced by another value of the same length: text that merely equals
  // the key elsewhere (a default, a provider profile, another value) shows
  // up in both. Keys shorter than 8 bytes prove nothing and are skipped.
  auto error_text = [](const caf::expected<pgw::settings>& cfg) {
    return cfg ? pgw::show_settings(*cfg) + pgw::show_settings_json(*cfg)
               : pgw::describe(cfg.error());
  };
  auto count = [](const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (auto at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + 1))
      ++n;
    return n;
  };
  auto cfg = pgw::load_settings(*env);
  if (!cfg && pgw::describe(cfg.error()).empty())
    std::abort(); // an error that names nothing
  auto seen = error_text(cfg);
  for (auto& [key, value] : *env) {
    if (!is_secret_key(key) || value.size() < 8)
      continue;
    auto other = *env;
    other[key] = std::string(value.size(), value[0] == 'Z' ? 'Y' : 'Z');
    auto cfg2 = pgw::load_settings(other);
    if (static_cast<bool>(cfg) != static_cast<bool>(cfg2))
      continue; // the key's value decided validity: nothing to compare
    if (count(seen, value) > count(error_text(cfg2), value))
      std::abort(); // config show or an error message printed an API key
  }
  return 0;
}
