// The recorder: per-thread event buffers and the inline encoders the hooks call.
//
// Hot path (every malloc/free): one TLS access, a bounds check against the thread's buffer,
// a timestamp and a few varints written into that buffer. No lock, no allocation, no syscall.
// Everything else (first use by a thread, a full buffer, a flush request, the recording being
// stopped) is `refill`, out of line in buffer_pool.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>

#include "adprof/context.h"
#include "heap_coder.h"
#include "trace_format.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#define ADPROF_HOT __attribute__((always_inline)) inline
#define ADPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define ADPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)

// jemalloc declares these nothrow: noexcept here too, or clang rejects its header after ours.
extern "C" size_t nallocx(size_t size, int flags) noexcept;      // usable size of a request
extern "C" size_t sallocx(const void *ptr, int flags) noexcept;  // usable size of a block

namespace adprof::preload {

namespace fmt = adprof::format;

// A chunk's events are written as two streams, their tags (one byte each) and their bodies,
// because the tags are far more predictable than the bytes around them and compress better
// apart (trace_format.h). Every event writes at least one body byte, so the tags, given as
// much room as the bodies, never fill first. 512 KiB of bodies hold about 250,000 heap
// events: few frees fall in a later chunk than their allocation (the heap coder only knows its
// own chunk's blocks).
inline constexpr size_t kBodyBytes = 512 * 1024;
inline constexpr size_t kTagBytes = kBodyBytes;
inline constexpr size_t kMaxFixedEvent = 64;  // largest fixed-size event (a role + an alloc)

struct Buffer {
  Buffer *next;
  uint64_t base_ts;
  uint32_t tid;
  uint32_t seq;
  uint32_t events;  // = tags written
  uint32_t used;    // body bytes written; after seal(): bytes of the chunk in `tags`
  uint8_t tags[kTagBytes];
  uint8_t bodies[kBodyBytes];
};

// What a thread publishes after every event (for the writer's snapshots of idle threads): the
// buffer's sequence number (low 24 bits), its events and its body bytes.
inline constexpr int kPublishedEventsShift = 20;
inline constexpr int kPublishedSeqShift = 40;
inline constexpr uint32_t kPublishedFieldMask = (1u << kPublishedEventsShift) - 1;
inline constexpr uint32_t kPublishedSeqMask = (1u << (64 - kPublishedSeqShift)) - 1;
inline uint64_t published_word(uint32_t seq, uint32_t events, uint32_t used) {
  return static_cast<uint64_t>(seq & kPublishedSeqMask) << kPublishedSeqShift |
         static_cast<uint64_t>(events) << kPublishedEventsShift | used;
}
struct Published {
  uint32_t seq, events, used;
};
inline Published published_fields(uint64_t word) {
  return {static_cast<uint32_t>(word >> kPublishedSeqShift),
          static_cast<uint32_t>(word >> kPublishedEventsShift) & kPublishedFieldMask,
          static_cast<uint32_t>(word) & kPublishedFieldMask};
}
static_assert(kBodyBytes < (1u << kPublishedEventsShift) && kTagBytes < (1u << 20));

// What the writer may read of a thread while it runs (buffer_pool.cpp, copy_published): its
// current buffer, and published_word(seq, events, body bytes) of its complete events. It lives
// in the profiler's memory, not the thread's TLS: a thread can end registered (it recorded
// again after the profiler's exit handler, from a later thread-specific destructor, in glibc's
// last round; or it made the exit system call itself) and its TLS be unmapped, but its slot
// stays readable, and its last buffer, never handed off, is written at the end.
// A cache line each: every event of a thread stores its word, and threads must not share one.
struct alignas(64) PublishedSlot {
  std::atomic<Buffer *> buf{nullptr};
  std::atomic<uint64_t> word{0};
  // Its current buffer's time (Buffer::base_ts): no event of it is older. Stored once a buffer,
  // before the buffer's first word (oldest_unread_ticks).
  std::atomic<uint64_t> since{0};
  bool registered = false;  // a thread holds it (buffer_pool.cpp: the registry, under its mutex)
};
// The slot of threads that have none (not registered yet, or the registry is full): written,
// never read.
extern PublishedSlot g_unread_slot;

struct ThreadState {
  uint8_t *cursor = nullptr;  // next free byte in buf->bodies (null: no buffer)
  uint8_t *end = nullptr;
  Buffer *buf = nullptr;
  uint64_t last_ts = 0;
  uint64_t last_addr = 0;
  uint32_t last_stack = 0;  // the chunk's previous allocation's stack id (trace_format.h)
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
  PublishedSlot *published = &g_unread_slot;  // its registry slot's, once registered
  uint64_t seq_bits = 0;                      // published_word(buffer seq, 0, 0)
  uint32_t registry_slot = ~0u;
  // The share tick (alone_in_tick below) this thread last claimed or found taken, and its
  // id in g_tick_owner (thread index + 1; 0: none, never alone in a tick: no index yet, or too
  // many threads).
  uint64_t claimed_tick = 0;
  uint64_t owner_id = 0;
  // The chunk's heap coder (heap_coder.h), reset with every buffer; null: the thread writes
  // only the general event forms.
  fmt::HeapCoder *coder = nullptr;
  // With call stacks (stacks.h): the thread's table of the stacks it has defined, taken on its
  // first stack; null before.
  struct StackTable *stacks = nullptr;
  // With Python frames (python_stacks.h): the thread's shadow stack of Python frames, set by
  // adprof_python_stacks_thread() on a thread that runs Python; null on every other.
  struct PyShadow *python = nullptr;
};

// initial-exec: the preload library is loaded at start-up, so its TLS sits in the static block
// and needs neither __tls_get_addr nor an allocation on first access.
extern thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));
extern std::atomic<uint32_t> g_flush_epoch;
// Call stacks are recorded (ADPROF_STACKS=1): set before recording starts, never changed.
extern bool g_stacks;

