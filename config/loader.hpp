#pragma once

/// Configuration loading (SPEC §3): environment + optional env file →
/// `settings` → `validate`. Nothing is spawned from settings that did not
/// pass here.

#include "pgw/config/settings.hpp"

#include <caf/expected.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pgw {

/// Raw configuration: key → value.
using env_map = std::map<std::string, std::string>;

/// Reads an env file: `KEY=VALUE` lines, `#` comments, blank lines, an
/// optional `export ` prefix, values optionally in single or double quotes.
/// A malformed line is an `invalid_config` error naming file and line. A key
/// set on several lines takes the last line's value; with `warnings`, each
/// such key gets a warning naming it and its lines (never a value).
caf::expected<env_map> read_env_file(const std::string& path,
                                     std::vector<std::string>* warnings
                                     = nullptr);

/// The process environment as a map.
env_map process_environment();

/// The effective raw configuration: the env file's values, overridden by the
/// process environment. `env_file` unset: `./.env` when it exists, else none.
/// An explicitly named file that does not exist is an error. The env file's
/// warnings (`read_env_file`) are appended to `warnings` when given.
caf::expected<env_map>
load_environment(const std::optional<std::string>& env_file = std::nullopt,
                 std::vector<std::string>* warnings = nullptr);

/// The provider profiles: from the file `PGW_PROVIDERS_PATH` names when set
/// in `env`, else the table compiled in from config/providers.json.
caf::expected<std::map<std::string, provider_profile>>
load_providers(const env_map& env);

/// Parses a providers table (the config/providers.json format).
caf::expected<std::map<std::string, provider_profile>>
parse_providers(const std::string& json_text);

/// Builds settings from raw configuration and validates them. Errors are
/// `invalid_config` with a message that names the exact key, what is wrong
/// with its value and the rule. Warnings land in `settings::warnings`; when
/// loading fails, the ones found so far (an unknown key's "did you mean")
/// are appended to `warnings` when given.
caf::expected<settings> load_settings(const env_map& env,
                                      std::vector<std::string>* warnings
                                      = nullptr);

/// Every key load_settings reads: the process-wide keys, the scope keys
/// (after `{SCOPE}__`) and the source fields (after
/// `{SCOPE}__{PROVIDER}__{NAME}__`).
struct known_key_names {
  std::vector<std::string> global;
  std::vector<std::string> scope;
  std::vector<std::string> source;
};
known_key_names known_keys();

/// Every rule of SPEC §3 that applies to features present: ranges, finite
/// numbers, choices, cross-field rules. The single place new rules go.
/// Returns the first violation; appends warnings to `s.warnings`.
caf::error validate(settings& s);

/// Human-readable effective settings, one `KEY=VALUE` per line grouped by
/// scope and source; API keys, passwords in URLs and header values masked.
std::string show_settings(const settings& s);

/// The effective settings as a JSON document (same masking).
std::string show_settings_json(const settings& s);

} // namespace pgw
