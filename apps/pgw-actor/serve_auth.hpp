#pragma once

/// `pgw-actor serve` auth: bearer keys checked against SHA-256 digests.

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace pgw::serve {

class key_set {
public:
  /// Reads PGW_SERVE_KEYS_FILE (a regular file of at most 1 MiB): one
  /// SHA-256 hex digest per line, optionally followed by whitespace and a
  /// file name as sha256sum prints it; `#` comments and blank lines allowed.
  /// Returns a message when the file cannot be read or on a bad line (naming
  /// the line number and what was found, never the line's text).
  static std::optional<std::string> load(const std::string& path,
                                         key_set& out);

  /// True when no digest is configured (auth off).
  bool empty() const {
    return digests_.empty();
  }

  /// True when the `Authorization` header value is `Bearer K` and SHA-256(K)
  /// is one of the digests; every digest is compared in constant time.
  bool accepts(const std::string& authorization) const;

private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

} // namespace pgw::serve