// The id of the calling allocation's stack, defining it in the thread's stream first when it is
// new (stacks.cpp); 0: none.
uint32_t capture_stack(ThreadState &ts) __attribute__((noinline));

// Out of line: takes a fresh buffer (handing the current one to the writer) so that `bytes`
// fit. False when nothing is being recorded (not started, stopped, forked child, finished).
bool refill(ThreadState &ts, size_t bytes) __attribute__((noinline, cold));

ADPROF_HOT uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Event clock: the TSC in units of 256 cycles (about 100 ns). Finer only costs trace bytes:
// the delta between a thread's heap events is then 0, 1 or 2 and fits in the event's tag.
inline constexpr int kTickShift = 8;
ADPROF_HOT uint64_t now_ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc() >> kTickShift;
#else
  return now_ns();
#endif
}

// The event clock, read once every load before it has completed: the time of a free. RDTSC is
// not ordered with loads, and the CPU may run it ahead of the load that brought the block over
// from another thread (predicted out of a wait loop, or in a free the thread's heap coder takes
// for one of its own: a block sent back and forth): the free's time then came up to a cache
// miss before the other thread's allocation, and the trace put the free first (an unmatched
// free and a false leak; a few times in a hundred runs of 300,000 hand-overs, hundreds of times
// in one of 300,000 round trips). LFENCE waits for the loads, as Linux's rdtsc_ordered() does;
// read first thing in the free hook, it waits for the program's loads only: about 5% of the
// CPU time of a storm of nothing but mallocs and frees, 1-3% of a real program's
// (docs/PERFORMANCE.md). Elsewhere an acquire fence orders the program's
// loads before clock_gettime's (its vDSO reads its data page, then an ISB before the counter on
// arm64).
ADPROF_HOT uint64_t now_ticks_ordered() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_lfence();
  return __rdtsc() >> kTickShift;
#else
  std::atomic_thread_fence(std::memory_order_acquire);
  return now_ns();
#endif
}

