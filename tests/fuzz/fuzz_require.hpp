#pragma once

// The fuzz targets' property check: stops the run (libFuzzer keeps the
// input) naming the property that failed.

#include <cstdio>
#include <cstdlib>

#define FUZZ_REQUIRE(holds)                                                    \
  do {                                                                         \
    if (!(holds)) {                                                            \
      std::fprintf(stderr, "property failed, line %d: %s\n", __LINE__, #holds);\
      std::abort();                                                            \
    }                                                                          \
  } while (false)
