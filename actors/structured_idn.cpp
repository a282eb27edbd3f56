// Draft 7's internationalized formats: idn-hostname (RFC 5890, IDNA2008)
// and idn-email (RFC 6531). libidn2 (Debian's libidn2-dev) holds what no
// code of ours should: IDNA2008's tables of allowed code points (derived
// from Unicode's properties), NFC, punycode, the joiner (CONTEXTJ) and
// bidi rules. pgw adds the rules libidn2 leaves to its caller: RFC 5892's
// CONTEXTO rules, the reserved "--" of an ASCII label, and the hostname's
// lengths and characters once encoded.

#include "actors/structured_checks.hpp"

#include "actors/structured_check_kit.hpp"

#include <idn2.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace pgw {

namespace {

/// The code points of `text` (valid UTF-8, as a JSON string is), or empty
/// when it is not.
std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3
                                              : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > text.size())
      return {};
    char32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xc0) != 0x80)
        return {};
      cp = (cp << 6) | (d & 0x3f);
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

bool in(char32_t c, char32_t lo, char32_t hi) {
  return c >= lo && c <= hi;
}

bool greek(char32_t c) {
  return (in(c, 0x0370, 0x03ff) && c != 0x0375) || in(c, 0x1f00, 0x1fff);
}

bool hebrew(char32_t c) {
  return in(c, 0x0591, 0x05f2) || in(c, 0xfb1d, 0xfb4f);
}

/// Hiragana, Katakana (but the middle dot itself) or Han.
bool japanese(char32_t c) {
  return in(c, 0x3040, 0x309f) || (in(c, 0x30a0, 0x30ff) && c != 0x30fb)
         || in(c, 0x31f0, 0x31ff) || in(c, 0xff66, 0xff9f)
         || in(c, 0x3005, 0x3007) || in(c, 0x3021, 0x3029)
         || in(c, 0x3400, 0x4dbf) || in(c, 0x4e00, 0x9fff)
         || in(c, 0xf900, 0xfaff) || in(c, 0x20000, 0x3134f);
}

/// RFC 5892 appendix A.3-A.9 (CONTEXTO) over one label's code points.
bool contexto(const std::vector<char32_t>& label) {
  bool arabic_indic = false;
  bool extended = false;
  bool any_japanese = false;
  bool middle_dot = false;
  for (size_t i = 0; i < label.size(); ++i) {
    char32_t c = label[i];
    char32_t before = i > 0 ? label[i - 1] : 0;
    char32_t after = i + 1 < label.size() ? label[i + 1] : 0;
    if (c == 0x00b7 && !(before == 'l' && after == 'l'))
      return false; // MIDDLE DOT, only in "l·l" (Catalan)
    if (c == 0x0375 && !greek(after))
      return false; // GREEK LOWER NUMERAL SIGN, before Greek
    if ((c == 0x05f3 || c == 0x05f4) && !hebrew(before))
      return false; // HEBREW GERESH and GERSHAYIM, after Hebrew
    arabic_indic = arabic_indic || in(c, 0x0660, 0x0669);
    extended = extended || in(c, 0x06f0, 0x06f9);
    any_japanese = any_japanese || japanese(c);
    middle_dot = middle_dot || c == 0x30fb;
  }
  // Arabic-Indic digits and the extended ones are never mixed; KATAKANA
  // MIDDLE DOT needs a Hiragana, Katakana or Han character beside it.
  return !(arabic_indic && extended) && (!middle_dot || any_japanese);
}

/// Each label's CONTEXTO rules, and no ASCII label with "--" at its third
/// and fourth characters unless it is an A-label (xn--), which libidn2
/// decodes and checks.
bool labels_allowed(std::string_view text) {
  return each_label(text, [](std::string_view label) {
    bool a_label = label.size() > 4 && (label[0] | 0x20) == 'x'
                   && (label[1] | 0x20) == 'n';
    if (label.size() >= 4 && label.substr(2, 2) == "--" && !a_label)
      return false;
    auto points = code_points(label);
    return (!points.empty() || label.empty()) && contexto(points);
  });
}

/// A hostname's longest text as UTF-8 (253 bytes encoded; a label's
/// character takes at most 4 bytes): past it nothing is read.
constexpr size_t max_idn_bytes = 4 * 253;

bool idn_hostname(std::string_view text) {
  if (text.empty() || text.size() > max_idn_bytes
      || text.find('\0') != std::string_view::npos || !labels_allowed(text))
    return false;
  // IDNA2008 proper, without UTS #46's mapping (which would take "ＡＢ" or
  // "ℐ" for "ab" and "i": an answer must already be what it names).
  char* encoded = nullptr;
  int rc = idn2_lookup_u8(reinterpret_cast<const uint8_t*>(std::string(text).c_str()),
                          reinterpret_cast<uint8_t**>(&encoded), IDN2_NO_TR46);
  std::unique_ptr<char, decltype(&idn2_free)> owned{encoded, &idn2_free};
  return rc == IDN2_OK && encoded != nullptr
         && !format_problem("hostname", encoded);
}

/// RFC 6531: RFC 5321's Mailbox where the local part may also hold UTF-8
/// (in a dot-atom or a quoted string) and the domain is an idn-hostname
/// (or an address literal).
bool idn_email(std::string_view text) {
  auto at = text.rfind('@');
  if (at == std::string_view::npos || text.size() > 64 + 1 + max_idn_bytes)
    return false;
  // Each byte of a non-ASCII character stands where an ASCII letter
  // may: the local part's syntax and its 64 bytes are RFC 5321's.
  std::string local{text.substr(0, at)};
  for (auto& c : local)
    if (static_cast<unsigned char>(c) >= 0x80)
      c = 'a';
  if (code_points(text.substr(0, at)).empty())
    return false;
  auto domain = text.substr(at + 1);
  bool literal = !domain.empty() && domain.front() == '[';
  if (format_problem("email", local + (literal ? "@" + std::string(domain)
                                               : std::string("@a"))))
    return false;
  return literal || idn_hostname(domain);
}

} // namespace

bool idn_format(std::string_view format, std::string_view text) {
  if (format == "idn-hostname")
    return idn_hostname(text);
  if (format == "idn-email")
    return idn_email(text);
  return true;
}

} // namespace pgw
