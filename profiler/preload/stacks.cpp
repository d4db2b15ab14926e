// Allocation call stacks: unwinding with Debian's libunwind (its local-only unw_backtrace with a
// per-thread cache: correct on libraries built without frame pointers, which most of Debian's
// are), per-thread deduplication, and the process's mappings, so that the trace symbolises after
// the program is gone. Encoding: trace_format.h, "Call stacks".
//
// The hot path (capture_stack, on every allocation when stacks are on): one unw_backtrace with
// the thread's guard raised (libunwind may allocate or map on a thread's first use: that is
// the profiler's), a hash of the frames and a probe of the thread's table. No lock, no
// allocation, no syscall. A stack the thread has not defined yet (define_stack) takes a
// process-wide id, checks whether objects were loaded or unloaded since the last scan and
// writes the stack's definition into the thread's stream, before the allocation that uses it.
//
// Loads are noticed without hooking dlopen: glibc's dlopen resolves a relative name against the
// RUNPATH of its caller, found from its return address, which a hook would replace by the
// profiler's. Every new stack first compares dl_iterate_phdr's load and unload counts
// (dlpi_adds, dlpi_subs) with those of the last scan, so an object is recorded before the first
// stack that can hold one of its frames. dlclose is hooked (it does not depend on its caller):
// the unload is recorded at once, and every thread's table is renewed (generation), since a
// later object may be loaded at the same addresses.
#include "stacks.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

namespace adprof::preload {

bool g_stacks = false;

struct StackTable {
  static constexpr uint32_t kSlots = 1u << 14;  // open addressing, linear probing
  static constexpr uint32_t kMaxUsed = kSlots / 4 * 3;
  StackTable *next;  // in the pool
  uint32_t used;
  uint32_t generation;    // g_unload_generation when it was last emptied
  uint64_t hash[kSlots];  // 0: empty
  uint32_t id[kSlots];
};

namespace {

using Backtrace = int (*)(void **, int);
Backtrace g_backtrace = nullptr;

// Leading frames in these ranges are the profiler's (hooks, recorder) or libunwind's.
struct Range {
  uintptr_t lo = 0, hi = 0;
  bool holds(uintptr_t a) const { return a >= lo && a < hi; }
};
Range g_own, g_unwind;

std::atomic<uint32_t> g_next_stack{1};
std::atomic<uint32_t> g_unload_generation{0};

pthread_mutex_t g_pool_mutex = PTHREAD_MUTEX_INITIALIZER;
StackTable *g_table_pool = nullptr;

// The objects recorded as mapped (kMappingOperand), under g_map_mutex.
struct KnownObject {
  uint64_t bias, start, end, name_hash;
  bool live, seen;
};
constexpr size_t kMaxObjects = 4096;
pthread_mutex_t g_map_mutex = PTHREAD_MUTEX_INITIALIZER;
KnownObject g_objects[kMaxObjects];
size_t g_object_count = 0;
std::atomic<unsigned long long> g_seen_adds{~0ull}, g_seen_subs{~0ull};
char g_exe_path[4096];

// What one scan found new: written into the trace after dl_iterate_phdr returns (writing may
// wait for the writer thread, which must not happen under the loader's lock).
struct NewObject {
  uint64_t bias, start, end;
  uint32_t path_at, path_length;
  uint8_t build_id[fmt::kMaxBuildIdBytes];
  uint32_t build_id_length;
};
constexpr size_t kMaxNewPerScan = 256;
constexpr size_t kScanPathBytes = 128 * 1024;
NewObject g_new[kMaxNewPerScan];
char g_scan_paths[kScanPathBytes];

void say(const char *a, const char *b = "") {
  char line[512];
  snprintf(line, sizeof line, "adprof: %s%s\n", a, b);
  ssize_t ignored = write(2, line, strlen(line));
  (void)ignored;
}

uint64_t hash_bytes(const char *s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (; *s; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 1099511628211ull;
  return h;
}

// Four independent lanes: a stack of 60 frames hashed as one dependent chain of multiplies
// cost as much as a fifth of the unwinding (perf, Python's deep stacks).
ADPROF_HOT uint64_t hash_frames(void *const *frames, int count) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  auto at = [frames](int i) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(frames[i]));
  };
  // Lanes in registers (an array of them stays in memory, one store-load chain).
  uint64_t a = 0x243F6A8885A308D3ull ^ static_cast<uint64_t>(count), b = 0x13198A2E03707344ull,
           c = 0xA4093822299F31D0ull, d = 0x082EFA98EC4E6C89ull;
  int i = 0;
  for (; i + 4 <= count; i += 4) {
    a = (a ^ at(i)) * kMul;
    b = (b ^ at(i + 1)) * kMul;
    c = (c ^ at(i + 2)) * kMul;
    d = (d ^ at(i + 3)) * kMul;
  }
  if (i < count) a = (a ^ at(i++)) * kMul;
  if (i < count) b = (b ^ at(i++)) * kMul;
  if (i < count) c = (c ^ at(i++)) * kMul;
  uint64_t h = a ^ (b >> 17 | b << 47) ^ (c >> 31 | c << 33) ^ (d >> 43 | d << 21);
  h ^= h >> 29;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 32;
  return h ? h : 1;
}

