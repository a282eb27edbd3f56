// libFuzzer target: the configuration a user writes — a `.env` file read by
// `read_env_file`, then `load_settings` (every SPEC §3 rule) and, when it
// loads, `config show` in text and JSON. Properties:
//  - a rejected configuration comes back as an error with a message that
//    names something (never an empty message);
//  - an API key never appears in an error message or in `config show`
//    output (checked for key values that appear nowhere else in the input).
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
  // API keys worth checking: long enough to be unmistakable and found in no
  // other key or value of the input (else seeing them proves nothing).
  std::vector<std::string> secrets;
  for (auto& [key, value] : *env) {
    if (!is_secret_key(key) || value.size() < 8)
      continue;
    bool elsewhere = false;
    for (auto& [k2, v2] : *env)
      if (k2.find(value) != std::string::npos
          || (k2 != key && v2.find(value) != std::string::npos))
        elsewhere = true;
    if (!elsewhere)
      secrets.push_back(value);
  }
  auto leaks = [&](const std::string& text) {
    for (auto& s : secrets)
      if (text.find(s) != std::string::npos)
        return true;
    return false;
  };
  auto cfg = pgw::load_settings(*env);
  if (!cfg) {
    auto msg = pgw::describe(cfg.error());
    if (msg.empty() || leaks(msg))
      std::abort(); // an error that names nothing, or names a secret
    return 0;
  }
  if (leaks(pgw::show_settings(*cfg)) || leaks(pgw::show_settings_json(*cfg)))
    std::abort(); // config show printed an API key
  return 0;
}
