#pragma once

/// Small helpers shared by the configuration sources (config/keys.cpp): key
/// spelling, reserved segments, number formatting, URL masking.

#include "config/settings.hpp"

#include <string>
#include <vector>

namespace pgw::detail {

std::string to_upper(std::string text);

std::string to_lower(std::string text);

/// Second segments of scope keys, current and planned. None of them can be a
/// provider name (SPEC §3).
const std::vector<std::string>& reserved_segments();

/// True when `segment` (any case) is a reserved scope-key segment.
bool is_reserved_segment(const std::string& segment);

/// Letters, digits, `-` and `_`, starting and ending with a letter or digit
/// (source and provider names).
bool is_name_segment(const std::string& name);

/// The candidate `word` is most likely a misspelling of: the closest by
/// edits (an insertion, deletion, substitution or swap of two neighbours),
/// within 1 edit for words up to 5 characters, 2 up to 12, else 3; the first
/// of equals. Nothing when none is that close.
std::string closest_spelling(const std::string& word,
                             const std::vector<std::string>& candidates);

/// `{SCOPE}__{PROVIDER}__{NAME}__{FIELD}` for a source, upper case.
std::string own_source_key(const std::string& scope,
                           const source_config& src, const std::string& field);

/// The key that set `field` of `src`: the scope's `{SCOPE}__{FIELD}` when the
/// value is the scope-level default, else the source's own key.
std::string source_key(const std::string& scope, const source_config& src,
                       const std::string& field);

/// `{SCOPE}__{SUFFIX}` for a scope key.
std::string scope_key(const std::string& scope, const std::string& suffix);

/// Shortest text that reads back as `x` ("120", "0.5", "nan").
std::string format_number(double x);

/// `url` with any user information, query value and fragment replaced by
/// `***`.
std::string mask_url(const std::string& url);

} // namespace pgw::detail
