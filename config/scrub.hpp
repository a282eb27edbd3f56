#pragma once

/// The secret scrubber: every piece of text that came from an upstream (error
/// messages, stream error events, Location headers, log lines, telemetry
/// columns) passes `scrub` before it is printed, logged or stored. The
/// answer content itself is the caller's data and is never scrubbed.

#include "config/settings.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace pgw {

/// What replaces a secret.
constexpr const char* redacted = "[redacted]";

/// `text` with every registered secret, every `Bearer <token>` (any case)
/// and every `sk-<token>` replaced by `[redacted]`. Thread-safe.
std::string scrub(std::string_view text);

/// Adds secrets to the process-wide list `scrub` removes. Values shorter
/// than 4 bytes are ignored (they would redact ordinary words). A key's
/// distinctive part (without a vendor prefix such as `sk-` or `sk-proj-`,
/// when 12 bytes or more remain) is removed as well.
void register_secrets(const std::vector<std::string>& secrets);

/// `text` with each of `secrets` (and its distinctive part, as for
/// `register_secrets`) replaced by `mask`; the process-wide list is neither
/// used nor changed.
std::string redact_secrets(std::string_view text,
                           const std::vector<std::string>& secrets,
                           std::string_view mask);

/// The secrets a configuration holds: every API_KEY, every HEADERS value,
/// the password of every URL (BASE_URL, REDIS_URL).
std::vector<std::string> secrets_of(const settings& s);

/// The password of `url`'s userinfo (`scheme://user:password@host`), or
/// empty when there is none.
std::string url_password(std::string_view url);

} // namespace pgw
