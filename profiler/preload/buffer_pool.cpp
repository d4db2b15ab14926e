// A thread's buffers: the pool of free buffers and heap coders (memory mapped by the profiler,
// never returned), the queue of full buffers to the writer, the registry of threads whose
// complete events the writer may copy, and refill, the hot path's one way out (recorder.h).
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "preload_internal.h"
#include "python_stacks.h"
#include "recorder_internal.h"
#include "stacks.h"

namespace adprof::preload {

// A fork used to copy the page tables of every buffer, and the parent then took a copy-on-write
// fault, with a TLB shootdown, on each page of them it wrote next: a program of 120 threads
// forking 300 times ran 13.8 s under the profiler against 2.2 s with it inert (sys 21 s against
// 2.4 s). Wiped on fork, the child gets fresh zeroed pages (writes it may make before
// on_fork_child marks it unrecorded land there, harmless) and the parent's stay its own.
void *profiler_mmap(size_t length, bool wipe_on_fork) {
  long r = syscall(SYS_mmap, nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (r == -1) return nullptr;
  // Linux 4.14 and later; else copied
  if (wipe_on_fork) syscall(SYS_madvise, r, length, MADV_WIPEONFORK);
  return reinterpret_cast<void *>(r);
}

pthread_mutex_t g_queue_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_work_cond = PTHREAD_COND_INITIALIZER;   // writer waits for buffers
pthread_cond_t g_space_cond = PTHREAD_COND_INITIALIZER;  // producers wait when it lags
Buffer *g_full_head = nullptr;
Buffer *g_full_tail = nullptr;
size_t g_full_count = 0;
bool g_stop_writer = false;
pthread_key_t g_thread_key;
pthread_mutex_t g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
uint32_t g_registry_slots = 0;

namespace {

constexpr size_t kMaxQueuedBuffers = 128;  // 128 MiB of raw events waiting for the writer
Buffer *g_free_list = nullptr;
std::atomic<uint32_t> g_next_tid{0};

// Hand-offs that read the recording as on and have not yet reached the writer's queue
// (hand_off_while_recording); the thread's own, in t_handing_off.
std::atomic<uint32_t> g_hand_offs_in_flight{0};
thread_local bool t_handing_off = false;

// Heap coders (about 140 KiB each) of exited threads, for the next threads to reuse.
struct PooledCoder {
  fmt::HeapCoder coder;  // first: a thread's coder pointer is its PooledCoder's
  PooledCoder *next;
};
PooledCoder *g_free_coders = nullptr;

// Threads with a buffer, for the writer's snapshots of idle threads and the final ones: a slot
// each, holding what the thread publishes (recorder.h, PublishedSlot). A thread leaves its slot
// at exit, under the mutex; one that ends unheard (no destructor ran) keeps it, and its last
// buffer with it. The slots come in pages mapped as threads arrive (the registry holds as many
// threads alive at once as kRegistryPages pages do: 262,144), so that a program of a few
// threads maps one page and one of 8,000 threads alive at once still has every thread's
// events written at the end (a fixed table of 4,096 left the others' last events out).
constexpr uint32_t kSlotsPerPage = 1024;
constexpr uint32_t kRegistryPages = 256;
struct SnapshotMark {
  uint64_t published;  // what the last snapshot of this slot covered
  uint32_t seen_seq;   // the buffer seq seen at the previous flush tick
  // oldest_unread_ticks: the word last seen, and when (the monotonic clock) it was first seen.
  uint64_t held_word;
  uint64_t held_since_ns;
};
struct RegistryPage {
  PublishedSlot slots[kSlotsPerPage];
  SnapshotMark marks[kSlotsPerPage];  // the writer's, under the mutex
};
// Pages are added under the mutex and never removed; g_registry_slots (a multiple of
// kSlotsPerPage) says how many slots they hold.
RegistryPage *g_registry[kRegistryPages];
PublishedSlot &slot_at(uint32_t i) {
  return g_registry[i / kSlotsPerPage]->slots[i % kSlotsPerPage];
}
SnapshotMark &mark_at(uint32_t i) {
  return g_registry[i / kSlotsPerPage]->marks[i % kSlotsPerPage];
}

}  // namespace

void recycle_buffer(Buffer *b) {
  pthread_mutex_lock(&g_queue_mutex);
  b->next = g_free_list;
  g_free_list = b;
  pthread_mutex_unlock(&g_queue_mutex);
}

// Takes the queue of full buffers, under g_queue_mutex; producers that waited for room go on.
Buffer *take_queue_locked() {
  Buffer *list = g_full_head;
  g_full_head = g_full_tail = nullptr;
  g_full_count = 0;
  pthread_cond_broadcast(&g_space_cond);
  return list;
}

// The complete events a registered thread has published (recorder_internal.h).
bool copy_published(uint32_t slot, uint8_t *copy, bool idle_only, Copied *out) {
  const PublishedSlot &pub = slot_at(slot);
  if (!pub.registered || slot == t_state.registry_slot) return false;
  Buffer *b = pub.buf.load(std::memory_order_acquire);
  uint64_t word = pub.word.load(std::memory_order_acquire);
  SnapshotMark &mark = mark_at(slot);
  if (!b || word == mark.published) return false;
  const auto [seq, events, used] = published_fields(word);
  if (idle_only) {
    const bool idle = mark.seen_seq == seq;
    mark.seen_seq = seq;
    if (!idle) return false;
  }
  if (events == 0 || seq != (b->seq & kPublishedSeqMask) || used > kBodyBytes || events > kTagBytes)
    return false;
  memcpy(copy, b->tags, events);
  memcpy(copy + events, b->bodies, used);
  // A seqlock's read: the buffer only changes hands through its thread (the writer recycles
  // buffers), so if it is still the published one with the same seq, the bytes copied were
  // complete. The acquire fence keeps the copy's loads before the re-check's: an acquire load
  // orders only what follows it, so without the fence the re-check could be satisfied before
  // the copy was made (the standard seqlock reader: H.-J. Boehm, "Can Seqlocks Get Along with
  // Programming Language Memory Models?", MSPC 2012, fig. 6; the paper's data are relaxed
  // atomics, this copy a memcpy, as in the Linux kernel's seqcount readers). On x86 (TSO) the
  // fence is no instruction, only a compiler barrier; it runs on the writer's side (or at the
  // end of the recording), never in a hook.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (pub.buf.load(std::memory_order_relaxed) != b ||
      published_fields(pub.word.load(std::memory_order_relaxed)).seq != seq)
    return false;
  mark.published = word;
  *out = {b, events, events + used};
  return true;
}

// Each registered thread's buffer with an event past the restated phase (recorder.h, end_event:
// more than one event published) holds events the writer has not read, none older than the
// buffer's time (`since`). A thread hands its buffer over at its first event after a flush tick;
// a thread blocked since its last event (a DataLoader worker's feeder waiting for the next
// batch) keeps it for as long as it waits. One whose word has not changed for `idle_ns` is left
// out: a thread that recorded once and then sleeps for the whole run would hold every step's
// figures back. The writer's own buffer is left out too (its counter samples).
//
// Ordered against the queue: a thread stores its new buffer's `since`, then its word, after it
// queued the old one (refill: hand_off, then start_buffer), and this reads the word first, then
// `since`. A word of the new buffer means the old one is in the queue taken after this call; a
// word of the old one, still published during the hand-off, comes with its own `since` or a
// later one whose buffer is queued.
uint64_t oldest_unread_ticks(uint64_t now, uint64_t idle_ns) {
  uint64_t oldest = UINT64_MAX;
  pthread_mutex_lock(&g_registry_mutex);
  for (uint32_t i = 0; i < g_registry_slots; ++i) {
    const PublishedSlot &pub = slot_at(i);
    if (!pub.registered || i == t_state.registry_slot) continue;
    const uint64_t word = pub.word.load(std::memory_order_acquire);
    SnapshotMark &mark = mark_at(i);
    if (word != mark.held_word) {
      mark.held_word = word;
      mark.held_since_ns = now;
    }
    if (published_fields(word).events <= 1 || now - mark.held_since_ns > idle_ns) continue;
    oldest = std::min(oldest, pub.since.load(std::memory_order_acquire));
  }
  pthread_mutex_unlock(&g_registry_mutex);
  return oldest;
}

namespace {

Buffer *take_free_buffer_locked() {
  Buffer *b = g_free_list;
  if (b) {
    g_free_list = b->next;
    return b;
  }
  return static_cast<Buffer *>(profiler_mmap(sizeof(Buffer)));
}

fmt::HeapCoder *take_coder_locked() {
  PooledCoder *c = g_free_coders;
  if (c)
    g_free_coders = c->next;
  else
    c = static_cast<PooledCoder *>(profiler_mmap(sizeof(PooledCoder)));
  return c ? &c->coder : nullptr;
}

void give_back_coder(ThreadState &ts) {
  if (!ts.coder) return;
  auto *c = reinterpret_cast<PooledCoder *>(ts.coder);
  ts.coder = nullptr;
  pthread_mutex_lock(&g_queue_mutex);
  c->next = g_free_coders;
  g_free_coders = c;
  pthread_mutex_unlock(&g_queue_mutex);
}

}  // namespace

void hand_off(ThreadState &ts) {
  Buffer *b = ts.buf;
  ts.published->buf.store(nullptr, std::memory_order_release);
  seal(b, ts.events, static_cast<uint32_t>(ts.cursor - b->bodies));
  b->next = nullptr;
  pthread_mutex_lock(&g_queue_mutex);
  if (g_full_tail)
    g_full_tail->next = b;
  else
    g_full_head = b;
  g_full_tail = b;
  ++g_full_count;
  pthread_cond_signal(&g_work_cond);
  pthread_mutex_unlock(&g_queue_mutex);
  ts.buf = nullptr;
  ts.cursor = ts.end = nullptr;
}

bool hand_off_while_recording(ThreadState &ts) {
  // Both sequentially consistent: the count is raised before the state is read here, the state
  // changed before the count is read at the end (wait_for_hand_offs); one sees the other.
  g_hand_offs_in_flight.fetch_add(1);
  t_handing_off = true;
  const bool on = g_state.load() == kRecording;
  if (on) hand_off(ts);
  t_handing_off = false;
  g_hand_offs_in_flight.fetch_sub(1, std::memory_order_release);
  return on;
}

void wait_for_hand_offs() {
  // At most a second: a thread stopped inside a hand-off must not hang the program's end. A
  // fatal signal's handler may have interrupted this thread's own hand-off.
  const uint32_t own = t_handing_off ? 1 : 0;
  for (int i = 0; i < 10000 && g_hand_offs_in_flight.load() > own; ++i) {
    timespec pause{0, 100'000};
    nanosleep(&pause, nullptr);
  }
}

namespace {

void start_buffer(ThreadState &ts, Buffer *b) {
  ts.buf = b;
  b->tid = ts.tid;
  b->seq = ts.next_seq++;
  b->base_ts = now_ticks();
  ts.last_ts = b->base_ts;
  ts.last_addr = 0;
  ts.last_stack = 0;
  if (ts.coder) ts.coder->reset();  // each chunk decodes alone
  ts.events = 0;
  ts.cursor = b->bodies;
  ts.end = b->bodies + kBodyBytes;
  ts.epoch = g_flush_epoch.load(std::memory_order_relaxed);
  ts.seq_bits = published_word(b->seq, 0, 0);
  ts.published->since.store(b->base_ts, std::memory_order_release);
  ts.published->word.store(ts.seq_bits, std::memory_order_release);
  ts.published->buf.store(b, std::memory_order_release);
  // The seqlock's writer side (copy_published): a recycled buffer is rewritten below, and a
  // reader still copying its previous contents must find its re-check changed. The release
  // fence orders this thread's publications (and, through the pool's mutex, the buffer's
  // withdrawal from its previous thread's slot) before the rewrite; a release store orders
  // only what precedes it (Boehm, MSPC 2012, as above). Once per buffer, and no instruction on
  // x86.
  std::atomic_thread_fence(std::memory_order_release);
  // Each chunk restates the thread's phase and (lazily) its role, so it reads alone.
  uint8_t *p = begin_unshared_event(ts, fmt::EventType::kPhase, ts.phase, b->base_ts);
  end_event(ts, p);
  ts.emitted_role = 0xFF;
}

void record_thread_name(ThreadState &ts) {
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  size_t n = strnlen(name, 16);
  uint8_t *p = begin_unshared_event(ts, fmt::EventType::kThreadName, 0, now_ticks());
  p = fmt::put_varint(p, n);
  memcpy(p, name, n);
  end_event(ts, p + n);
}

// A slot for the calling thread: the first free one (from where the last one was found), on a
// new page when every page is full. None when the registry is full or no page can be mapped:
// the thread then records into its buffers as before, snapshots of it aside.
void register_thread(ThreadState &ts) {
  static uint32_t next_free = 0;  // under the mutex; slots below it were taken when it moved
  pthread_mutex_lock(&g_registry_mutex);
  uint32_t found = ~0u;
  for (uint32_t i = 0; i < g_registry_slots && found == ~0u; ++i) {
    const uint32_t at = (next_free + i) % g_registry_slots;
    if (!slot_at(at).registered) found = at;
  }
  if (found == ~0u && g_registry_slots / kSlotsPerPage < kRegistryPages) {
    if (auto *page = static_cast<RegistryPage *>(profiler_mmap(sizeof(RegistryPage)))) {
      new (page) RegistryPage();
      g_registry[g_registry_slots / kSlotsPerPage] = page;
      found = g_registry_slots;
      g_registry_slots += kSlotsPerPage;
    }
  }
  if (found != ~0u) {
    PublishedSlot &pub = slot_at(found);
    pub.registered = true;
    pub.buf.store(nullptr);  // the thread has no buffer yet (refill), whoever held the slot
    pub.word.store(0);
    mark_at(found) = {0, ~0u, 0, 0};
    ts.published = &pub;
    ts.registry_slot = found;
    next_free = found + 1;
  }
  pthread_mutex_unlock(&g_registry_mutex);
}

}  // namespace

void on_thread_exit(void *arg) {
  // A fork child records nothing, and another thread of its parent may have held any of the
  // recorder's locks at the fork, held for good in the child: a thread that leaves there takes
  // none (before, about 1 child in 60 whose forking thread left hung: Lifecycle.
  // ForkChildsThreadExitNeverHangs).
  if (g_state.load() == kForkChild) return;
  auto *ts = static_cast<ThreadState *>(arg);
  if (syscall(SYS_gettid) == getpid()) g_main_thread_left_ns.store(now_ns());
  ++ts->guard;
  const bool unwritten = ts->buf && ts->events > 0 && !hand_off_while_recording(*ts);
  // The recording is ending (finish, or an exec's end, is writing the trace): the buffer stays
  // published in the registry, where the final snapshots find it (write_final_snapshots, under
  // the registry's mutex). Taken out, every event of a thread that ended then was lost from a
  // trace that read as complete (Lifecycle.ThreadEndingWhileTheTraceIsFinishedKeepsItsEvents).
  if (ts->registry_slot != ~0u && !unwritten) {
    pthread_mutex_lock(&g_registry_mutex);
    ts->published->registered = false;
    ts->published = &g_unread_slot;
    ts->registry_slot = ~0u;
    pthread_mutex_unlock(&g_registry_mutex);
  }
  give_back_coder(*ts);
  release_stack_table(*ts);
  release_python_shadow(*ts);
  --ts->guard;
}

bool refill(ThreadState &ts, size_t bytes) {
  if (bytes > kBodyBytes / 2) return false;
  if (g_state.load(std::memory_order_relaxed) != kRecording) {
    if (ts.buf) ts.end = ts.cursor;  // recording never resumes: keep failing fast
    return false;
  }
  ++ts.guard;
  if (!ts.has_tid) {
    ts.tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
    ts.owner_id = ts.tid + 1 < kTickShared ? ts.tid + 1 : 0;
    ts.has_tid = true;
  }
  const bool room = ts.buf && static_cast<size_t>(ts.end - ts.cursor) >= bytes;
  if (ts.buf) {
    if (ts.events <= 1 && room) {
      // Nothing but the restated phase since the last flush: keep the buffer as it is.
      ts.epoch = g_flush_epoch.load(std::memory_order_relaxed);
      --ts.guard;
      return true;
    }
  } else {
    pthread_setspecific(g_thread_key, &ts);  // flush at thread exit
    if (ts.registry_slot == ~0u) register_thread(ts);
  }
  // The next buffer is taken before the current one is handed off: a thread whose buffer still
  // has room and that can get no other (no free one, and no address space left to map one: a
  // program at its RLIMIT_AS) keeps writing into it, its flush put off to a later tick, the
  // buffer's end or the trace's. Before, the flush tick's hand-off came first, the new buffer's
  // mapping failed and recording stopped, the trace cut (Signals.
  // ProgramHeldAtItsAddressSpaceLimitIsRecordedWhole; ProgramAtItsAddressSpaceLimitRunsAsWithout
  // on a loaded machine).
  Buffer *b = nullptr;
  {
    pthread_mutex_lock(&g_queue_mutex);
    // A program thread waits while the writer lags; the writer never does: it is the one that
    // makes room, and a writer waiting for room (its counter samples fill a buffer too) waited
    // for good once the program's threads had filled the queue (2,000 threads alive at once
    // hung the program: Lifecycle.ThousandsOfThreadsAliveAtOnce).
    while (g_full_count >= kMaxQueuedBuffers && g_state.load() == kRecording && !t_is_writer)
      pthread_cond_wait(&g_space_cond, &g_queue_mutex);
    b = take_free_buffer_locked();
    if (!ts.coder) ts.coder = take_coder_locked();
    pthread_mutex_unlock(&g_queue_mutex);
  }
  if (!b && room) {
    ts.epoch = g_flush_epoch.load(std::memory_order_relaxed);
    --ts.guard;
    return true;
  }
  if (!b) {
    // The writer's own events are its counter samples: without a buffer it skips them (and
    // tries again at the next), and the program's recording goes on.
    if (!t_is_writer) stop_for_memory();
    --ts.guard;
    return false;
  }
  if (ts.buf && !hand_off_while_recording(ts)) {  // the recording ended since the check above
    recycle_buffer(b);
    ts.end = ts.cursor;
    --ts.guard;
    return false;
  }
  start_buffer(ts, b);
  if (b->seq == 0) record_thread_name(ts);  // the thread's first buffer (the writer's may be late)
  --ts.guard;
  return true;
}

// The parent's buffers, heap coders and registry pages were wiped by the fork (profiler_mmap):
// each reads as freshly mapped memory (a coder is reset with each buffer, a registry page of
// zeroes has every slot free), but the lists linking them are gone. The heads are kept (each a
// list of one), the queued buffers (the parent's events) dropped; the rest stays mapped and
// unused (address space only: no page of it is touched again).
void reset_buffers_in_fork_child(ThreadState &ts) {
  g_queue_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_work_cond = PTHREAD_COND_INITIALIZER;
  g_space_cond = PTHREAD_COND_INITIALIZER;
  g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_full_head = g_full_tail = nullptr;
  g_full_count = 0;
  g_stop_writer = false;
  if (g_free_list) g_free_list->next = nullptr;
  if (g_free_coders) g_free_coders->next = nullptr;
  g_next_tid.store(0);
  g_hand_offs_in_flight.store(0);  // the parent's threads' hand-offs: not the child's
  // The forking thread starts as a new thread of the new trace: a tid, a slot, a first buffer
  // (refill) that restates its phase and role, its name. Its heap coder is kept (wiped: reset
  // with that buffer); op scopes begun in the parent end there (their ends are ignored).
  ts.buf = nullptr;
  ts.cursor = ts.end = nullptr;
  ts.events = 0;
  ts.has_tid = false;
  ts.tid = 0;
  ts.next_seq = 0;
  ts.owner_id = 0;
  ts.claimed_tick = 0;
  ts.published = &g_unread_slot;
  ts.registry_slot = ~0u;
  ts.op_depth = 0;
  ts.emitted_role = 0xFF;
}

}  // namespace adprof::preload
