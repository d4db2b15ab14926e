// What the hooks and the recorder share beyond the event encoders.
#pragma once

#include <cstddef>

namespace adprof::preload {

// jemalloc's own entry points, resolved once at start-up (dlsym on libjemalloc's handle). Until
// then the hooks call jemalloc's non-standard API (mallocx & co.), which needs no resolution.
struct RealAllocator {
  void *(*malloc)(size_t) = nullptr;
  void (*free)(void *) = nullptr;
  void *(*calloc)(size_t, size_t) = nullptr;
  void *(*realloc)(void *, size_t) = nullptr;
  int (*posix_memalign)(void **, size_t, size_t) = nullptr;
  void *(*aligned_alloc)(size_t, size_t) = nullptr;
  void *(*memalign)(size_t, size_t) = nullptr;
};
extern RealAllocator g_real;

void resolve_allocator();

// The huge arena's freed pages given back once idle (hooks.cpp): the writer's flush tick.
void purge_idle_huge_blocks();

// Memory of the profiler's own (trace buffers, heap coders, stack tables, the writer's scratch),
// mapped by a raw system call (no hook sees it) and wiped on fork: a fork child, which records
// nothing, gets zeroed pages for it instead of copies, so that a fork neither copies its page
// tables nor leaves the parent to copy each page it writes next (buffer_pool.cpp, profiler_mmap).
// Null when no memory is left. `wipe_on_fork` false: copied into a fork child as any memory
// (zstd's contexts, which a fork child goes on compressing with).
void *profiler_mmap(size_t length, bool wipe_on_fork = true);

}  // namespace adprof::preload
