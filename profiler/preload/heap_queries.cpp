// glibc's questions about its heap (mallinfo, mallinfo2, malloc_trim, malloc_stats), answered
// for the heap the program really has. Under the interposer every block is jemalloc's, and
// glibc's own answers describe glibc's arena, which holds nothing: mallinfo2 said 0 bytes in
// use with 32 MiB of blocks live, and malloc_trim(0) after they were freed left the resident
// set at 38 MiB (natively it fell to 1 MiB). A program that watches its heap (jaxlib calls
// mallinfo) or hands memory back between phases (malloc_trim, a training-loop habit) behaved
// differently under the profiler (Interposer.HeapQueriesAnswerForTheHeapInUse).
//
// The figures are jemalloc's statistics (mallctl), refreshed at each call; a jemalloc built
// without statistics leaves every call to glibc, as before. glibc's fields, in jemalloc's terms
// (pages of arenas.page bytes; summed over all arenas, or one arena's for malloc_stats):
//   arena    (active + dirty + muzzy pages): memory the heap holds from the system
//   uordblks small.allocated + large.allocated: the bytes of live blocks
//   fordblks arena - uordblks: held, in no live block
//   keepcost (dirty + muzzy pages): what malloc_trim would give back
//   ordblks, smblks, hblks, hblkhd, usmblks, fsmblks: 0. jemalloc keeps no free-chunk lists
//   and no separately mapped chunks to count: every block lives in an arena's extents.
// malloc_trim flushes the calling thread's cache of small blocks (other threads' caches are out
// of reach, as jemalloc offers no way to flush them) and purges every arena, whatever `pad`
// says (jemalloc has no heap top to leave it at). It returns 1 when pages went back.
// mallopt and malloc_info still answer for glibc's heap (docs/RECORDING.md).
#include <dlfcn.h>
#include <malloc.h>

#include <cstdint>
#include <cstdio>

#include "hook_paths.h"

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

using adprof::preload::Guard;
using adprof::preload::purge_arena;
using adprof::preload::read_ctl;
using adprof::preload::t_state;

namespace {

constexpr unsigned kAllArenas = 4096;  // jemalloc.h's MALLCTL_ARENAS_ALL: the sums of them all

// One arena's figures (`arena` = kAllArenas: the sums), in bytes.
struct HeapFigures {
  size_t held = 0;        // active + dirty + muzzy pages
  size_t live = 0;        // small + large allocated
  size_t releasable = 0;  // dirty + muzzy pages
};

bool arena_figures(unsigned arena, size_t page, HeapFigures &out) {
  size_t active = 0, dirty = 0, muzzy = 0, small = 0, large = 0;
  char name[64];
  auto read = [&](const char *field, size_t &value) {
    std::snprintf(name, sizeof name, "stats.arenas.%u.%s", arena, field);
    return read_ctl(name, value);
  };
  if (!read("pactive", active) || !read("pdirty", dirty) || !read("pmuzzy", muzzy) ||
      !read("small.allocated", small) || !read("large.allocated", large))
    return false;
  out.held = (active + dirty + muzzy) * page;
  out.live = small + large;
  out.releasable = (dirty + muzzy) * page;
  return true;
}

// jemalloc's statistics brought up to date (the "epoch" control), or false when this jemalloc
// keeps none. `page` receives the page size.
bool refresh_statistics(size_t &page) {
  static const bool kept = [] {
    bool stats = false;
    return read_ctl("config.stats", stats) && stats;
  }();
  if (!kept || !read_ctl("arenas.page", page)) return false;
  uint64_t epoch = 1;
  size_t length = sizeof epoch;
  return mallctl("epoch", &epoch, &length, &epoch, length) == 0;
}

// The totals, under the guard: what jemalloc does to gather them is not the program's.
bool total_figures(HeapFigures &out) {
  Guard guard(t_state);
  size_t page = 0;
  return refresh_statistics(page) && arena_figures(kAllArenas, page, out);
}

struct mallinfo2 mallinfo2_of(const HeapFigures &f) {
  struct mallinfo2 m = {};
  m.arena = f.held;
  m.uordblks = f.live;
  m.fordblks = f.held > f.live ? f.held - f.live : 0;
  m.keepcost = f.releasable;
  return m;
}

template <typename F>
F glibcs(const char *name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

ADPROF_EXPORT struct mallinfo2 mallinfo2(void) noexcept {
  HeapFigures f;
  if (total_figures(f)) return mallinfo2_of(f);
  static const auto real = glibcs<struct mallinfo2 (*)()>("mallinfo2");
  return real ? real() : mallinfo2_of(f);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
// The int-sized original: each field cut to an int, as glibc's mallinfo cuts mallinfo2's.
ADPROF_EXPORT struct mallinfo mallinfo(void) noexcept {
  HeapFigures f;
  if (!total_figures(f)) {
    static const auto real = glibcs<struct mallinfo (*)()>("mallinfo");
    if (real) return real();
  }
  const struct mallinfo2 m2 = mallinfo2_of(f);
  struct mallinfo m = {};
  m.arena = static_cast<int>(m2.arena);
  m.uordblks = static_cast<int>(m2.uordblks);
  m.fordblks = static_cast<int>(m2.fordblks);
  m.keepcost = static_cast<int>(m2.keepcost);
  return m;
}
#pragma GCC diagnostic pop

ADPROF_EXPORT int malloc_trim(size_t pad) noexcept {
  HeapFigures before, after;
  if (!total_figures(before)) {
    static const auto real = glibcs<int (*)(size_t)>("malloc_trim");
    return real ? real(pad) : 0;
  }
  {
    Guard guard(t_state);
    mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  }
  purge_arena(t_state, kAllArenas);
  if (!total_figures(after)) return 0;
  return after.releasable < before.releasable ? 1 : 0;
}

// glibc's layout: each arena's system and in-use bytes, then the totals (its mmapped chunks,
// which jemalloc does not make, are 0). Printed outside the guard: what stdio allocates for
// the program's stderr is the program's.
ADPROF_EXPORT void malloc_stats(void) noexcept {
  struct Line {
    unsigned arena;
    HeapFigures figures;
  };
  Line lines[64];
  unsigned count = 0;
  HeapFigures total;
  bool ok;
  {
    Guard guard(t_state);
    size_t page = 0;
    unsigned arenas = 0;
    ok = refresh_statistics(page) && read_ctl("arenas.narenas", arenas) &&
         arena_figures(kAllArenas, page, total);
    for (unsigned i = 0; ok && i < arenas && count < sizeof lines / sizeof lines[0]; ++i) {
      char name[48];
      bool initialized = false;
      std::snprintf(name, sizeof name, "arena.%u.initialized", i);
      if (read_ctl(name, initialized) && initialized &&
          arena_figures(i, page, lines[count].figures))
        lines[count++].arena = i;
    }
  }
  if (!ok) {
    static const auto real = glibcs<void (*)()>("malloc_stats");
    if (real) real();
    return;
  }
  flockfile(stderr);
  for (unsigned i = 0; i < count; ++i)
    std::fprintf(stderr, "Arena %u:\nsystem bytes     = %10u\nin use bytes     = %10u\n",
                 lines[i].arena, static_cast<unsigned>(lines[i].figures.held),
                 static_cast<unsigned>(lines[i].figures.live));
  std::fprintf(stderr,
               "Total (incl. mmap):\nsystem bytes     = %10u\nin use bytes     = %10u\n"
               "max mmap regions = %10u\nmax mmap bytes   = %10lu\n",
               static_cast<unsigned>(total.held), static_cast<unsigned>(total.live), 0u, 0ul);
  funlockfile(stderr);
}
