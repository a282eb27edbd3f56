#pragma once

/// Which malloc this process runs on, and how much of the heap is in use.
///
/// `pgw-actor` is linked with tcmalloc (gperftools' tcmalloc_minimal;
/// CMake's PGW_ALLOCATOR, default `tcmalloc`; `system` in the sanitizer and
/// fuzz builds): see README "Memory allocator". The library (libpgw) links
/// no allocator: an embedding backend keeps its own. These are found at run
/// time, so they answer for whichever malloc the process really got.

#include <cstdint>
#include <string>

namespace pgw::cli {

/// "tcmalloc 2.10" when the process's malloc is tcmalloc's (checked by
/// allocating and reading tcmalloc's own statistics), otherwise "system"
/// (glibc's malloc, or a sanitizer's).
std::string allocator_name();

/// Bytes of the heap handed out and not freed: tcmalloc's
/// `generic.current_allocated_bytes`, or glibc's `mallinfo2` (all arenas).
int64_t heap_in_use_bytes();

/// Gives the heap's free pages back to the system (tcmalloc's
/// ReleaseFreeMemory; glibc: `malloc_trim`), so that RSS figures start
/// from the heap in use.
void release_free_memory();

/// A bench header's last line: "malloc: <allocator_name()>", then the
/// blank line that ends the header.
void print_allocator();

} // namespace pgw::cli
