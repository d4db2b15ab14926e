// Allocation call stacks: a frame walker with a per-thread memo of the previous stack, Debian's
// libunwind where the walker cannot go, per-thread deduplication, and the process's mappings, so
// that the trace symbolises after the program is gone. Encoding: trace_format.h, "Call stacks".
//
// The hot path (capture_stack, on every allocation when stacks are on) walks the frames itself,
// with the unwind rules of the code (unwind_rules.h: read once per pc from .eh_frame and cached
// per thread; correct on code without frame pointers, which most of Debian's is), the way
// libunwind's fast trace does, and gives the same frames (return address - 1). Consecutive
// allocations share most outer frames, so it does not walk them again: the thread's memo holds
// the previous walk, each frame's state (pc, stack pointer, rbp where the rest of the walk
// depends on it) and every stack slot the walk read from there outward (return addresses, saved
// rbp) with the value read. The walk is a function of the state and of those values; so when a
// frame's state equals the memo's frame at the same stack pointer and every slot outward still
// holds its value (one load and compare each, no unwind rule), the rest of the stack is the
// memo's. Frames the walker cannot replay (signal frames, DWARF expressions, code without unwind
// tables) send the whole stack to libunwind's unw_backtrace (per-thread cache) as before.
// ADPROF_STACKS_CHECK=1 (tests) unwinds every stack both ways and counts the differences.
//
// Then a hash of the frames (from the memo's prefix hashes: only the new inner frames are
// hashed) and a probe of the thread's table. No lock, no allocation, no syscall. A stack the
// thread has not defined yet (define_stack) takes a process-wide id, checks whether objects were
// loaded or unloaded since the last scan and writes the stack's definition into the thread's
// stream, before the allocation that uses it.
//
// Loads are noticed without hooking dlopen: glibc's dlopen resolves a relative name against the
// RUNPATH of its caller, found from its return address, which a hook would replace by the
// profiler's. Every new stack first compares dl_iterate_phdr's load and unload counts
// (dlpi_adds, dlpi_subs) with those of the last scan, so an object is recorded before the first
// stack that can hold one of its frames. dlclose is hooked (it does not depend on its caller):
// the unload is recorded at once, and every thread's table, rules and memo are renewed
// (generation), since a later object may be loaded at the same addresses.
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
#include <cstdlib>
#include <cstring>

#include "preload_internal.h"
#include "python_stacks.h"
#include "unwind_rules.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>

