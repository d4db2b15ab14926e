// libadprof_preload.so's allocation hooks: the C allocation family and anonymous mmap. Every
// hook reads top to bottom on the paths of hook_paths.h: forward to jemalloc, then record.
// The C++ operators are in new_hooks.cpp (jemalloc exports its own: they must be hooked too).
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "hook_paths.h"

// jemalloc reads its options from this symbol at its first allocation, before any constructor
// runs (the program's MALLOC_CONF still overrides it).
// retain:false: address space jemalloc no longer uses goes back to the system, as with glibc's
// malloc, so that a program running near its RLIMIT_AS gets about as much memory as without the
// profiler (under a 400 MiB limit: 396 MiB natively, 360 with jemalloc's default, 384 with this).
// dirty_decay_ms:-1: freed pages stay with the allocator for the next allocation, as glibc's
// heap keeps them (its mmap threshold rises to the size of the blocks a program frees); with
// jemalloc's default decay a training step that frees and reallocates large tensors faulted
// them in again every step (PyTorch CNN at batch 256: 610 k page faults against glibc's 160 k,
// 1.94x the CPU time of a step; with this, 0.94x; docs/PERFORMANCE.md).
// oversize_threshold: blocks of 32 MiB and more (glibc's largest mmap threshold: it maps such
// a block apart and unmaps it at its free) go to jemalloc's huge arena, whose freed pages the
// writer gives back once the program stops making such blocks (purge_idle_huge_blocks).
extern "C" {
__attribute__((visibility("default"))) const char *malloc_conf =
    "retain:false,dirty_decay_ms:-1,oversize_threshold:33554432";
}

namespace adprof::preload {

RealAllocator g_real;

void resolve_allocator() {
  if (g_real.malloc) return;
  void *jemalloc = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (!jemalloc) return;  // keep using the *allocx API
  RealAllocator r;
  r.malloc = reinterpret_cast<decltype(r.malloc)>(dlsym(jemalloc, "malloc"));
  r.free = reinterpret_cast<decltype(r.free)>(dlsym(jemalloc, "free"));
  r.calloc = reinterpret_cast<decltype(r.calloc)>(dlsym(jemalloc, "calloc"));
  r.realloc = reinterpret_cast<decltype(r.realloc)>(dlsym(jemalloc, "realloc"));
  r.posix_memalign =
      reinterpret_cast<decltype(r.posix_memalign)>(dlsym(jemalloc, "posix_memalign"));
  r.aligned_alloc = reinterpret_cast<decltype(r.aligned_alloc)>(dlsym(jemalloc, "aligned_alloc"));
  r.memalign = reinterpret_cast<decltype(r.memalign)>(dlsym(jemalloc, "memalign"));
  if (r.malloc && r.free && r.calloc && r.realloc && r.posix_memalign && r.aligned_alloc &&
      r.memalign)
    g_real = r;
}

namespace {

// The huge arena's index, once huge_block_made() has found it (0 before: never the huge one).
std::atomic<unsigned> g_huge_arena{0};
// Blocks of kGlibcMmapThresholdMax bytes or more made so far: the writer's clock of their use.
std::atomic<uint64_t> g_huge_blocks_made{0};

}  // namespace

// The first such block finds the huge arena (arenas.lookup: its index follows the automatic
// arenas'), for the writer's purge (purge_idle_huge_blocks). A program's MALLOC_CONF that moves
// the threshold above glibc's or turns the huge arena off leaves every arena as it says.
void huge_block_made(void *p) {
  g_huge_blocks_made.fetch_add(1, std::memory_order_relaxed);
  static std::atomic<bool> settled{false};
  if (settled.load(std::memory_order_relaxed) || !p) return;
  unsigned automatic_arenas = 0, arena = 0;
  size_t threshold = 0;
  if (!read_ctl("opt.narenas", automatic_arenas)) return;
  if (!read_ctl("opt.oversize_threshold", threshold) || threshold == 0 ||
      threshold > kGlibcMmapThresholdMax) {
    settled.store(true, std::memory_order_relaxed);
    return;
  }
  size_t length = sizeof arena;
  if (mallctl("arenas.lookup", &arena, &length, &p, sizeof p) != 0 || arena != automatic_arenas)
    return;
  g_huge_arena.store(arena, std::memory_order_relaxed);
  settled.store(true, std::memory_order_relaxed);
}

// Freed blocks of 32 MiB and more: glibc unmaps each at its free. The huge arena keeps them as
// every arena here does (dirty_decay_ms:-1), and the profiled program's largest blocks stayed
// resident after their free (a 256 MiB block left 260 MiB resident, natively 1 MiB). Given back
// at each free (decay 0; jemalloc 5.3's positive decays did the same here), a block freed and
// made again each step faulted its pages in each time, as with glibc (64 MiB, 200 times: 6.7 s
// against 1.9 s kept), and a block grown by realloc, which glibc moves with mremap and jemalloc
// copies, faulted in every copy (1 MiB to 512 MiB by halves, 5 times: 4.35 s, glibc 1.81 s,
// kept 1.18 s). So the writer, at each flush tick, purges the huge arena once a whole tick has
// passed without a new huge block: while the program makes them, freed pages serve the next;
// once it stops, they leave within two ticks. Without a recording (no writer) they stay.
// Frees are not counted (their size is not known on the hot path): every idle tick purges,
// which costs a look at the arena when nothing is left to give back.
void purge_idle_huge_blocks() {
  static uint64_t seen = 0;  // the writer thread's alone
  const unsigned arena = g_huge_arena.load(std::memory_order_relaxed);
  const uint64_t made = g_huge_blocks_made.load(std::memory_order_relaxed);
  if (arena == 0 || made != seen) {
    seen = made;
    return;
  }
  purge_arena(t_state, arena);
}

}  // namespace adprof::preload

