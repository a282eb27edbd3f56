#include "serve_auth.hpp"

#include <cctype>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>

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

} // namespace

std::optional<std::string> key_set::load(const std::string& path,
                                         key_set& out) {
  std::ifstream in(path);
  if (!in)
    return "PGW_SERVE_KEYS_FILE=" + path + ": cannot be read";
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos)
      line.erase(hash);
    line = trim(line);
    if (line.empty())
      continue;
    std::array<unsigned char, 32> digest{};
    bool ok = line.size() == 64;
    for (size_t i = 0; ok && i < 32; ++i) {
      int hi = hex_value(line[2 * i]);
      int lo = hex_value(line[2 * i + 1]);
      ok = hi >= 0 && lo >= 0;
      digest[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    if (!ok)
      return "PGW_SERVE_KEYS_FILE=" + path + ": line " + std::to_string(number)
             + " is not a SHA-256 hex digest (64 hex digits; store digests, "
               "not keys)";
    out.digests_.push_back(digest);
  }
  if (out.digests_.empty())
    return "PGW_SERVE_KEYS_FILE=" + path + ": no key digest in the file";
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