// Heap event times (trace_format.h, "Event times"). The order of two threads' events in the
// trace is their timestamps' order, so a heap event's time only needs the clock's resolution
// where another thread records too. Time is cut into share ticks of 2^kShareTickShift ticks
// (TSC >> 18, about 105 us); g_tick_owner holds (share tick << kOwnerBits | owner): the thread
// that has recorded alone in that share tick so far, or kTickShared once a second thread has.
// A thread that owns the current share tick writes its heap events at the tick's start (never
// before its previous event): their deltas are then almost all 0, which is most of a
// single-threaded program's trace bytes saved (docs/PERFORMANCE.md). Every other event, and
// every heap event in a shared tick, keeps the clock's full resolution.
// Cost on the hot path: one load of a word that changes at most twice per share tick while
// threads record side by side (a claim, then shared), and a compare.
// Why the cross-thread order stays the clock's: a thread claims the tick before it writes any
// event in it, and marks it shared, with a release CAS, before its event; another thread that
// sees anything of this thread's later (a block to free) loads the word after that, with
// acquire, so it finds the tick shared (or its own later one) and writes full-resolution
// times, which come after the first thread's (rounded down) ones: a free's time is read after
// the load that brought the block (now_ticks_ordered above).
// 2^10 ticks: each tick a thread records alone in costs one escaped delta (most of a
// single-threaded trace's time bytes after the rounding), a quarter of 2^8's, for heap times
// still a hundred times finer than heaptrack's 10 ms; 2^12 saved no more on the Python run of
// docs/PERFORMANCE.md, and a longer tick is shared by a program's threads more often.
inline constexpr int kShareTickShift = 10;
inline constexpr int kOwnerBits = 16;
inline constexpr uint64_t kOwnerMask = (uint64_t{1} << kOwnerBits) - 1;
inline constexpr uint64_t kTickShared = kOwnerMask;
extern std::atomic<uint64_t> g_tick_owner;

// Out of line: the first event of the calling thread in share tick `tick` (recorder.cpp).
// True when the thread now owns it alone.
bool claim_tick(ThreadState &ts, uint64_t tick) __attribute__((noinline));

// Whether the calling thread records alone in the share tick of `t`, claiming it (or marking it
// shared) at its first event in it. `t` is the time the event is written with (never before the
// thread's previous event's), so that a tick is shared only by threads with events in it.
ADPROF_HOT bool alone_in_tick(ThreadState &ts, uint64_t t) {
  const uint64_t tick = t >> kShareTickShift;
  if (ADPROF_LIKELY(g_tick_owner.load(std::memory_order_acquire) ==
                    (tick << kOwnerBits | ts.owner_id)))
    return true;
  return tick != ts.claimed_tick && claim_tick(ts, tick);
}

ADPROF_HOT bool reserve(ThreadState &ts, size_t bytes) {
  if (ADPROF_LIKELY(static_cast<size_t>(ts.end - ts.cursor) >= bytes &&
                    ts.epoch == g_flush_epoch.load(std::memory_order_relaxed)))
    return true;
  return refill(ts, bytes);
}

// Writes tag and time delta; returns the cursor for the body. Timestamps never go backwards
// within a thread (a migrated thread may read a slightly older TSC). An event whose order
// against other threads' events does not matter (a thread's own state: its phase restated at
// a buffer's start, its name; the writer's counter samples) is begun unshared: it neither
// claims its share tick nor shares it, so that a program's thread that records alone keeps
// its coarse times while the writer samples.
ADPROF_HOT uint8_t *begin_unshared_event(ThreadState &ts, fmt::EventType type, uint8_t operand,
                                         uint64_t t) {
  t = t > ts.last_ts ? t : ts.last_ts;
  uint8_t *p = ts.cursor;
  ts.buf->tags[ts.events] = static_cast<uint8_t>(static_cast<uint8_t>(type) | (operand << 4));
  const uint64_t dt = t - ts.last_ts;
  ts.last_ts = t;
  return fmt::put_varint(p, dt);
}
ADPROF_HOT uint8_t *begin_event(ThreadState &ts, fmt::EventType type, uint8_t operand, uint64_t t) {
  t = t > ts.last_ts ? t : ts.last_ts;
  alone_in_tick(ts, t);  // claims the tick or marks it shared; the time stays as it is
  return begin_unshared_event(ts, type, operand, t);
}

ADPROF_HOT void end_event(ThreadState &ts, uint8_t *p) {
  ts.cursor = p;
  ++ts.events;
  // A plain store on x86: lets the writer snapshot the complete events of a thread that then
  // goes idle (sleeps, blocks) for longer than a flush interval.
  ts.published->word.store(ts.seq_bits | static_cast<uint64_t>(ts.events) << kPublishedEventsShift |
                               static_cast<uint64_t>(p - ts.buf->bodies),
                           std::memory_order_release);
}

ADPROF_HOT uint8_t *put_addr(ThreadState &ts, uint8_t *p, uint64_t addr) {
  p = fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(addr - ts.last_addr)));
  ts.last_addr = addr;
  return p;
}