using namespace adprof::preload;

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMallocxZero = 0x40;
inline bool power_of_two(size_t x) { return x && !(x & (x - 1)); }

void *realloc_impl(void *old, size_t size) {
  ThreadState &ts = t_state;
  note_free(ts, old);
  void *p;
  {
    Guard g(ts);
    if (g_real.realloc)
      p = g_real.realloc(old, size);
    else
      p = size ? rallocx(old, size, 0) : (dallocx(old, 0), nullptr);
  }
  if (p) {
    note_alloc(ts, p, size);
  } else if (size != 0) {
    note_alloc(ts, old, sallocx(old, 0));  // failed: the old block is still live
    errno = ENOMEM;                        // as glibc's realloc (jemalloc's may not set it)
  }
  return p;
}

}  // namespace

ADPROF_EXPORT void *malloc(size_t size) noexcept { return malloc_path(size); }

ADPROF_EXPORT void free(void *p) noexcept { free_path(p); }

ADPROF_EXPORT void *calloc(size_t count, size_t size) noexcept {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  ThreadState &ts = t_state;
  void *p;
  {
    Guard g(ts);
    p = g_real.calloc ? g_real.calloc(count, size) : mallocx(total ? total : 1, kMallocxZero);
  }
  note_alloc(ts, p, total);
  return p;
}

ADPROF_EXPORT void *realloc(void *old, size_t size) noexcept {
  if (!old) return malloc(size);
  return realloc_impl(old, size);
}

ADPROF_EXPORT void *reallocarray(void *old, size_t count, size_t size) noexcept {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(old, total);
}

