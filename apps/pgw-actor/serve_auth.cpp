#include "serve_auth.hpp"

#include "config/file.hpp"
#include "messages/errors.hpp"

#include <cctype>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <sstream>

namespace pgw::serve {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

/// Why `token` (a line's first word) is not a digest, without echoing it:
/// it may be a key.
std::string not_a_digest(const std::string& token) {
  if (token.rfind("sk-", 0) == 0)
    return "it looks like an API key (starts with sk-): store SHA-256 "
           "digests, not keys (printf %s KEY | sha256sum)";
  size_t bad = 0;
  while (bad < token.size() && hex_value(token[bad]) >= 0)
    ++bad;
  if (bad == token.size())
    return "found " + std::to_string(token.size()) + " hex digits";
  return "found a character that is not a hex digit at column "
         + std::to_string(bad + 1);
}

} // namespace

std::optional<std::string> key_set::load(const std::string& path,
                                         key_set& out) {
  auto what = "PGW_SERVE_KEYS_FILE=" + path;
  auto text = read_config_file(path, what + " (key digests file)");
  if (!text)
    return words_of(text.error());
  std::istringstream in{*text};
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos)
      line.erase(hash);
    line = trim(line);
    if (line.empty())
      continue;
    // sha256sum's output is accepted as is: the digest, then whitespace and
    // the file name ("-" for stdin, "*name" in binary mode).
    auto token = line.substr(0, line.find_first_of(" \t"));
    std::array<unsigned char, 32> digest{};
    bool ok = token.size() == 64;
    for (size_t i = 0; ok && i < 32; ++i) {
      int hi = hex_value(token[2 * i]);
      int lo = hex_value(token[2 * i + 1]);
      ok = hi >= 0 && lo >= 0;
      digest[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    if (!ok)
      return what + ": line " + std::to_string(number)
             + " is not a SHA-256 hex digest (64 hex digits, optionally "
               "followed by a file name as sha256sum prints): "
             + not_a_digest(token);
    out.digests_.push_back(digest);
  }
  if (out.digests_.empty())
    return what + ": no key digest in the file (one SHA-256 hex digest per "
                  "line)";
  return {};
}

bool key_set::accepts(const std::string& authorization) const {
  // The scheme is case-insensitive (RFC 9110 §11.1): "bearer" too.
  static const std::string prefix = "bearer ";
  if (authorization.size() <= prefix.size())
    return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != prefix[i])
      return false;
  auto key = authorization.substr(prefix.size());
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(),
         digest);
  bool found = false;
  for (auto& d : digests_)
    found |= CRYPTO_memcmp(d.data(), digest, d.size()) == 0;
  return found;
}

} // namespace pgw::serve
