// The paths every allocation hook takes, shared by the C family (hooks.cpp) and the C++
// operators (new_hooks.cpp): forward to jemalloc with the thread's guard raised (so the mmaps
// jemalloc makes for itself are not taken for the program's), then record. A free is recorded
// before the memory goes back and an allocation after it was obtained, so that across threads
// an address is never seen reused before it was freed.
#pragma once

#include <cstddef>
#include <cstdio>

#include "preload_internal.h"
#include "recorder.h"

// jemalloc's non-standard API: distinct names, so no lookup is needed to reach it before
// resolve_allocator() has run.
extern "C" {
void *mallocx(size_t size, int flags) noexcept;
void *rallocx(void *ptr, size_t size, int flags) noexcept;
void dallocx(void *ptr, int flags) noexcept;
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) noexcept;
}

namespace adprof::preload {

// RAII guard: allocations and mmaps made while it is up are jemalloc's or ours.
struct Guard {
  ThreadState &ts;
  explicit Guard(ThreadState &s) : ts(s) { ++ts.guard; }
  ~Guard() { --ts.guard; }
};

inline int align_flags(size_t alignment) { return __builtin_ctzl(alignment); }  // lg(align)

// jemalloc's control `name` read into `out`; false when it has none such.
template <typename T>
bool read_ctl(const char *name, T &out) {
  size_t length = sizeof(T);
  return mallctl(name, &out, &length, nullptr, 0) == 0;
}

// Every unused page of jemalloc's arena `arena` (4096, MALLCTL_ARENAS_ALL: of them all) given
// back, under the guard: the unmaps are jemalloc's, not the program's.
inline void purge_arena(ThreadState &ts, unsigned arena) {
  char name[48];
  snprintf(name, sizeof name, "arena.%u.purge", arena);
  Guard guard(ts);
  mallctl(name, nullptr, nullptr, nullptr, 0);
}

// Blocks from here on are mapped apart by glibc, whatever its threshold has grown to, and
// unmapped at their free (hooks.cpp, huge_block_made, purge_idle_huge_blocks).
constexpr size_t kGlibcMmapThresholdMax = size_t{32} << 20;
void huge_block_made(void *p);

ADPROF_HOT void note_alloc(ThreadState &ts, void *p, size_t size, int je_flags = 0) {
  if (ADPROF_UNLIKELY(size >= kGlibcMmapThresholdMax)) huge_block_made(p);
  if (ADPROF_LIKELY(p != nullptr) && ts.guard == 0)
    record_alloc(ts, p, size, ADPROF_SPACE_HEAP, 0, je_flags, /*with_stack=*/true);
}

ADPROF_HOT void note_free(ThreadState &ts, void *p) {
  if (ts.guard == 0) record_free(ts, p, ADPROF_SPACE_HEAP, 0, 0, true);
}

ADPROF_HOT void *malloc_path(size_t size) {
  ThreadState &ts = t_state;
  void *p;
  {
    Guard g(ts);
    p = g_real.malloc ? g_real.malloc(size) : mallocx(size ? size : 1, 0);
  }
  note_alloc(ts, p, size);
  return p;
}

ADPROF_HOT void free_path(void *p) {
  if (!p) return;
  ThreadState &ts = t_state;
  note_free(ts, p);
  Guard g(ts);
  if (g_real.free)
    g_real.free(p);
  else
    dallocx(p, 0);
}

// `alignment`: a power of two (the callers check).
inline void *aligned_path(size_t alignment, size_t size) {
  ThreadState &ts = t_state;
  void *p;
  {
    Guard g(ts);
    if (g_real.memalign)
      p = g_real.memalign(alignment, size);
    else
      p = mallocx(size ? size : 1, align_flags(alignment));
  }
  note_alloc(ts, p, size, align_flags(alignment));
  return p;
}

}  // namespace adprof::preload