// The span of an object's PT_LOAD segments, and its GNU build-id (from its PT_NOTE segments,
// in memory: no file is read).
void object_extent(const dl_phdr_info *info, uint64_t *start, uint64_t *end, uint8_t *build_id,
                   uint32_t *build_id_length) {
  uint64_t lo = ~0ull, hi = 0;
  *build_id_length = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      lo = ph.p_vaddr < lo ? ph.p_vaddr : lo;
      hi = ph.p_vaddr + ph.p_memsz > hi ? ph.p_vaddr + ph.p_memsz : hi;
    } else if (ph.p_type == PT_NOTE && *build_id_length == 0) {
      const auto *p = reinterpret_cast<const uint8_t *>(info->dlpi_addr + ph.p_vaddr);
      const uint8_t *note_end = p + ph.p_memsz;
      while (p + sizeof(ElfW(Nhdr)) <= note_end) {
        ElfW(Nhdr) n;
        memcpy(&n, p, sizeof n);
        const uint8_t *name = p + sizeof n;
        const uint8_t *desc = name + ((n.n_namesz + 3) & ~3u);
        const uint8_t *next = desc + ((n.n_descsz + 3) & ~3u);
        if (next > note_end) break;
        if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
            n.n_descsz <= fmt::kMaxBuildIdBytes) {
          memcpy(build_id, desc, n.n_descsz);
          *build_id_length = n.n_descsz;
          break;
        }
        p = next;
      }
    }
  }
  if (lo > hi) lo = hi = 0;
  *start = info->dlpi_addr + lo;
  *end = info->dlpi_addr + hi;
}

const char *object_path(const dl_phdr_info *info, bool first) {
  if (info->dlpi_name && info->dlpi_name[0]) return info->dlpi_name;
  return first ? g_exe_path : nullptr;  // the executable has no name in the list
}

struct Counts {
  unsigned long long adds = 0, subs = 0;
};
int read_counts(dl_phdr_info *info, size_t size, void *data) {
  auto *c = static_cast<Counts *>(data);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
  }
  return 1;  // the first object carries the counts
}

struct Scan {
  size_t fresh = 0;
  size_t path_used = 0;
  bool first = true;
  bool overflow = false;
};
int scan_object(dl_phdr_info *info, size_t, void *data) {
  auto *scan = static_cast<Scan *>(data);
  const bool first = scan->first;
  scan->first = false;
  const char *path = object_path(info, first);
  if (!path) return 0;
  uint64_t start, end;
  NewObject candidate;
  object_extent(info, &start, &end, candidate.build_id, &candidate.build_id_length);
  if (start == end) return 0;
  const uint64_t name_hash = hash_bytes(path);
  for (size_t i = 0; i < g_object_count; ++i) {
    KnownObject &o = g_objects[i];
    if (o.live && o.bias == info->dlpi_addr && o.start == start && o.name_hash == name_hash) {
      o.seen = true;
      return 0;
    }
  }
  size_t length = strnlen(path, fmt::kMaxNameBytes);
  if (scan->fresh == kMaxNewPerScan || g_object_count == kMaxObjects ||
      scan->path_used + length > kScanPathBytes) {
    scan->overflow = true;  // left for the next scan
    return 0;
  }
  memcpy(g_scan_paths + scan->path_used, path, length);
  candidate.bias = info->dlpi_addr;
  candidate.start = start;
  candidate.end = end;
  candidate.path_at = static_cast<uint32_t>(scan->path_used);
  candidate.path_length = static_cast<uint32_t>(length);
  scan->path_used += length;
  g_new[scan->fresh++] = candidate;
  g_objects[g_object_count++] = {info->dlpi_addr, start, end, name_hash, true, true};
  return 0;
}

void write_mapping(ThreadState &ts, const NewObject &o) {
  if (!reserve(ts, 64 + o.path_length + o.build_id_length)) return;
  uint8_t *p = begin_event(ts, fmt::EventType::kThreadName, fmt::kMappingOperand, now_ticks());
  p = fmt::put_varint(p, o.bias);
  p = fmt::put_varint(p, o.start);
  p = fmt::put_varint(p, o.end);
  p = fmt::put_varint(p, o.path_length);
  memcpy(p, g_scan_paths + o.path_at, o.path_length);
  p += o.path_length;
  p = fmt::put_varint(p, o.build_id_length);
  memcpy(p, o.build_id, o.build_id_length);
  end_event(ts, p + o.build_id_length);
}