// The aligned family follows glibc's rules (malloc.c, _mid_memalign), not jemalloc's, so that a
// program gets under the profiler what it gets without it: an alignment that is no power of
// two is rounded up to the next one (jemalloc alone fails it with EINVAL; memalign(48, 64) is
// a 64-aligned block under glibc), one of 0 is malloc's own, one above SIZE_MAX / 2 + 1 is
// EINVAL; a failure for want of memory sets errno to ENOMEM, as every glibc allocation function
// does (jemalloc's memalign, which the family forwards to, leaves errno as it was: a program
// printing strerror(errno) after valloc(SIZE_MAX) said "Success"). Cold paths only: a valid
// request takes aligned_path as before.
namespace {

constexpr size_t kMallocAlignment = alignof(max_align_t);  // glibc's MALLOC_ALIGNMENT

// glibc's alignment for `alignment`; 0 when glibc fails it with EINVAL.
size_t glibc_alignment(size_t alignment) {
  if (power_of_two(alignment)) return alignment;
  if (alignment <= kMallocAlignment) return kMallocAlignment;  // 0, 3, 12: malloc's
  if (alignment > SIZE_MAX / 2 + 1) return 0;
  return size_t{1} << (64 - __builtin_clzl(alignment));  // the next power of two
}

void *memalign_impl(size_t alignment, size_t size) {
  const size_t effective = glibc_alignment(alignment);
  if (effective == 0) {
    errno = EINVAL;
    return nullptr;
  }
  void *p = aligned_path(effective, size);
  if (!p) errno = ENOMEM;
  return p;
}

// glibc 2.38 made aligned_alloc follow C17: an alignment of 0 or one that is no power of two is
// EINVAL (memalign still rounds). Which rule a program gets is its glibc's.
bool aligned_alloc_is_strict() {
  static const bool strict = [] {  // "2.36": parsed by hand (a hook calls nothing that allocates)
    const char *v = gnu_get_libc_version();
    unsigned major = 0, minor = 0;
    for (; *v >= '0' && *v <= '9'; ++v) major = major * 10 + static_cast<unsigned>(*v - '0');
    if (*v++ != '.') return false;
    for (; *v >= '0' && *v <= '9'; ++v) minor = minor * 10 + static_cast<unsigned>(*v - '0');
    return major > 2 || (major == 2 && minor >= 38);
  }();
  return strict;
}

}  // namespace

ADPROF_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) noexcept {
  if (alignment == 0 || !power_of_two(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  void *p = aligned_path(alignment, size);
  if (!p) {
    errno = ENOMEM;  // glibc's memalign sets it on the way, and programs read it
    return ENOMEM;
  }
  *out = p;
  return 0;
}

ADPROF_EXPORT void *aligned_alloc(size_t alignment, size_t size) noexcept {
  if (aligned_alloc_is_strict() && !power_of_two(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return memalign_impl(alignment, size);
}

ADPROF_EXPORT void *memalign(size_t alignment, size_t size) noexcept {
  return memalign_impl(alignment, size);
}

ADPROF_EXPORT void *valloc(size_t size) noexcept {
  return memalign_impl(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
}

ADPROF_EXPORT void *pvalloc(size_t size) noexcept {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t rounded = size ? (size + page - 1) & ~(page - 1) : page;
  if (rounded < size) {
    errno = ENOMEM;
    return nullptr;
  }
  return memalign_impl(page, rounded);
}

ADPROF_EXPORT size_t malloc_usable_size(void *p) noexcept { return p ? sallocx(p, 0) : 0; }

// ---- anonymous mappings (BLAS and other libraries map their buffers) --------------------------

namespace {
void *mmap_impl(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
  void *r = reinterpret_cast<void *>(syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
  ThreadState &ts = t_state;
  if (r != MAP_FAILED && (flags & MAP_ANONYMOUS) && prot != PROT_NONE && ts.guard == 0)
    record_alloc(ts, r, length, ADPROF_SPACE_MMAP, 0, 0, /*with_stack=*/true);
  return r;
}
}  // namespace

ADPROF_EXPORT void *mmap(void *addr, size_t length, int prot, int flags, int fd,
                         off_t offset) noexcept {
  return mmap_impl(addr, length, prot, flags, fd, offset);
}

ADPROF_EXPORT void *mmap64(void *addr, size_t length, int prot, int flags, int fd,
                           off_t offset) noexcept {
  return mmap_impl(addr, length, prot, flags, fd, offset);
}

ADPROF_EXPORT int munmap(void *addr, size_t length) noexcept {
  ThreadState &ts = t_state;
  if (ts.guard == 0) record_free(ts, addr, ADPROF_SPACE_MMAP, length, 0);
  return static_cast<int>(syscall(SYS_munmap, addr, length));
}

ADPROF_EXPORT void *mremap(void *old, size_t old_length, size_t new_length, int flags,
                           ...) noexcept {
  void *wanted = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    wanted = va_arg(ap, void *);
    va_end(ap);
  }
  ThreadState &ts = t_state;
  bool record = ts.guard == 0;
  void *r =
      reinterpret_cast<void *>(syscall(SYS_mremap, old, old_length, new_length, flags, wanted));
  if (record && r != MAP_FAILED) {
    record_free(ts, old, ADPROF_SPACE_MMAP, old_length, 0);
    record_alloc(ts, r, new_length, ADPROF_SPACE_MMAP, 0, 0, /*with_stack=*/true);
  }
  return r;
}