// An allocation's stack id, against the chunk's previous allocation's: a program's allocation
// pattern repeats as the same small differences.
ADPROF_HOT uint8_t *put_stack(ThreadState &ts, uint8_t *p, uint32_t stack) {
  p = fmt::put_varint(p, fmt::zigzag(static_cast<int64_t>(stack) - ts.last_stack));
  ts.last_stack = stack;
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

// The time a heap event (or a call-stack event, stacks.cpp) is written with: rounded down to
// its share tick when the thread is alone in it (above), never before the thread's previous
// event.
ADPROF_HOT uint64_t heap_event_time(ThreadState &ts, uint64_t t) {
  t = t > ts.last_ts ? t : ts.last_ts;
  if (ADPROF_LIKELY(alone_in_tick(ts, t))) {
    const uint64_t tick_start = t >> kShareTickShift << kShareTickShift;
    t = tick_start > ts.last_ts ? tick_start : ts.last_ts;
  }
  return t;
}

// An event written with a heap event's time: the call-stack events (stacks.cpp), which go with
// the allocation that follows them.
ADPROF_HOT uint8_t *begin_coarse_event(ThreadState &ts, fmt::EventType type, uint8_t operand,
                                       uint64_t t) {
  return begin_unshared_event(ts, type, operand, heap_event_time(ts, t));  // the tick claimed
}

// A compact heap event's tag (kHeap), with the time delta in it when it is small; returns the
// cursor for the body.
ADPROF_HOT uint8_t *begin_heap_event(ThreadState &ts, uint8_t bits, uint64_t t) {
  t = heap_event_time(ts, t);
  const uint64_t dt = t - ts.last_ts;
  ts.last_ts = t;
  uint64_t inline_dt = dt < fmt::kHeapDeltaEscape ? dt : fmt::kHeapDeltaEscape;
  ts.buf->tags[ts.events] =
      static_cast<uint8_t>(static_cast<uint8_t>(fmt::EventType::kHeap) |
                           ((bits | static_cast<uint8_t>(inline_dt << fmt::kHeapDeltaShift)) << 4));
  return inline_dt == fmt::kHeapDeltaEscape ? fmt::put_varint(ts.cursor, dt) : ts.cursor;
}

// `je_flags`: the jemalloc flags of the request (alignment), to know its size class.
// `with_stack`: an allocation of the program's (a hook), whose call stack is recorded when
// stacks are; in a trace with stacks every allocation event ends with a stack id (0: none).
ADPROF_HOT void record_alloc(ThreadState &ts, const void *ptr, size_t size, adprof_space space,
                             uint32_t device, int je_flags = 0, bool with_stack = false) {
  if (!reserve(ts, kMaxFixedEvent)) return;
  uint32_t stack = 0;
  if (ADPROF_UNLIKELY(g_stacks)) {
    // The stack's definition, when new, takes buffer space (and may start a new buffer).
    if (with_stack && (stack = capture_stack(ts)) != 0 && !reserve(ts, kMaxFixedEvent)) return;
  }
  size_t usable = space == ADPROF_SPACE_HEAP ? nallocx(size ? size : 1, je_flags) : size;
  uint64_t t = now_ticks();
  sync_role(ts, t);
  const uint64_t addr = reinterpret_cast<uintptr_t>(ptr);
  uint8_t *p;
  if (space == ADPROF_SPACE_HEAP && ADPROF_LIKELY(ts.coder != nullptr)) {
    fmt::HeapCoder &coder = *ts.coder;
    const uint32_t cls = fmt::HeapCoder::class_of(usable);
    if (ADPROF_LIKELY(usable == fmt::default_usable_size(size))) {
      if (coder.predicted(cls) == addr) {
        p = begin_heap_event(ts, fmt::kHeapPredicted, t);
      } else {
        p = begin_heap_event(ts, 0, t);
        p = fmt::put_varint(
            p, fmt::zigzag(static_cast<int64_t>(addr - coder.next_expected(cls, usable))));
      }
      p = fmt::put_varint(p, size);
      if (ADPROF_UNLIKELY(g_stacks)) p = put_stack(ts, p, stack);
      if (const uint32_t slot = coder.on_alloc(addr, cls); slot != fmt::HeapCoder::kNoSlot)
        coder.remember(addr, slot);
      end_event(ts, p);
      return;
    }
    if (const uint32_t slot = coder.on_alloc(addr, cls); slot != fmt::HeapCoder::kNoSlot)
      coder.remember(addr, slot);
  }
  p = begin_event(ts, fmt::EventType::kAlloc, space, t);
  p = put_addr(ts, p, addr);
  p = fmt::put_varint(p, size);
  p = fmt::put_varint(p, usable >= size ? usable - size : 0);
  if (space >= ADPROF_SPACE_DEVICE_BLOCK) p = fmt::put_varint(p, device);
  if (ADPROF_UNLIKELY(g_stacks)) p = put_stack(ts, p, stack);
  end_event(ts, p);
}

// `jemalloc_block`: ptr is a block of the program's jemalloc (the free hook), whose size class
// can be asked when the coder does not know it.
ADPROF_HOT void record_free(ThreadState &ts, const void *ptr, adprof_space space, size_t length,
                            uint32_t device, bool jemalloc_block = false) {
  if (!reserve(ts, kMaxFixedEvent)) return;
  const uint64_t addr = reinterpret_cast<uintptr_t>(ptr);
  const uint64_t t = now_ticks_ordered();
  uint8_t *p;
  if (space == ADPROF_SPACE_HEAP && ADPROF_LIKELY(ts.coder != nullptr)) {
    const uint32_t slot = ts.coder->take(addr);
    if (ADPROF_LIKELY(slot != fmt::HeapCoder::kNoSlot)) {
      p = begin_heap_event(ts, fmt::kHeapFree, t);
      // A recent block by its age (the writer thread makes it a rank), an old one by its slot.
      const uint64_t age = ts.coder->age_of(slot);
      p = fmt::put_varint(p, age <= fmt::kRankedAge ? 2 * age : 2 * uint64_t{slot} + 1);
      ts.coder->on_free_slot(slot);
      end_event(ts, p);
      return;
    }
    if (jemalloc_block) {  // allocated in an earlier chunk or by another thread
      // Guarded: on a thread's first call jemalloc sets up its thread cache (mmap): that is the
      // profiler's, not the program's (recording it unwound libunwind there, inside jemalloc).
      ++ts.guard;
      const size_t usable = sallocx(ptr, 0);
      --ts.guard;
      const uint32_t cls = fmt::HeapCoder::class_of(usable);
      p = begin_heap_event(ts, fmt::kHeapFree | fmt::kHeapAddressed, t);
      p = put_addr(ts, p, addr);
      p = fmt::put_varint(p, cls);
      ts.coder->on_free_address(addr, cls);
      end_event(ts, p);
      return;
    }
  }
  p = begin_event(ts, fmt::EventType::kFree, space, t);
  p = put_addr(ts, p, addr);
  if (space == ADPROF_SPACE_MMAP) p = fmt::put_varint(p, length);
  if (space >= ADPROF_SPACE_DEVICE_BLOCK) p = fmt::put_varint(p, device);
  end_event(ts, p);
}

// Slow paths shared with the context API (recorder.cpp) and the process hooks (recording_end.cpp).
void record_name(ThreadState &ts, uint32_t id, const char *name, size_t length);
bool recording();
// True in a child made by vfork (or clone with CLONE_VM) of a recording process, until it execs:
// it shares the parent's memory but not its descriptors or signal dispositions, so the hooks
// that keep a per-process view (dispositions, own descriptors) leave that view alone there.
// Async-signal-safe (one getpid system call).
bool in_vfork_child();
// Before an exec: ends the trace as if for good (footer "exec") while the program's threads
// go on recording. True when it did; then resume_after_failed_exec() must follow if the exec
// returns (it failed), which cuts the footer off and goes on with the same trace.
bool end_before_exec();
void resume_after_failed_exec();
// Closes the trace before _exit (footer "exit"): no destructor runs then.
void finish_before_exit();
// The parent of a fork (the fork hook): `child` is not traced unless it execs; the footer
// counts those that had not when the trace ended.
void note_forked_child(int child);
// From the handler of a terminating signal: writes every thread's complete events and a
// footer naming the signal, with async-signal-safe calls only.
void finish_in_handler(int sig);

}  // namespace adprof::preload
