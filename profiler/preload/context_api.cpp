// The context API (adprof/context.h) as the preload library implements it: the same symbols as
// libadprof_context.so, which the dynamic linker resolves here when this library is preloaded.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "recorder.h"
#include "recorder_internal.h"
#include "step_window.h"

using namespace adprof::preload;

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Interned names: open addressing over a fixed table; the strings live in a bump arena. A
// program interns a handful of op kinds and labels, each once (an engine caches the ids), so a
// lock is fine here.
constexpr size_t kNameSlots = 1 << 16;
constexpr size_t kArenaBytes = 8 << 20;

struct NameSlot {
  uint64_t hash;
  const char *text;
  uint32_t length;
  uint32_t id;
};

pthread_mutex_t g_names_mutex = PTHREAD_MUTEX_INITIALIZER;
NameSlot *g_slots = nullptr;
char *g_arena = nullptr;
size_t g_arena_used = 0;
uint32_t g_next_name_id = 1;  // 0 means "no name"

void *raw_mmap(size_t length) {
  long r = syscall(SYS_mmap, nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  return r == -1 ? nullptr : reinterpret_cast<void *>(r);
}

uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(s[i])) * 1099511628211ull;
  return h | 1;  // 0 marks an empty slot
}

uint32_t intern(const char *name, size_t length) {
  uint64_t h = hash_bytes(name, length);
  pthread_mutex_lock(&g_names_mutex);
  if (!g_slots) {
    g_slots = static_cast<NameSlot *>(raw_mmap(kNameSlots * sizeof(NameSlot)));
    g_arena = static_cast<char *>(raw_mmap(kArenaBytes));
  }
  uint32_t id = 0;
  if (g_slots && g_arena) {
    for (size_t i = h & (kNameSlots - 1), probes = 0; probes < kNameSlots;
         i = (i + 1) & (kNameSlots - 1), ++probes) {
      NameSlot &slot = g_slots[i];
      if (slot.hash == 0) {
        if (g_arena_used + length > kArenaBytes || g_next_name_id >= kNameSlots / 2) break;
        memcpy(g_arena + g_arena_used, name, length);
        slot = {h, g_arena + g_arena_used, static_cast<uint32_t>(length), g_next_name_id++};
        g_arena_used += length;
        id = slot.id;
        record_name(t_state, id, name, length);
        break;
      }
      if (slot.hash == h && slot.length == length && memcmp(slot.text, name, length) == 0) {
        id = slot.id;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_names_mutex);
  return id;
}

}  // namespace

namespace adprof::preload {

void reset_names_in_fork_child(ThreadState &ts) {
  g_names_mutex = PTHREAD_MUTEX_INITIALIZER;
  if (!g_slots) return;
  // A slot another thread was filling at the fork may be half written: only whole ones count.
  for (size_t i = 0; i < kNameSlots; ++i) {
    const NameSlot &slot = g_slots[i];
    if (slot.hash != 0 && slot.text && slot.id != 0 && slot.id < g_next_name_id &&
        slot.text + slot.length <= g_arena + g_arena_used)
      record_name(ts, slot.id, slot.text, slot.length);
  }
}

}  // namespace adprof::preload

namespace {

ADPROF_HOT uint8_t *begin(ThreadState &ts, fmt::EventType type, uint8_t operand = 0) {
  return begin_event(ts, type, operand, now_ticks());
}

inline uint8_t clamp_role(adprof_role role) {
  return static_cast<unsigned>(role) < ADPROF_ROLE_COUNT
             ? static_cast<uint8_t>(role)
             : static_cast<uint8_t>(ADPROF_ROLE_FOREIGN);
}

}  // namespace

ADPROF_EXPORT int adprof_active(void) { return recording() ? 1 : 0; }

ADPROF_EXPORT uint32_t adprof_name(const char *name) {
  if (!name) return 0;
  size_t n = strnlen(name, fmt::kMaxNameBytes);
  return intern(name, n);
}

ADPROF_EXPORT void adprof_op_begin(uint32_t name_id, uint64_t instance) {
  ThreadState &ts = t_state;
  ++ts.op_depth;
  if (!reserve(ts, kMaxFixedEvent)) return;
  uint8_t *p = begin(ts, fmt::EventType::kOpBegin);
  p = fmt::put_varint(p, name_id);
  end_event(ts, fmt::put_varint(p, instance));
}

ADPROF_EXPORT void adprof_op_end(void) {
  ThreadState &ts = t_state;
  if (ts.op_depth == 0) return;  // unbalanced: ignore rather than corrupt the scope stack
  --ts.op_depth;
  if (!reserve(ts, kMaxFixedEvent)) return;
  end_event(ts, begin(ts, fmt::EventType::kOpEnd));
}

ADPROF_EXPORT adprof_phase adprof_set_phase(adprof_phase phase) {
  ThreadState &ts = t_state;
  auto previous = static_cast<adprof_phase>(ts.phase);
  uint8_t next = static_cast<unsigned>(phase) < ADPROF_PHASE_COUNT
                     ? static_cast<uint8_t>(phase)
                     : static_cast<uint8_t>(ADPROF_PHASE_OTHER);
  if (next != ts.phase) {
    ts.phase = next;
    if (reserve(ts, kMaxFixedEvent)) end_event(ts, begin(ts, fmt::EventType::kPhase, next));
  }
  return previous;
}

ADPROF_EXPORT adprof_role adprof_set_role(adprof_role role) {
  ThreadState &ts = t_state;
  auto previous = static_cast<adprof_role>(ts.role);
  ts.role = clamp_role(role);
  return previous;
}

ADPROF_EXPORT void adprof_retag(const void *ptr, adprof_role role, const void *source) {
  ThreadState &ts = t_state;
  if (!ptr || !reserve(ts, kMaxFixedEvent)) return;
  uint8_t *p = begin(ts, fmt::EventType::kRetag, clamp_role(role));
  p = put_addr(ts, p, reinterpret_cast<uintptr_t>(ptr));
  end_event(ts, fmt::put_varint(p, reinterpret_cast<uintptr_t>(source)));
}

ADPROF_EXPORT void adprof_step(uint64_t step) {
  ThreadState &ts = t_state;
  // The writer's step window (step_window.h), when there is one: at its edges this thread's
  // buffer is handed over before the mark (the epoch moved), the step's events in a new one.
  const uint64_t t = now_ticks();
  if (recording()) publish_step_mark(step, t, ts.has_tid ? ts.tid : UINT32_MAX);
  if (!reserve(ts, kMaxFixedEvent)) return;
  uint8_t *p = begin_event(ts, fmt::EventType::kStep, 0, t);
  end_event(ts, fmt::put_varint(p, step));
}

ADPROF_EXPORT void adprof_label(const void *ptr, uint32_t name_id) {
  ThreadState &ts = t_state;
  if (!ptr || !reserve(ts, kMaxFixedEvent)) return;
  uint8_t *p = put_addr(ts, begin(ts, fmt::EventType::kLabel), reinterpret_cast<uintptr_t>(ptr));
  end_event(ts, fmt::put_varint(p, name_id));
}

ADPROF_EXPORT void adprof_describe(const void *ptr, adprof_dtype dtype, uint32_t rank,
                                   const int64_t *shape) {
  ThreadState &ts = t_state;
  if (!ptr || (rank && !shape)) return;
  if (rank > fmt::kMaxRank) rank = fmt::kMaxRank;
  if (!reserve(ts, 32 + rank * fmt::kMaxVarintBytes)) return;
  uint8_t *p = put_addr(ts, begin(ts, fmt::EventType::kDescribe), reinterpret_cast<uintptr_t>(ptr));
  p = fmt::put_varint(p, static_cast<uint64_t>(dtype));
  p = fmt::put_varint(p, rank);
  for (uint32_t i = 0; i < rank; ++i)
    p = fmt::put_varint(p, static_cast<uint64_t>(shape[i] < 0 ? 0 : shape[i]));
  end_event(ts, p);
}

ADPROF_EXPORT void adprof_content_hash(const void *ptr, uint64_t hash) {
  ThreadState &ts = t_state;
  if (!ptr || !reserve(ts, kMaxFixedEvent)) return;
  uint8_t *p =
      put_addr(ts, begin(ts, fmt::EventType::kContentHash), reinterpret_cast<uintptr_t>(ptr));
  end_event(ts, fmt::put_varint(p, hash));
}

ADPROF_EXPORT void adprof_annotate(uint32_t kind_name_id, const uint64_t *values, uint32_t count) {
  ThreadState &ts = t_state;
  if (count && !values) return;
  if (count > fmt::kMaxAnnotateValues) count = fmt::kMaxAnnotateValues;
  if (!reserve(ts, 32 + count * fmt::kMaxVarintBytes)) return;
  uint8_t *p = begin(ts, fmt::EventType::kAnnotate);
  p = fmt::put_varint(p, kind_name_id);
  p = fmt::put_varint(p, count);
  for (uint32_t i = 0; i < count; ++i) p = fmt::put_varint(p, values[i]);
  end_event(ts, p);
}

ADPROF_EXPORT void adprof_track_alloc(const void *ptr, size_t size, adprof_space space,
                                      uint32_t device) {
  if (!ptr || static_cast<unsigned>(space) >= ADPROF_SPACE_COUNT) return;
  record_alloc(t_state, ptr, size, space, device);
}

ADPROF_EXPORT void adprof_track_free(const void *ptr, adprof_space space, uint32_t device) {
  if (!ptr || static_cast<unsigned>(space) >= ADPROF_SPACE_COUNT) return;
  record_free(t_state, ptr, space, 0, device);
}