namespace adprof::preload {

bool g_stacks = false;

// The frame walker's limits: as many frames as libunwind's buffer had (the profiler's own
// leading frames and kMaxStackFrames of the program's), plus the starting frame.
constexpr int kWalkFrames = static_cast<int>(fmt::kMaxStackFrames) + 8;
constexpr int kWalkStates = kWalkFrames + 1;
// The memo's: a stack spliced from new inner frames and the memo's outer ones may be deeper
// than one walk goes (its innermost kMaxStackFrames are recorded).
constexpr int kMemoStates = 256;

// One frame of a walk, its registers when it called its callee: pc (a return address, or the
// walk's start), stack pointer (the callee's CFA) and rbp.
struct FrameState {
  uint64_t ip, sp, bp;
};

// The previous walk of this thread, outermost frame first (index 0), up to the end of the stack.
// checks[0, frame[k].checks) are the stack slots that the walk from frame k outward read, with
// the values read; bp_matters[k]: the walk from frame k reads rbp before it reloads it.
struct Memo {
  uint32_t frames;  // 0: none
  uint32_t last_id;
  uint64_t last_hash;  // the stack id of the last capture, and its hash (0: none)
  FrameState frame[kMemoStates];
  uint64_t hash[kMemoStates];  // the frames' values (ip - 1) from the outermost to this one
  uint32_t checks_to[kMemoStates];
  uint8_t bp_matters[kMemoStates];
  struct Check {
    uint64_t addr, value;
  } check[2 * kMemoStates];
};

// A frame of the current walk (innermost first): its state and what its step read.
struct WalkStep {
  FrameState state;
  uint64_t ra_slot, bp_slot;  // bp_slot 0: rbp not reloaded
  uint64_t ra;                // the value at ra_slot (the next frame's ip)
  uint8_t flags;              // UnwindRule::Flags of the step
};

struct StackTable {
  static constexpr uint32_t kSlots = 1u << 14;  // open addressing, linear probing
  static constexpr uint32_t kMaxUsed = kSlots / 4 * 3;
  static constexpr uint32_t kRuleSlots = 1u << 12;
  static constexpr uint32_t kRuleProbes = 4;
  StackTable *next;  // in the pool
  uint32_t used;
  uint32_t generation;    // g_unload_generation when it was last emptied
  bool busy;              // a capture is walking (a signal handler's allocation uses libunwind)
  uint32_t rule_evict;    // round robin among a full probe sequence
  uint64_t hash[kSlots];  // 0: empty
  uint32_t id[kSlots];
  UnwindRule rules[kRuleSlots];  // by pc; kind kEmpty: free
  Memo memo;
  WalkStep walk[kWalkStates];
  // The stack this thread defined last, and the chunk (buffer sequence number) it was defined
  // in: a new stack is written against its outer frames (kSharedStackOperand).
  uint64_t last_defined[fmt::kMaxStackFrames];
  int last_defined_count;
  uint32_t last_defined_seq;
  uint32_t last_defined_id;  // the base of the next definition's id in the same chunk
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
  uint8_t *p =
      begin_coarse_event(ts, fmt::EventType::kThreadName, fmt::kMappingOperand, now_ticks());
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
  uint8_t *p =
      begin_coarse_event(ts, fmt::EventType::kThreadName, fmt::kUnmappingOperand, now_ticks());
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
    if (!t) t = static_cast<StackTable *>(profiler_mmap(sizeof(StackTable)));
    if (!t) return nullptr;
    ts.stacks = t;
    // A pooled table's memo is a dead thread's stack: never read it.
    t->memo.frames = 0;
    t->memo.last_hash = 0;
    t->busy = false;
    t->last_defined_count = 0;
    if (t->generation == generation && t->used != 0) return t;  // pooled, still valid
  }
  memset(t->hash, 0, sizeof t->hash);
  memset(static_cast<void *>(t->rules), 0, sizeof t->rules);  // kind kEmpty
  t->used = 0;
  t->memo.frames = 0;
  t->memo.last_hash = 0;
  t->generation = generation;
  return t;
}

__attribute__((noinline, cold)) uint32_t define_stack(ThreadState &ts, StackTable &t, uint32_t slot,
                                                      uint64_t hash, const uint64_t *frames,
                                                      int count) {
  if (!recording()) return 0;
  ++ts.guard;
  refresh_mappings(ts, false);
  // A Python thread's frames (python_stacks.h): those of its shadow stack in place of the
  // interpreter's; the hash already holds them.
  uint64_t spliced[fmt::kMaxStackFrames];
  if (ts.python) {
    memcpy(spliced, frames, static_cast<size_t>(count) * sizeof *frames);
    count = splice_python_frames(ts, spliced, count);
    frames = spliced;
  }
  if (t.used >= StackTable::kMaxUsed) {  // full: start over (stacks are then defined again)
    memset(t.hash, 0, sizeof t.hash);
    t.used = 0;
    slot = static_cast<uint32_t>(hash) & (StackTable::kSlots - 1);
  }
  uint32_t id = 0;
  if (reserve(ts, 32 + static_cast<size_t>(count) * fmt::kMaxVarintBytes)) {
    id = g_next_stack.fetch_add(1, std::memory_order_relaxed);
    // The outer frames it shares with the stack defined last in this chunk (trace_format.h,
    // kSharedStackOperand): a chunk still decodes alone.
    // Its id is written against the id of that definition (0 at the chunk's first).
    int shared = 0;
    uint32_t id_base = 0;
    if (t.last_defined_count > 0 && t.last_defined_seq == ts.buf->seq) {
      id_base = t.last_defined_id;
      while (shared < count && shared < t.last_defined_count &&
             frames[count - 1 - shared] == t.last_defined[t.last_defined_count - 1 - shared])
        ++shared;
    }
    uint8_t *p =
        begin_coarse_event(ts, fmt::EventType::kThreadName,
                           shared ? fmt::kSharedStackOperand : fmt::kStackOperand, now_ticks());
    p = fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(id) - id_base));
    p = fmt::put_varint(p, static_cast<uint64_t>(count));
    if (shared) p = fmt::put_varint(p, static_cast<uint64_t>(shared));
    uint64_t previous = 0;
    for (int i = 0; i < count - shared; ++i) {
      const uint64_t frame = frames[i];
      p = i == 0 ? fmt::put_varint(p, frame)
                 : fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(frame - previous)));
      previous = frame;
    }
    end_event(ts, p);
    memcpy(t.last_defined, frames, static_cast<size_t>(count) * sizeof *frames);
    t.last_defined_count = count;
    t.last_defined_seq = ts.buf->seq;
    t.last_defined_id = id;
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

