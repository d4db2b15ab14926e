// The recorder: per-thread event buffers and the inline encoders the hooks call.
//
// Hot path (every malloc/free): one TLS access, a bounds check against the thread's buffer,
// a timestamp and a few varints written into that buffer. No lock, no allocation, no syscall.
// Everything else (first use by a thread, a full buffer, a flush request, the recording being
// stopped) is `refill`, out of line in recorder.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

#include "adprof/context.h"
#include "trace_format.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#define ADPROF_HOT __attribute__((always_inline)) inline
#define ADPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define ADPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)

extern "C" size_t nallocx(size_t size, int flags);  // jemalloc: usable size of a request

namespace adprof::preload {

namespace fmt = adprof::format;

inline constexpr size_t kBufferBytes = 256 * 1024 - 64;  // raw event bytes per chunk
inline constexpr size_t kMaxFixedEvent = 64;  // largest fixed-size event (a role + an alloc)

struct Buffer {
  Buffer *next;
  uint64_t base_ts;
  uint32_t tid;
  uint32_t seq;
  uint32_t events;
  uint32_t used;
  uint8_t data[kBufferBytes];
};

struct ThreadState {
  uint8_t *cursor = nullptr;  // next free byte in buf->data (null: no buffer)
  uint8_t *end = nullptr;
  Buffer *buf = nullptr;
  uint64_t last_ts = 0;
  uint64_t last_addr = 0;
  uint32_t events = 0;
  uint32_t epoch = 0;  // g_flush_epoch when this buffer was taken
  uint32_t tid = 0;
  uint32_t next_seq = 0;
  int guard = 0;  // > 0: inside the profiler or the allocator; hooks only forward
  bool has_tid = false;
  uint8_t phase = ADPROF_PHASE_OTHER;
  uint8_t role = ADPROF_ROLE_FOREIGN;
  uint8_t emitted_role = ADPROF_ROLE_FOREIGN;
  uint32_t op_depth = 0;
  // What the writer may read while the thread runs (recorder.cpp, snapshot_idle_threads): the
  // current buffer, and (buffer seq << 32 | bytes of complete events) after every event.
  std::atomic<Buffer *> published_buf{nullptr};
  std::atomic<uint64_t> published{0};
  uint64_t seq_bits = 0;  // the current buffer's seq << 32
  uint32_t registry_slot = ~0u;
};

// initial-exec: the preload library is loaded at start-up, so its TLS sits in the static block
// and needs neither __tls_get_addr nor an allocation on first access.
extern thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));
extern std::atomic<uint32_t> g_flush_epoch;

// Out of line: takes a fresh buffer (handing the current one to the writer) so that `bytes`
// fit. False when nothing is being recorded (not started, stopped, forked child, finished).
bool refill(ThreadState &ts, size_t bytes) __attribute__((noinline, cold));

ADPROF_HOT uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Event clock: the TSC in units of 32 cycles (about 10 ns). Finer only costs trace bytes: most
// deltas between a thread's events then fit one varint byte.
ADPROF_HOT uint64_t now_ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc() >> 5;
#else
  return now_ns();
#endif
}

ADPROF_HOT bool reserve(ThreadState &ts, size_t bytes) {
  if (ADPROF_LIKELY(static_cast<size_t>(ts.end - ts.cursor) >= bytes &&
                    ts.epoch == g_flush_epoch.load(std::memory_order_relaxed)))
    return true;
  return refill(ts, bytes);
}

// Writes tag and time delta; returns the cursor for the body. Timestamps never go backwards
// within a thread (a migrated thread may read a slightly older TSC).
ADPROF_HOT uint8_t *begin_event(ThreadState &ts, fmt::EventType type, uint8_t operand, uint64_t t) {
  uint8_t *p = ts.cursor;
  *p++ = static_cast<uint8_t>(static_cast<uint8_t>(type) | (operand << 4));
  uint64_t dt = t > ts.last_ts ? t - ts.last_ts : 0;
  ts.last_ts = t > ts.last_ts ? t : ts.last_ts;
  return fmt::put_varint(p, dt);
}

ADPROF_HOT void end_event(ThreadState &ts, uint8_t *p) {
  ts.cursor = p;
  ++ts.events;
  // A plain store on x86: lets the writer snapshot the complete events of a thread that then
  // goes idle (sleeps, blocks) for longer than a flush interval.
  ts.published.store(ts.seq_bits | static_cast<uint32_t>(p - ts.buf->data),
                     std::memory_order_release);
}

ADPROF_HOT uint8_t *put_addr(ThreadState &ts, uint8_t *p, uint64_t addr) {
  p = fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(addr - ts.last_addr)));
  ts.last_addr = addr;
  return p;
}

// The role is written lazily: adcore changes it around every storage it allocates, so only a
// change that precedes an allocation costs an event.
ADPROF_HOT void sync_role(ThreadState &ts, uint64_t t) {
  if (ADPROF_UNLIKELY(ts.role != ts.emitted_role)) {
    end_event(ts, begin_event(ts, fmt::EventType::kRole, ts.role, t));
    ts.emitted_role = ts.role;
  }
}

// `je_flags`: the jemalloc flags of the request (alignment), to know its size class.
ADPROF_HOT void record_alloc(ThreadState &ts, const void *ptr, size_t size, adprof_space space,
                             uint32_t device, int je_flags = 0) {
  if (!reserve(ts, kMaxFixedEvent)) return;
  size_t usable = space == ADPROF_SPACE_HEAP ? nallocx(size ? size : 1, je_flags) : size;
  uint64_t t = now_ticks();
  sync_role(ts, t);
  uint8_t *p = begin_event(ts, fmt::EventType::kAlloc, space, t);
  p = put_addr(ts, p, reinterpret_cast<uintptr_t>(ptr));
  p = fmt::put_varint(p, size);
  p = fmt::put_varint(p, usable >= size ? usable - size : 0);
  if (space >= ADPROF_SPACE_DEVICE_BLOCK) p = fmt::put_varint(p, device);
  end_event(ts, p);
}

ADPROF_HOT void record_free(ThreadState &ts, const void *ptr, adprof_space space, size_t length,
                            uint32_t device) {
  if (!reserve(ts, kMaxFixedEvent)) return;
  uint8_t *p = begin_event(ts, fmt::EventType::kFree, space, now_ticks());
  p = put_addr(ts, p, reinterpret_cast<uintptr_t>(ptr));
  if (space == ADPROF_SPACE_MMAP) p = fmt::put_varint(p, length);
  if (space >= ADPROF_SPACE_DEVICE_BLOCK) p = fmt::put_varint(p, device);
  end_event(ts, p);
}

// Slow paths shared with the context API (recorder.cpp).
void record_name(ThreadState &ts, uint32_t id, const char *name, size_t length);
bool recording();
// Closes the trace (footer "exec") before the process image is replaced.
void finish_before_exec();

}  // namespace adprof::preload
