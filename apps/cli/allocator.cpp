#include "apps/cli/allocator.hpp"

#include <dlfcn.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pgw::cli {

namespace {

// gperftools' C interface (gperftools/malloc_extension_c.h), found at run
// time: null when tcmalloc is not loaded.
using property_fn = int (*)(const char*, size_t*);
using release_fn = void (*)();
using version_fn = const char* (*)(int*, int*, const char**);

template <class Fn>
Fn symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

/// tcmalloc's bytes in use by the program; -1 when tcmalloc is not loaded.
int64_t tcmalloc_allocated() {
  static auto get = symbol<property_fn>("MallocExtension_GetNumericProperty");
  size_t bytes = 0;
  if (get == nullptr || get("generic.current_allocated_bytes", &bytes) == 0)
    return -1;
  return static_cast<int64_t>(bytes);
}

/// True when malloc is tcmalloc's: a 4 MiB block shows in its statistics
/// (a loaded tcmalloc whose malloc is not the one called would not count
/// it).
bool malloc_is_tcmalloc() {
  static const bool is = [] {
    auto before = tcmalloc_allocated();
    if (before < 0)
      return false;
    constexpr size_t size = size_t{4} << 20;
    void* block = std::malloc(size);
    if (block == nullptr)
      return false;
    std::memset(block, 1, 64); // used, so the call is not elided
    auto during = tcmalloc_allocated();
    std::free(block);
    return during - before >= static_cast<int64_t>(size);
  }();
  return is;
}

} // namespace

std::string allocator_name() {
  if (!malloc_is_tcmalloc())
    return "system";
  auto version = symbol<version_fn>("tc_version");
  int major = 0, minor = 0;
  const char* patch = "";
  if (version == nullptr)
    return "tcmalloc";
  version(&major, &minor, &patch);
  return "tcmalloc " + std::to_string(major) + "." + std::to_string(minor)
         + (patch != nullptr ? patch : "");
}

int64_t heap_in_use_bytes() {
  if (malloc_is_tcmalloc())
    return tcmalloc_allocated();
  auto mi = ::mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
}

void release_free_memory() {
  if (malloc_is_tcmalloc()) {
    static auto release = symbol<release_fn>("MallocExtension_ReleaseFreeMemory");
    if (release != nullptr)
      release();
    return;
  }
  ::malloc_trim(0);
}

void print_allocator() {
  std::printf("malloc: %s\n\n", allocator_name().c_str());
}

} // namespace pgw::cli