namespace {

// The hash of a stack from the outermost frame in: one step per frame, so that a stack that
// shares its outer frames with the memo's hashes only its new inner frames.
ADPROF_HOT uint64_t hash_step(uint64_t h, uint64_t value) {
  return ((h << 23 | h >> 41) ^ value) * 0x9E3779B97F4A7C15ull;
}
constexpr uint64_t kHashSeed = 0x243F6A8885A308D3ull;
ADPROF_HOT uint64_t hash_final(uint64_t h, int count) {
  h ^= static_cast<uint64_t>(count);
  h ^= h >> 29;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 32;
  return h ? h : 1;
}

bool own_frame(uint64_t value) { return g_own.holds(value) || g_unwind.holds(value); }

// Whether `ra` is the kernel's return into a signal trampoline (x86-64 __restore_rt: mov
// $15,%rax; syscall): its caller is no call but the interrupted code, and ra - 1 may fall in
// the previous function's unwind rules (glibc covers it with the trampoline's own FDE; other
// code need not). libunwind and GCC's unwinder test the same bytes. The trampoline is
// 16-aligned, so its first 9 bytes never cross into another page.
bool returns_to_sigreturn(uint64_t ra) {
  static constexpr uint8_t kCode[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
  if ((ra & 4095) > 4096 - sizeof kCode) return false;
  return memcmp(reinterpret_cast<const void *>(ra), kCode, sizeof kCode) == 0;
}

__attribute__((noinline, cold)) const UnwindRule *fill_rule(StackTable &t, uint64_t pc,
                                                            uint32_t slot) {
  UnwindRule *target = nullptr;
  for (uint32_t i = 0; i < StackTable::kRuleProbes && !target; ++i) {
    UnwindRule &r = t.rules[(slot + i) & (StackTable::kRuleSlots - 1)];
    if (r.kind == UnwindRule::kEmpty) target = &r;
  }
  if (!target)
    target =
        &t.rules[(slot + t.rule_evict++ % StackTable::kRuleProbes) & (StackTable::kRuleSlots - 1)];
  *target = find_unwind_rule(pc);
  if (returns_to_sigreturn(pc + 1)) target->kind = UnwindRule::kUnsupported;
  return target;
}

ADPROF_HOT const UnwindRule *rule_for(StackTable &t, uint64_t pc) {
  const uint32_t slot = static_cast<uint32_t>((pc * 0x9E3779B97F4A7C15ull) >> 52);
  for (uint32_t i = 0; i < StackTable::kRuleProbes; ++i) {
    const UnwindRule &r = t.rules[(slot + i) & (StackTable::kRuleSlots - 1)];
    if (r.pc == pc) return &r;
    if (r.kind == UnwindRule::kEmpty) break;
  }
  return fill_rule(t, pc, slot);
}

// How many of the memo's checks [from, to) hold, counted from `from`: the first that does not
// (or `to`). Checks are in the order of the frames, outermost first.
ADPROF_HOT uint32_t checks_holding(const Memo &m, uint32_t from, uint32_t to) {
  uint32_t i = from;
  while (i < to && *reinterpret_cast<const uint64_t *>(m.check[i].addr) == m.check[i].value) ++i;
  return i;
}

// Puts walk steps [0, inner) (innermost first) into the memo above frame `base` (outermost
// first; -1: none), and the step `inner` itself when base is -1 (the walk's last frame, which
// ended it: `last_read` says whether its step read a return address below 0x4000).
ADPROF_HOT void memo_push(Memo &m, const WalkStep *walk, int inner, int base) {
  int k = base;
  uint32_t checks = k >= 0 ? m.checks_to[k] : 0;
  bool bp_matters = k >= 0 ? m.bp_matters[k] : false;
  uint64_t h = k >= 0 ? m.hash[k] : kHashSeed;
  for (int j = inner - 1; j >= 0; --j) {
    const WalkStep &w = walk[j];
    ++k;
    m.frame[k] = w.state;
    m.check[checks++] = {w.ra_slot, w.ra};
    if ((w.flags & UnwindRule::kRbpSaved) && bp_matters)
      m.check[checks++] = {w.bp_slot, walk[j + 1].state.bp};
    bp_matters =
        (w.flags & UnwindRule::kCfaFromRbp) || (!(w.flags & UnwindRule::kRbpSaved) && bp_matters);
    m.checks_to[k] = checks;
    m.bp_matters[k] = bp_matters;
    h = hash_step(h, w.state.ip - 1);
    m.hash[k] = h;
  }
  m.frames = static_cast<uint32_t>(k + 1);
}

struct CheckCounts {
  std::atomic<uint64_t> captures{0}, reused{0}, by_libunwind{0}, differences{0};
};
CheckCounts g_check_counts;
bool g_check = false;

enum class Walk { kEnded, kSpliced, kCapped, kUnsupported };

// Walks this thread's stack from the caller's frame (see capture_stack), reusing the memo's
// outer frames where they still hold. Fills the memo (kEnded, kSpliced) or `values` (kCapped:
// the first kWalkFrames frames' values, *count of them).
ADPROF_HOT Walk walk_stack(StackTable &t, FrameState state, uint64_t *values, int *count) {
  Memo &m = t.memo;
  WalkStep *walk = t.walk;
  int q = static_cast<int>(m.frames) - 1;  // the memo's frame to compare with, by stack pointer
  // The memo's checks [0, good) hold; check `good` does not, when good < the memo's.
  uint32_t good = 0;
  bool differs = false;
  for (int n = 0;; ++n) {
    WalkStep &w = walk[n];
    w.state = state;
    while (q >= 0 && m.frame[q].sp < state.sp) --q;
    if (q >= 0 && m.frame[q].sp == state.sp && m.frame[q].ip == state.ip &&
        (!m.bp_matters[q] || m.frame[q].bp == state.bp) && q + 1 + n <= kMemoStates) {
      // A frame further out may still be the memo's when this one is not: above the slot that
      // changed (a call from another site of the same caller, at the same depth).
      const uint32_t need = m.checks_to[q];
      if (need <= good || (!differs && (good = checks_holding(m, good, need)) == need)) {
        memo_push(m, walk, n, q);
        return Walk::kSpliced;
      }
      differs = true;
    }
    if (n + 1 == kWalkStates) {
      for (int j = 1; j <= n; ++j) values[j - 1] = walk[j].state.ip - 1;
      *count = n;
      m.frames = 0;
      return Walk::kCapped;
    }
    const UnwindRule *r = rule_for(t, n == 0 ? state.ip : state.ip - 1);
    if (ADPROF_UNLIKELY(r->kind != UnwindRule::kStandard)) {
      if (r->kind != UnwindRule::kLast) {
        m.frames = 0;
        return Walk::kUnsupported;
      }
      // The outermost frame: nothing read.
      m.frame[0] = state;
      m.checks_to[0] = 0;
      m.bp_matters[0] = false;
      m.hash[0] = hash_step(kHashSeed, state.ip - 1);
      memo_push(m, walk, n, 0);
      return Walk::kEnded;
    }
    const uint64_t cfa = ((r->flags & UnwindRule::kCfaFromRbp) ? state.bp : state.sp) +
                         static_cast<int64_t>(r->cfa_offset);
    w.flags = r->flags;
    w.ra_slot = cfa - 8;
    w.ra = *reinterpret_cast<const uint64_t *>(w.ra_slot);
    if (r->flags & UnwindRule::kRbpSaved) {
      w.bp_slot = cfa + static_cast<int64_t>(r->rbp_offset);
      state.bp = *reinterpret_cast<const uint64_t *>(w.bp_slot);
    }
    state.sp = cfa;
    state.ip = w.ra;
    if (ADPROF_UNLIKELY(w.ra < 0x4000)) {  // as libunwind: the end, this frame not recorded
      m.frame[0] = w.state;
      m.check[0] = {w.ra_slot, w.ra};
      m.checks_to[0] = 1;
      m.bp_matters[0] = (w.flags & UnwindRule::kCfaFromRbp) != 0;
      m.hash[0] = hash_step(kHashSeed, w.state.ip - 1);
      memo_push(m, walk, n, 0);
      return Walk::kEnded;
    }
  }
}

// The frames of the memo's stack, innermost program frame first (the profiler's left out),
// at most kMaxStackFrames; the number of them.
int memo_values(const Memo &m, uint64_t *values) {
  int k = static_cast<int>(m.frames) - 2;  // the innermost frame is the walk's start
  while (k >= 0 && own_frame(m.frame[k].ip - 1)) --k;
  int count = 0;
  for (; k >= 0 && count < static_cast<int>(fmt::kMaxStackFrames); --k)
    values[count++] = m.frame[k].ip - 1;
  return count;
}

// libunwind's frames, the profiler's left out, at most kMaxStackFrames; the first in *first.
__attribute__((noinline)) int libunwind_frames(ThreadState &ts, void **frames, int *first) {
  ++ts.guard;
  const int n = g_backtrace(frames, kWalkFrames);
  --ts.guard;
  int f = 0;
  while (f < n && own_frame(reinterpret_cast<uintptr_t>(frames[f]))) ++f;
  *first = f;
  return n - f < static_cast<int>(fmt::kMaxStackFrames) ? n - f
                                                        : static_cast<int>(fmt::kMaxStackFrames);
}

ADPROF_HOT uint32_t stack_id(ThreadState &ts, StackTable &t, uint64_t hash, const uint64_t *frames,
                             int count) {
  uint32_t slot = static_cast<uint32_t>(hash) & (StackTable::kSlots - 1);
  while (t.hash[slot] != 0) {
    if (t.hash[slot] == hash) return t.id[slot];
    slot = (slot + 1) & (StackTable::kSlots - 1);
  }
  return define_stack(ts, t, slot, hash, frames, count);
}

__attribute__((noinline, cold)) void check_walk(ThreadState &ts, const uint64_t *values, int count,
                                                Walk how) {
  void *frames[kWalkFrames];
  int first;
  const int n = libunwind_frames(ts, frames, &first);
  g_check_counts.captures.fetch_add(1, std::memory_order_relaxed);
  if (how == Walk::kSpliced) g_check_counts.reused.fetch_add(1, std::memory_order_relaxed);
  // libunwind gives return addresses - 1 from its fast trace, return addresses from its
  // unw_step loop (where the fast trace gave up): the same frames either way.
  bool same = n == count, plus_one = n == count;
  for (int i = 0; (same || plus_one) && i < n; ++i) {
    const uint64_t theirs = reinterpret_cast<uintptr_t>(frames[first + i]);
    same = same && theirs == values[i];
    plus_one = plus_one && theirs == values[i] + 1;
  }
  if (same || plus_one) return;
  if (g_check_counts.differences.fetch_add(1, std::memory_order_relaxed) < 3) {
    char line[256];
    int i = 0;
    while (i < n && i < count && reinterpret_cast<uintptr_t>(frames[first + i]) == values[i]) ++i;
    snprintf(line, sizeof line,
             "adprof: stack check: %s walk of %d frames differs from libunwind's %d at frame %d "
             "(0x%llx, libunwind 0x%llx)\n",
             how == Walk::kSpliced ? "reused" : "full", count, n, i,
             static_cast<unsigned long long>(i < count ? values[i] : 0),
             static_cast<unsigned long long>(i < n ? reinterpret_cast<uintptr_t>(frames[first + i])
                                                   : 0));
    ssize_t ignored = write(2, line, strlen(line));
    (void)ignored;
  }
}

__attribute__((destructor)) void report_check() {
  if (!g_check) return;
  char line[256];
  snprintf(line, sizeof line,
           "adprof: stack check: %llu stacks, %llu with reused outer frames, %llu by libunwind, "
           "%llu differences\n",
           static_cast<unsigned long long>(g_check_counts.captures.load()),
           static_cast<unsigned long long>(g_check_counts.reused.load()),
           static_cast<unsigned long long>(g_check_counts.by_libunwind.load()),
           static_cast<unsigned long long>(g_check_counts.differences.load()));
  ssize_t ignored = write(2, line, strlen(line));
  (void)ignored;
}

// A stack the walker cannot take (or a capture inside another one: a signal handler's
// allocation): libunwind's, hashed whole.
__attribute__((noinline)) uint32_t capture_with_libunwind(ThreadState &ts, StackTable &t) {
  void *frames[kWalkFrames];
  int first;
  const int count = libunwind_frames(ts, frames, &first);
  if (g_check) g_check_counts.by_libunwind.fetch_add(1, std::memory_order_relaxed);
  if (count <= 0) return 0;
  uint64_t values[kWalkFrames];
  memcpy(values, frames + first, static_cast<size_t>(count) * sizeof values[0]);
  uint64_t h = kHashSeed;
  for (int i = count - 1; i >= 0; --i) h = hash_step(h, values[i]);
  uint64_t hash = hash_final(h, count);
  if (ADPROF_UNLIKELY(ts.python != nullptr)) hash = python_stack_hash(ts, hash);
  return stack_id(ts, t, hash, values, count);
}

// Marks the thread's memo in use for the rest of a capture.
struct Busy {
  StackTable &t;
  explicit Busy(StackTable &table) : t(table) { t.busy = true; }
  ~Busy() { t.busy = false; }
  Busy(const Busy &) = delete;
  Busy &operator=(const Busy &) = delete;
};

}  // namespace

uint32_t capture_stack(ThreadState &ts) {
  StackTable *t = ts.stacks;
  if (ADPROF_UNLIKELY(!t || t->generation != g_unload_generation.load(std::memory_order_relaxed)))
    if (!(t = renew_table(ts))) return 0;
  if (ADPROF_UNLIKELY(t->busy)) return capture_with_libunwind(ts, *t);
  // This frame's registers at one instruction, where the walk starts.
  FrameState start;
  asm volatile(
      "leaq 0(%%rip), %0\n\t"
      "movq %%rsp, %1\n\t"
      "movq %%rbp, %2"
      : "=&r"(start.ip), "=&r"(start.sp), "=&r"(start.bp));
  Busy busy(*t);  // a signal handler's allocation meanwhile leaves the memo alone
  uint64_t values[kWalkFrames];
  int count = 0;
  const Walk how = walk_stack(*t, start, values, &count);
  if (ADPROF_UNLIKELY(how == Walk::kUnsupported)) return capture_with_libunwind(ts, *t);
  Memo &m = t->memo;
  uint64_t hash;
  int first = 0;
  if (ADPROF_LIKELY(how != Walk::kCapped)) {
    // The innermost program frame: the walk's start and the profiler's frames left out.
    int k = static_cast<int>(m.frames) - 2;
    while (k >= 0 && own_frame(m.frame[k].ip - 1)) --k;
    if (k < 0) return 0;
    if (ADPROF_LIKELY(k < static_cast<int>(fmt::kMaxStackFrames))) {
      hash = hash_final(m.hash[k], k + 1);
      if (ADPROF_UNLIKELY(ts.python != nullptr)) hash = python_stack_hash(ts, hash);
      if (ADPROF_UNLIKELY(g_check)) {
        count = memo_values(m, values);
        check_walk(ts, values, count, how);
      }
      if (hash == m.last_hash) return m.last_id;
      uint32_t slot = static_cast<uint32_t>(hash) & (StackTable::kSlots - 1);
      while (t->hash[slot] != 0) {
        if (t->hash[slot] == hash) {
          m.last_hash = hash;
          m.last_id = t->id[slot];
          return m.last_id;
        }
        slot = (slot + 1) & (StackTable::kSlots - 1);
      }
      count = memo_values(m, values);
      const uint32_t id = define_stack(ts, *t, slot, hash, values, count);
      m.last_hash = id ? hash : 0;
      m.last_id = id;
      return id;
    }
    count = memo_values(m, values);
  } else {
    while (first < count && own_frame(values[first])) ++first;
    count -= first;
    if (count <= 0) return 0;
    if (count > static_cast<int>(fmt::kMaxStackFrames))
      count = static_cast<int>(fmt::kMaxStackFrames);
  }
  // Deeper than kMaxStackFrames: the innermost ones, hashed whole.
  if (ADPROF_UNLIKELY(g_check)) check_walk(ts, values + first, count, how);
  uint64_t h = kHashSeed;
  for (int i = count - 1; i >= 0; --i) h = hash_step(h, values[first + i]);
  hash = hash_final(h, count);
  if (ADPROF_UNLIKELY(ts.python != nullptr)) hash = python_stack_hash(ts, hash);
  return stack_id(ts, *t, hash, values + first, count);
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
  // libunwind's code range first: its first call (set_policy) opens its pipe, which the pipe
  // hooks move out of the program's descriptor numbers when it comes from there (own_fds.cpp).
  if (!range_of(reinterpret_cast<const void *>(&capture_stack), &g_own) ||
      !range_of(reinterpret_cast<const void *>(g_backtrace), &g_unwind)) {
    say("--stacks: cannot find the profiler's own code; recording without call stacks");
    return false;
  }
  set_policy(*space, UNW_CACHE_PER_THREAD);
  if (set_size) set_size(*space, 1024, 0);
  ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof g_exe_path - 1);
  g_exe_path[n > 0 ? n : 0] = 0;
  const char *check = getenv("ADPROF_STACKS_CHECK");
  g_check = check && strcmp(check, "1") == 0;
  void *warm[8];
  g_backtrace(warm, 8);  // libunwind's first use (allocations, its caches) happens now
  g_stacks = true;
  return true;
}

bool called_from_unwinder(const void *code) {
  return g_unwind.holds(reinterpret_cast<uintptr_t>(code));
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

// The child's trace defines its stacks and objects afresh: every thread table emptied (a new
// generation), the objects recorded again (record_initial_mappings), the pooled tables (wiped)
// left unused.
void reset_stacks_in_fork_child(ThreadState &ts) {
  if (!g_stacks) return;
  g_pool_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_map_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_table_pool = nullptr;
  g_object_count = 0;
  g_seen_adds.store(~0ull);
  g_seen_subs.store(~0ull);
  g_unload_generation.fetch_add(1, std::memory_order_acq_rel);
  ts.stacks = nullptr;
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