void write_unmapping(ThreadState &ts, const KnownObject &o) {
  if (!reserve(ts, 32)) return;
  uint8_t *p = begin_event(ts, fmt::EventType::kThreadName, fmt::kUnmappingOperand, now_ticks());
  p = fmt::put_varint(p, o.bias);
  end_event(ts, fmt::put_varint(p, o.start));
}

// Records the objects loaded and unloaded since the last scan, in this thread's stream. Cheap
// when nothing changed: the loader's counts are compared first. Guard raised by the caller.
void refresh_mappings(ThreadState &ts, bool force) {
  Counts now;
  dl_iterate_phdr(read_counts, &now);
  if (!force && now.adds == g_seen_adds.load(std::memory_order_acquire) &&
      now.subs == g_seen_subs.load(std::memory_order_acquire))
    return;
  pthread_mutex_lock(&g_map_mutex);
  for (size_t i = 0; i < g_object_count; ++i) g_objects[i].seen = false;
  Scan scan;
  dl_iterate_phdr(scan_object, &scan);
  for (size_t i = 0; i < scan.fresh; ++i) write_mapping(ts, g_new[i]);
  for (size_t i = 0; i < g_object_count; ++i) {
    KnownObject &o = g_objects[i];
    if (o.live && !o.seen && !scan.overflow) {
      o.live = false;
      write_unmapping(ts, o);
    }
  }
  // Compact: unloaded objects leave the list.
  size_t kept = 0;
  for (size_t i = 0; i < g_object_count; ++i)
    if (g_objects[i].live) g_objects[kept++] = g_objects[i];
  g_object_count = kept;
  if (!scan.overflow) {
    g_seen_adds.store(now.adds, std::memory_order_release);
    g_seen_subs.store(now.subs, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_map_mutex);
}

void *raw_mmap(size_t length) {
  long r = syscall(SYS_mmap, nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  return r == -1 ? nullptr : reinterpret_cast<void *>(r);
}

// The thread's table, emptied if an object was unloaded since (its addresses may now hold
// another's code). Null: no memory for one.
__attribute__((noinline, cold)) StackTable *renew_table(ThreadState &ts) {
  const uint32_t generation = g_unload_generation.load(std::memory_order_acquire);
  StackTable *t = ts.stacks;
  if (!t) {
    pthread_mutex_lock(&g_pool_mutex);
    t = g_table_pool;
    if (t) g_table_pool = t->next;
    pthread_mutex_unlock(&g_pool_mutex);
    if (!t) t = static_cast<StackTable *>(raw_mmap(sizeof(StackTable)));
    if (!t) return nullptr;
    ts.stacks = t;
    if (t->generation == generation && t->used != 0) return t;  // pooled, still valid
  }
  memset(t->hash, 0, sizeof t->hash);
  t->used = 0;
  t->generation = generation;
  return t;
}

__attribute__((noinline, cold)) uint32_t define_stack(ThreadState &ts, StackTable &t, uint32_t slot,
                                                      uint64_t hash, void *const *frames,
                                                      int count) {
  if (!recording()) return 0;
  ++ts.guard;
  refresh_mappings(ts, false);
  if (t.used >= StackTable::kMaxUsed) {  // full: start over (stacks are then defined again)
    memset(t.hash, 0, sizeof t.hash);
    t.used = 0;
    slot = static_cast<uint32_t>(hash) & (StackTable::kSlots - 1);
  }
  uint32_t id = 0;
  if (reserve(ts, 32 + static_cast<size_t>(count) * fmt::kMaxVarintBytes)) {
    id = g_next_stack.fetch_add(1, std::memory_order_relaxed);
    uint8_t *p = begin_event(ts, fmt::EventType::kThreadName, fmt::kStackOperand, now_ticks());
    p = fmt::put_varint(p, id);
    p = fmt::put_varint(p, static_cast<uint64_t>(count));
    uint64_t previous = 0;
    for (int i = 0; i < count; ++i) {
      const uint64_t frame = reinterpret_cast<uintptr_t>(frames[i]);
      p = i == 0 ? fmt::put_varint(p, frame)
                 : fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(frame - previous)));
      previous = frame;
    }
    end_event(ts, p);
    t.hash[slot] = hash;
    t.id[slot] = id;
    ++t.used;
  }
  --ts.guard;
  return id;
}

struct FindRange {
  uintptr_t inside;
  Range *out;
};
int find_range(dl_phdr_info *info, size_t, void *data) {
  auto *f = static_cast<FindRange *>(data);
  uint64_t start, end;
  uint8_t id[fmt::kMaxBuildIdBytes];
  uint32_t id_length;
  object_extent(info, &start, &end, id, &id_length);
  if (f->inside < start || f->inside >= end) return 0;
  f->out->lo = start;
  f->out->hi = end;
  return 1;
}

