#pragma once

/// The response cache's key (SPEC §10, issue 14): a SHA-256 of a canonical
/// JSON of everything that can change the answer to a chat request, plus the
/// key-format version, the scope and the tenant. Two requests share a key
/// exactly when an upstream would see the same request.
///
/// Canonical JSON: object keys sorted (byte order), no whitespace, numbers
/// normalised (an integral value is written as an integer, so 1 and 1.0 are
/// the same; others in the shortest form that reads back to the same
/// double, so 0.2 is "0.2"), strings escaped one way. JSON-text fields of
/// the request (tools, tool_choice, response_format, extra_body) are parsed
/// and written canonically; a text that does not parse is keyed as a plain
/// string (the request fails upstream anyway, and must not share a key
/// with a valid one).

#include "config/settings.hpp"
#include "messages/chat.hpp"

#include <string>
#include <vector>

namespace pgw {

/// Bumped whenever the canonical form changes: old entries then miss.
/// 2: the scope's sources are in the key; integers beyond 2^53 exact.
inline constexpr const char* cache_key_version = "pgw-cache-key/2";

/// What answers a scope's calls: a hash of each source's name, provider,
/// kind, base URL, model and OVERLAY. In the key, so that a changed model
/// or overlay (or another deployment's scope of the same name on a shared
/// Redis) misses instead of replaying another source's answers.
std::string cache_sources_id(const scope_config& scope);

/// The canonical JSON the key hashes (exposed for tests and debugging; it
/// contains the prompt, so never log it). `sources_id` is the scope's
/// `cache_sources_id`.
std::string cache_key_material(const std::string& scope,
                               const chat_request& req,
                               const std::string& sources_id = {});

/// Lower-case hex SHA-256 of `cache_key_material(scope, req, sources_id)`;
/// the tenant is `req.tenant`.
std::string cache_key(const std::string& scope, const chat_request& req,
                      const std::string& sources_id = {});

/// The fields of `req` the key leaves out on purpose, by address (they do
/// not change the answer: delivery mode, bounds, ids and the cache's own
/// controls). Every other field of chat_request's inspect list is in the
/// key; tests/unit/cache_key_test.cpp enforces it.
std::vector<const void*> cache_key_excluded_fields(const chat_request& req);

/// `text` parsed as JSON and written canonically; `text` itself, quoted as
/// a JSON string, when it does not parse.
std::string canonical_json_text(const std::string& text);

/// Lower-case hex SHA-256 of `data` (OpenSSL EVP).
std::string sha256_hex(const std::string& data);

} // namespace pgw
