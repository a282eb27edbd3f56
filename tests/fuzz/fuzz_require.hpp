#pragma once

// The fuzz targets' property check: stops the run (libFuzzer keeps the
// input) naming the property that failed; and the check of text that
// reaches a terminal or a log.

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_REQUIRE(holds)                                                    \
  do {                                                                         \
    if (!(holds)) {                                                            \
      std::fprintf(stderr, "property failed, line %d: %s\n", __LINE__, #holds);\
      std::abort();                                                            \
    }                                                                          \
  } while (false)

/// No control byte (C0 or DEL): safe on a terminal, one log line.
inline bool printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f)
      return false;
  return true;
}