bool range_of(const void *inside, Range *out) {
  FindRange f{reinterpret_cast<uintptr_t>(inside), out};
  return dl_iterate_phdr(find_range, &f) == 1;
}

}  // namespace

uint32_t capture_stack(ThreadState &ts) {
  constexpr int kCapacity = static_cast<int>(fmt::kMaxStackFrames) + 8;  // room for our frames
  void *frames[kCapacity];
  ++ts.guard;
  const int n = g_backtrace(frames, kCapacity);
  --ts.guard;
  int first = 0;
  while (first < n && (g_own.holds(reinterpret_cast<uintptr_t>(frames[first])) ||
                       g_unwind.holds(reinterpret_cast<uintptr_t>(frames[first]))))
    ++first;
  if (first >= n) return 0;
  const int count = n - first < static_cast<int>(fmt::kMaxStackFrames)
                        ? n - first
                        : static_cast<int>(fmt::kMaxStackFrames);
  const uint64_t hash = hash_frames(frames + first, count);
  StackTable *t = ts.stacks;
  if (ADPROF_UNLIKELY(!t || t->generation != g_unload_generation.load(std::memory_order_relaxed)))
    if (!(t = renew_table(ts))) return 0;
  uint32_t slot = static_cast<uint32_t>(hash) & (StackTable::kSlots - 1);
  while (t->hash[slot] != 0) {
    if (t->hash[slot] == hash) return t->id[slot];
    slot = (slot + 1) & (StackTable::kSlots - 1);
  }
  return define_stack(ts, *t, slot, hash, frames + first, count);
}

bool init_stacks() {
  // RTLD_LOCAL: libunwind.so.8 also exports _Unwind_RaiseException & co.; in the global scope
  // they could stand in for libgcc_s's under the program's C++ exceptions.
  void *unwind = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!unwind) {
    say("--stacks: cannot load libunwind.so.8 (Debian package libunwind8); recording without "
        "call stacks");
    return false;
  }
  g_backtrace = reinterpret_cast<Backtrace>(dlsym(unwind, "unw_backtrace"));
  auto set_policy = reinterpret_cast<int (*)(unw_addr_space_t, unw_caching_policy_t)>(
      dlsym(unwind, "_ULx86_64_set_caching_policy"));
  auto set_size = reinterpret_cast<int (*)(unw_addr_space_t, size_t, int)>(
      dlsym(unwind, "_ULx86_64_set_cache_size"));
  auto *space = static_cast<unw_addr_space_t *>(dlsym(unwind, "_ULx86_64_local_addr_space"));
  if (!g_backtrace || !set_policy || !space) {
    say("--stacks: libunwind.so.8 lacks unw_backtrace; recording without call stacks");
    return false;
  }
  set_policy(*space, UNW_CACHE_PER_THREAD);
  if (set_size) set_size(*space, 1024, 0);
  if (!range_of(reinterpret_cast<const void *>(&capture_stack), &g_own) ||
      !range_of(reinterpret_cast<const void *>(g_backtrace), &g_unwind)) {
    say("--stacks: cannot find the profiler's own code; recording without call stacks");
    return false;
  }
  ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
  g_exe_path[n > 0 ? n : 0] = 0;
  void *warm[8];
  g_backtrace(warm, 8);  // libunwind's first use (allocations, its caches) happens now
  g_stacks = true;
  return true;
}

void record_initial_mappings(ThreadState &ts) {
  if (!g_stacks) return;
  ++ts.guard;
  refresh_mappings(ts, true);
  --ts.guard;
}

void release_stack_table(ThreadState &ts) {
  StackTable *t = ts.stacks;
  if (!t) return;
  ts.stacks = nullptr;
  pthread_mutex_lock(&g_pool_mutex);
  t->next = g_table_pool;
  g_table_pool = t;
  pthread_mutex_unlock(&g_pool_mutex);
}

// Called by the dlclose hook after the real dlclose.
void note_unload() {
  if (!g_stacks) return;
  g_unload_generation.fetch_add(1, std::memory_order_acq_rel);
  ThreadState &ts = t_state;
  ++ts.guard;
  if (recording()) refresh_mappings(ts, false);
  --ts.guard;
}

}  // namespace adprof::preload

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

// dlclose: forwarded, then the unload recorded (see the top of this file for why dlopen is not
// hooked).
ADPROF_EXPORT int dlclose(void *handle) {
  using Dlclose = int (*)(void *);
  static Dlclose real = reinterpret_cast<Dlclose>(dlsym(RTLD_NEXT, "dlclose"));
  const int r = real(handle);
  adprof::preload::note_unload();
  return r;
}
