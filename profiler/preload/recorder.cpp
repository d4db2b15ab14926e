// The recorder's slow paths and life cycle: settings, the trace file, the buffer pool, the
// background writer, thread exit, fork, fatal signals and normal exit.
//
// Life cycle (documented in docs/ARCHITECTURE.md, "Recording"):
//   - ADPROF_OUTPUT unset or malformed settings: inert; hooks only forward to jemalloc.
//   - The process whose pid is ADPROF_ROOT_PID (or any process when it is unset) writes
//     ADPROF_OUTPUT; other processes that inherit the environment through exec write
//     ADPROF_OUTPUT.<pid>. The file is created exclusively (never over an existing file, never
//     through a symlink), mode 0600; the root process takes over `adprof run`'s claim of it.
//   - fork: the child is not traced (it runs on jemalloc, records nothing, writes nothing);
//     a child that execs is traced into its own file as above. The parent's footer counts the
//     children that had no trace of their own when it ended (`adprof run` says so).
//   - exec: the trace is ended with an "exec" footer before the image is replaced; the new
//     image (same pid) writes the first free name of <its file>.1, .2, ... so that
//     `adprof run` can follow a wrapper script to the program it execs. An exec that fails
//     returns to the program: the footer is cut off again and the same trace goes on, no event
//     lost (end_before_exec).
//   - SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGABRT/SIGTERM/SIGINT (when their disposition is the
//     default): the faulting thread's buffer and the queued chunks are written uncompressed
//     with a footer naming the signal, then the signal is re-raised with its default action.
//   - exit: the trace is finished after every library's destructor (finish_recording), so the
//     frees those destructors make are recorded.
//   - _exit and _Exit (no destructor runs): finished by their hooks (process_hooks.cpp);
//     quick_exit: by a handler registered with at_quick_exit (finish_at_quick_exit).
//   - SIGKILL: chunks already written stay readable. Every kFlushIntervalMs a thread
//     that keeps recording starts a new chunk, and the writer snapshots the complete events of
//     a thread that went idle (as a chunk with the same thread and sequence number, which the
//     reader replaces by the longest), so little more than that interval is lost.
//   - A write error (disk full): one message on stderr, recording stops, the program goes on;
//     the trace reads up to its last complete chunk.
#include "recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "chunk_columns.h"
#include "own_fds.h"
#include "preload_internal.h"
#include "python_stacks.h"
#include "signals.h"
#include "stacks.h"

extern "C" int __cxa_atexit(void (*function)(void *), void *argument, void *dso_handle);

namespace adprof::preload {

// A fork used to copy the page tables of every buffer, and the parent then took a copy-on-write
// fault, with a TLB shootdown, on each page of them it wrote next: a program of 120 threads
// forking 300 times ran 13.8 s under the profiler against 2.2 s with it inert (sys 21 s against
// 2.4 s). Wiped on fork, the child gets fresh zeroed pages (writes it may make before
// on_fork_child marks it unrecorded land there, harmless) and the parent's stay its own.
void *profiler_mmap(size_t length) {
  long r = syscall(SYS_mmap, nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (r == -1) return nullptr;
  syscall(SYS_madvise, r, length, MADV_WIPEONFORK);  // Linux 4.14 and later; else copied
  return reinterpret_cast<void *>(r);
}

PublishedSlot g_unread_slot;
thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));
std::atomic<uint32_t> g_flush_epoch{0};
static_assert(fmt::kSpaceHeap == ADPROF_SPACE_HEAP);
// A line of its own: written at most twice per share tick, loaded by every event.
alignas(64) std::atomic<uint64_t> g_tick_owner{kTickShared};

namespace {

enum State : int { kInert = 0, kRecording = 1, kStopped = 2, kForkChild = 3, kFinished = 4 };

constexpr int kFlushIntervalMs = 100;
constexpr size_t kMaxQueuedBuffers = 128;  // 128 MiB of raw events waiting for the writer

std::atomic<int> g_state{kInert};
// The trace file: its absolute path and identity, so that a descriptor the program closed or
// replaced behind the hooks' back is noticed before a write (own_fds.h).
char g_trace_path[4096];
// ADPROF_OUTPUT, absolute: a process started by fork+exec writes ADPROF_OUTPUT.<pid>.
char g_output_base[4096];
// The children this process forked, for the footer's count of those never traced (a fork
// child is traced only once it execs: it then writes g_output_base.<pid>). The first
// kForkedSlots are kept; later forks are counted, not checked.
constexpr uint32_t kForkedSlots = 4096;
std::atomic<uint32_t> g_forked_count{0};
std::atomic<int> g_forked[kForkedSlots];
dev_t g_trace_dev = 0;
ino_t g_trace_ino = 0;
// ADPROF_ZSTD_LEVEL, one level for every part of a chunk; kDefaultZstdLevel: each part its own
// (compress_chunk).
constexpr int kDefaultZstdLevel = 1000;
int g_zstd_level = kDefaultZstdLevel;
int g_sample_ms = 10;
pthread_key_t g_thread_key;
pthread_t g_writer;
std::atomic<uint32_t> g_next_tid{0};
uint64_t g_start_ns = 0;
uint64_t g_start_ticks = 0;
size_t g_page_size = 4096;

pthread_mutex_t g_queue_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_work_cond = PTHREAD_COND_INITIALIZER;   // writer waits for buffers
pthread_cond_t g_space_cond = PTHREAD_COND_INITIALIZER;  // producers wait when it lags
Buffer *g_full_head = nullptr;
Buffer *g_full_tail = nullptr;
size_t g_full_count = 0;
Buffer *g_free_list = nullptr;
bool g_stop_writer = false;

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
pthread_mutex_t g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
struct SnapshotMark {
  uint64_t published;  // what the last snapshot of this slot covered
  uint32_t seen_seq;   // the buffer seq seen at the previous flush tick
};
struct RegistryPage {
  PublishedSlot slots[kSlotsPerPage];
  SnapshotMark marks[kSlotsPerPage];  // the writer's, under the mutex
};
// Pages are added under the mutex and never removed; g_registry_slots (a multiple of
// kSlotsPerPage) says how many slots they hold.
RegistryPage *g_registry[kRegistryPages];
uint32_t g_registry_slots = 0;
PublishedSlot &slot_at(uint32_t i) {
  return g_registry[i / kSlotsPerPage]->slots[i % kSlotsPerPage];
}
SnapshotMark &mark_at(uint32_t i) {
  return g_registry[i / kSlotsPerPage]->marks[i % kSlotsPerPage];
}

// The writer thread's own: it never waits for room in the queue it empties (refill).
thread_local bool t_is_writer __attribute__((tls_model("initial-exec"))) = false;

std::atomic<uint64_t> g_events_written{0};
std::atomic<uint64_t> g_chunks_written{0};
std::atomic<uint64_t> g_events_dropped{0};

// The process that records (a vfork child shares this memory, and must not finish it).
pid_t g_recording_pid = 0;
// Same for every process of one `adprof run` (ADPROF_RUN_ID), written into each trace's header
// so that no earlier run's file is taken for this run's.
uint32_t g_run_id = 0;
std::atomic<bool> g_writer_running{false};
std::atomic<bool> g_writer_ready{false};  // its allocator state is set up
std::atomic<bool> g_write_error_said{false};
// Held by whoever ends the trace (finish), and by a thread that execs from before the "exec"
// footer until its exec fails (end_before_exec): one ending at a time.
pthread_mutex_t g_end_mutex = PTHREAD_MUTEX_INITIALIZER;
// Where the "exec" footer of an exec under way begins in the file (-1: none): a failed exec cuts
// the file back to it, and so does a fatal signal that ends the process meanwhile.
std::atomic<off_t> g_exec_footer_at{-1};

void say(const char *a, const char *b = "", const char *c = "") {
  // One line on stderr without allocating.
  char line[1024];
  snprintf(line, sizeof line, "adprof: %s%s%s\n", a, b, c);
  ssize_t ignored = write(2, line, strlen(line));
  (void)ignored;
}

// ---- chunk writing ---------------------------------------------------------------------------

// Under lock_own_fds() except in a signal handler: a dup2 never moves the trace's number
// between the check and the write.
bool write_all_locked(const iovec *iov_in, int count) {
  if (!ensure_trace_fd(g_trace_path, g_trace_dev, g_trace_ino)) {
    errno = EBADF;
    return false;
  }
  const int fd = own_fd(OwnFd::kTrace);
  iovec iov[2];
  memcpy(iov, iov_in, sizeof(iovec) * count);
  int first = 0;
  while (first < count) {
    ssize_t n = writev(fd, iov + first, count - first);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    while (n > 0 && first < count) {
      if (static_cast<size_t>(n) >= iov[first].iov_len) {
        n -= iov[first].iov_len;
        ++first;
      } else {
        iov[first].iov_base = static_cast<uint8_t *>(iov[first].iov_base) + n;
        iov[first].iov_len -= n;
        n = 0;
      }
    }
  }
  return true;
}

// Recording stops (the program goes on; the trace reads up to its last complete chunk), said
// once: `what` went wrong, then what that means for the trace. Also when the final writes at
// exit fail, after recording was already finished.
void stop_recording(const char *what, const char *detail) {
  int expected = kRecording;
  const bool stopped = g_state.compare_exchange_strong(expected, kStopped);
  if (!g_write_error_said.exchange(true))
    say(what, detail,
        stopped ? "; recording stopped, the trace ends at its last complete chunk"
                : "; the end of the trace is missing, it reads up to its last complete chunk");
  if (stopped) {
    g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
    pthread_cond_broadcast(&g_space_cond);
  }
}

void stop_on_write_error(int err) { stop_recording("trace write failed: ", strerror(err)); }

// No memory for another trace buffer: the program is at its memory limit.
void stop_for_memory() {
  stop_recording("no memory for the trace's buffers (the program is at its memory limit)", "");
}

// Packs the chunk header documented in trace_format.h and writes header + payload in one
// writev, so chunks from the writer and from a signal handler never interleave (O_APPEND).
// `in_handler`: called from a signal handler, which must not take the descriptors' lock (the
// interrupted thread may hold it).
bool write_all(const iovec *iov, int count, bool in_handler = false) {
  if (in_handler) return write_all_locked(iov, count);
  lock_own_fds();
  bool ok = write_all_locked(iov, count);
  int err = errno;
  unlock_own_fds();
  errno = err;
  return ok;
}

bool write_chunk(uint32_t tid, uint32_t seq, uint64_t base_ts, uint32_t events, uint32_t flags,
                 const uint8_t *payload, uint32_t stored, uint32_t raw, bool in_handler = false) {
  uint8_t header[fmt::kChunkHeaderSize];
  fmt::put_u32(header + 0, fmt::kChunkMagic);
  fmt::put_u32(header + 8, tid);
  fmt::put_u32(header + 12, flags);
  fmt::put_u32(header + 16, stored);
  fmt::put_u32(header + 20, raw);
  fmt::put_u64(header + 24, base_ts);
  fmt::put_u32(header + 32, events);
  fmt::put_u32(header + 36, seq);
  uLong crc = crc32(0L, header + 8, fmt::kChunkHeaderSize - 8);
  crc = crc32(crc, payload, stored);
  fmt::put_u32(header + 4, static_cast<uint32_t>(crc));
  iovec iov[2] = {{header, sizeof header}, {const_cast<uint8_t *>(payload), stored}};
  if (!write_all(iov, 2, in_handler)) {
    stop_on_write_error(errno);
    return false;
  }
  // The footer counts the events of every chunk written, snapshots included (the reader adds
  // back those of the snapshots it replaced before it compares).
  g_events_written.fetch_add(events, std::memory_order_relaxed);
  g_chunks_written.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Compresses a chunk (its tags, then its bodies) as zstd frames into `z`, columnar
// (chunk_columns.h) when the bodies can be split: the tags, the column directory and each
// column are frames of their own, so that each gets its own entropy tables; the reader
// decompresses them in one call. Returns the stored size (0: write the chunk plain) and sets
// the chunk's flags and raw size.
//
// Two zstd levels: every part at level 1 first; a part that shrank to less than 1/16 (a
// program's allocation pattern repeating over thousands of events) is compressed again at level
// 5, whose match finder (a hash chain) finds the repeats that level 1's single probe misses, and
// the smaller frame kept. On the Python JSON run of docs/PERFORMANCE.md the tags take 0.0039
// B/event instead of 0.0189, for 0.5 ns/event more of the writer's CPU; a part that level 1
// cannot shrink much (the storm's sizes and slots: random) costs level 5 most and gains least,
// and is not tried. ADPROF_ZSTD_LEVEL sets one level for every part.
struct Compressor {
  ZSTD_CCtx *cctx[2] = {};  // [kFirstPass]: level 1 (or ADPROF_ZSTD_LEVEL); [kSecondPass]: 5,
                            // made only without ADPROF_ZSTD_LEVEL
  uint8_t *z = nullptr;     // compressed output
  size_t z_cap = 0;
  uint8_t *columns = nullptr;  // the columnar chunk
  size_t columns_cap = 0;
  fmt::LiveOrder order;  // a chunk's live allocations, to write frees by rank (chunk_columns.h)
};
enum Pass { kFirstPass = 0, kSecondPass = 1 };
constexpr int kFirstPassLevel = 1, kSecondPassLevel = 5;
constexpr size_t kSecondPassRatio = 16;  // a first frame under 1/16 of the part's bytes
constexpr int kSecondPassHashLog = 17, kSecondPassChainLog = 16;  // ZSTD_getCParams(5, 128 KiB)

int pass_level(Pass pass) {
  if (g_zstd_level != kDefaultZstdLevel) return g_zstd_level;
  return pass == kFirstPass ? kFirstPassLevel : kSecondPassLevel;
}

// Everything the writer needs, reserved at start-up while memory is plentiful: a program that
// runs near its memory limit must not make the writer fail (or crash) to allocate later. zstd
// sizes its workspace on first use: one compression of a full chunk reserves it for good.
bool prepare_compressor(Compressor &k, uint8_t **snapshot_copy) {
  k.columns_cap = fmt::columns_scratch_bytes(kTagBytes, kBodyBytes);
  k.columns = static_cast<uint8_t *>(profiler_mmap(k.columns_cap));
  // The frames of a chunk's 2 + kColumnCount parts: a chunk whose frames would take more than
  // its plain bytes (kTagBytes + kBodyBytes at most) is written plain, so that is all the room
  // they need (a part that does not fit fails to compress: the chunk goes plain). Sized for
  // every part's compress bound, this took 8 MiB of the program's address space (RLIMIT_AS).
  k.z_cap = kTagBytes + kBodyBytes;
  k.z = static_cast<uint8_t *>(profiler_mmap(k.z_cap));
  *snapshot_copy = static_cast<uint8_t *>(profiler_mmap(kTagBytes + kBodyBytes));
  // A chunk has at most as many allocations as tags.
  auto *words = static_cast<uint64_t *>(
      profiler_mmap(fmt::LiveOrder::words_for(kTagBytes) * sizeof(uint64_t)));
  auto *counts = static_cast<uint16_t *>(
      profiler_mmap(fmt::LiveOrder::counts_for(kTagBytes) * sizeof(uint16_t)));
  if (!k.z || !k.columns || !*snapshot_copy || !words || !counts) return false;
  k.order.attach(words, counts, kTagBytes);
  if (g_zstd_level > -100) {
    for (const Pass pass : {kFirstPass, kSecondPass}) {
      if (pass == kSecondPass && g_zstd_level != kDefaultZstdLevel) break;  // one level: one pass
      ZSTD_CCtx *&c = k.cctx[pass];
      c = ZSTD_createCCtx();
      if (c) {
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, pass_level(pass));
        if (pass == kSecondPass) {
          // Level 5's tables sized for a 128 KiB input (its own for a 1 MiB one take 3.6 MiB
          // of the program's address space, these 1.3 MiB): the parts it is tried on repeat
          // within a few KiB.
          ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, kSecondPassHashLog);
          ZSTD_CCtx_setParameter(c, ZSTD_c_chainLog, kSecondPassChainLog);
        }
      }
      if (c &&
          ZSTD_isError(ZSTD_compress2(c, k.z, k.z_cap, *snapshot_copy, kTagBytes + kBodyBytes))) {
        ZSTD_freeCCtx(c);
        c = nullptr;
      }
    }
  }
  return true;
}

size_t compress_chunk(Compressor &k, const uint8_t *tags, uint32_t events, const uint8_t *bodies,
                      uint32_t body_len, uint32_t *flags, uint32_t *raw) {
  const bool second_pass = g_zstd_level == kDefaultZstdLevel;
  if (!k.cctx[kFirstPass] || (second_pass && !k.cctx[kSecondPass])) return 0;
  size_t dir_at = 0;
  size_t n = k.columns ? fmt::to_columns(tags, events, bodies, body_len, k.columns, k.columns_cap,
                                         &dir_at, g_stacks, k.order)
                       : 0;
  if (n == 0) return 0;
  size_t cuts[2 + fmt::kColumnCount + 1];  // frame boundaries in the columnar chunk
  size_t count = 0;
  cuts[count++] = 0;
  cuts[count++] = events;
  fmt::Cursor dir{k.columns + events, k.columns + dir_at};
  size_t at = dir_at;
  cuts[count++] = at;
  for (int c = 0; c < fmt::kColumnCount; ++c) {
    at += dir.varint();
    if (at != cuts[count - 1]) cuts[count++] = at;
  }
  size_t out = 0;
  for (size_t i = 0; i + 1 < count; ++i) {
    const uint8_t *part = k.columns + cuts[i];
    const size_t length = cuts[i + 1] - cuts[i];
    if (length == 0) continue;
    size_t m = ZSTD_compress2(k.cctx[kFirstPass], k.z + out, k.z_cap - out, part, length);
    if (ZSTD_isError(m)) return 0;
    // The second frame goes after the first, given as much room as the first took (a frame
    // that does not fit there is no smaller: zstd fails it), and replaces it when smaller.
    if (second_pass && m * kSecondPassRatio < length && k.z_cap - out - m >= m) {
      const size_t m2 = ZSTD_compress2(k.cctx[kSecondPass], k.z + out + m, m, part, length);
      if (!ZSTD_isError(m2) && m2 < m) {
        memmove(k.z + out, k.z + out + m, m2);
        m = m2;
      }
    }
    out += m;
  }
  if (out >= n) return 0;
  *flags = fmt::kChunkFlagZstd | fmt::kChunkFlagColumns;
  *raw = static_cast<uint32_t>(n);
  return out;
}

// Puts a buffer's bodies right after its tags: the chunk's raw bytes (trace_format.h).
void seal(Buffer *b, uint32_t events, uint32_t body_bytes) {
  memmove(b->tags + events, b->bodies, body_bytes);
  b->events = events;
  b->used = events + body_bytes;
}

void write_buffer(Buffer *b, Compressor &k) {
  if (g_state.load() != kRecording && g_state.load() != kFinished) {
    g_events_dropped.fetch_add(b->events, std::memory_order_relaxed);
    return;
  }
  uint32_t flags = 0, raw = 0;
  if (size_t n = compress_chunk(k, b->tags, b->events, b->tags + b->events, b->used - b->events,
                                &flags, &raw)) {
    write_chunk(b->tid, b->seq, b->base_ts, b->events, flags, k.z, static_cast<uint32_t>(n), raw);
    return;
  }
  write_chunk(b->tid, b->seq, b->base_ts, b->events, 0, b->tags, b->used, b->used);
}

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

// Writes a list taken from the queue, in order, and gives each buffer back to the pool.
void write_buffers(Buffer *list, Compressor &k) {
  while (list) {
    Buffer *next = list->next;
    write_buffer(list, k);
    recycle_buffer(list);
    list = next;
  }
}

// A signal handler must not block on a lock the thread it interrupted may hold: it tries for
// about a second, then does without.
bool lock_briefly(pthread_mutex_t *m) {
  for (int i = 0; i < 1000; ++i) {
    if (pthread_mutex_trylock(m) == 0) return true;
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
  return false;
}

// The complete events a registered thread has published, copied into `copy` as a raw chunk
// (tags, then bodies). With `idle_only`, only a thread that kept the same buffer through a
// whole flush interval counts (one that records starts a new buffer after each tick). Under
// g_registry_mutex; marks what it copied, so the same events are not written twice.
struct Copied {
  Buffer *buffer;
  uint32_t events, bytes;
};
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
  // The buffer only changes hands through its thread (the writer recycles buffers), so if it
  // is still the published one with the same seq, the bytes copied were complete.
  if (pub.buf.load(std::memory_order_acquire) != b ||
      published_fields(pub.word.load(std::memory_order_acquire)).seq != seq)
    return false;
  mark.published = word;
  *out = {b, events, events + used};
  return true;
}

// Writes the complete events of threads that have kept the same buffer since the last flush
// tick (they went idle): a chunk with the buffer's thread and sequence number, which the
// reader replaces by a longer one with the same numbers if the buffer fills later.
void snapshot_idle_threads(Compressor &k, uint8_t *copy) {
  pthread_mutex_lock(&g_registry_mutex);
  Copied c;
  for (uint32_t i = 0; i < g_registry_slots && g_state.load() == kRecording; ++i) {
    if (!copy_published(i, copy, /*idle_only=*/true, &c)) continue;
    Buffer *b = c.buffer;
    uint32_t flags = 0, raw = 0;
    if (size_t n =
            compress_chunk(k, copy, c.events, copy + c.events, c.bytes - c.events, &flags, &raw))
      write_chunk(b->tid, b->seq, b->base_ts, c.events, flags | fmt::kChunkFlagSnapshot, k.z,
                  static_cast<uint32_t>(n), raw);
    else
      write_chunk(b->tid, b->seq, b->base_ts, c.events, fmt::kChunkFlagSnapshot, copy, c.bytes,
                  c.bytes);
  }
  pthread_mutex_unlock(&g_registry_mutex);
}

// The children this process forked that have no trace of their own (they did not exec, or not
// yet): a stat of each one's file name. Async-signal-safe (snprintf of integers, access).
uint64_t untraced_fork_children() {
  const uint32_t forks = g_forked_count.load(std::memory_order_acquire);
  uint64_t untraced = 0;
  for (uint32_t i = 0; i < forks && i < kForkedSlots; ++i) {
    const int pid = g_forked[i].load(std::memory_order_relaxed);
    char name[sizeof g_output_base + 16];
    if (pid <= 0 ||
        snprintf(name, sizeof name, "%s.%d", g_output_base, pid) >= static_cast<int>(sizeof name))
      continue;
    if (access(name, F_OK) != 0) ++untraced;
  }
  return untraced;
}

bool write_footer(fmt::EndReason reason, int sig, bool in_handler = false) {
  uint8_t body[64];
  uint8_t *p = body;
  p = fmt::put_varint(p, g_events_written.load());
  p = fmt::put_varint(p, g_chunks_written.load());
  p = fmt::put_varint(p, g_events_dropped.load());
  p = fmt::put_varint(p, static_cast<uint64_t>(reason));
  p = fmt::put_varint(p, static_cast<uint64_t>(sig));
  p = fmt::put_varint(p, untraced_fork_children());
  uint32_t n = static_cast<uint32_t>(p - body);
  return write_chunk(fmt::kFooterThread, 0, now_ticks(), 0, 0, body, n, n, in_handler);
}

// ---- buffer pool -----------------------------------------------------------------------------

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
  ts.published->word.store(ts.seq_bits, std::memory_order_release);
  ts.published->buf.store(b, std::memory_order_release);
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
    mark_at(found) = {0, ~0u};
    ts.published = &pub;
    ts.registry_slot = found;
    next_free = found + 1;
  }
  pthread_mutex_unlock(&g_registry_mutex);
}

void on_thread_exit(void *arg) {
  // A fork child records nothing, and another thread of its parent may have held any of the
  // recorder's locks at the fork, held for good in the child: a thread that leaves there takes
  // none (before, about 1 child in 60 whose forking thread left hung: Lifecycle.
  // ForkChildsThreadExitNeverHangs).
  if (g_state.load() == kForkChild) return;
  auto *ts = static_cast<ThreadState *>(arg);
  ++ts->guard;
  if (ts->buf && ts->events > 0 && g_state.load() == kRecording) hand_off(*ts);
  if (ts->registry_slot != ~0u) {
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

// ---- the writer thread -----------------------------------------------------------------------

// `final`: the writer's last sample after recording was closed; writes only what still fits.
void sample_counters(ThreadState &ts, bool final) {
  uint64_t values[fmt::kCounterKindCount];
  bool have[fmt::kCounterKindCount] = {};
  values[0] = now_ns() - g_start_ns;
  have[0] = true;
  if (const int statm = own_fd(OwnFd::kStatm); statm >= 0) {
    char text[128];
    ssize_t n = pread(statm, text, sizeof text - 1, 0);
    if (n > 0) {
      text[n] = 0;
      unsigned long long size_pages = 0, resident_pages = 0;
      if (sscanf(text, "%llu %llu", &size_pages, &resident_pages) == 2) {
        values[1] = resident_pages * g_page_size;
        have[1] = true;
      }
    }
  }
  uint64_t epoch = 1;
  size_t esz = sizeof epoch;
  if (mallctl("epoch", &epoch, &esz, &epoch, esz) == 0) {
    const char *names[] = {"stats.allocated", "stats.active", "stats.resident", "stats.retained",
                           "stats.mapped"};
    for (int i = 0; i < 5; ++i) {
      size_t v = 0, vsz = sizeof v;
      if (mallctl(names[i], &v, &vsz, nullptr, 0) == 0) {
        values[2 + i] = v;
        have[2 + i] = true;
      }
    }
  }
  uint64_t t = now_ticks();
  for (uint8_t k = 0; k < fmt::kCounterKindCount; ++k) {
    if (!have[k]) continue;
    if (final ? static_cast<size_t>(ts.end - ts.cursor) < kMaxFixedEvent
              : !reserve(ts, kMaxFixedEvent))
      continue;
    uint8_t *p = begin_unshared_event(ts, fmt::EventType::kCounter, k, t);
    end_event(ts, fmt::put_varint(p, values[k]));
  }
}

Compressor g_compressor;             // the writer's (prepare_compressor)
uint8_t *g_snapshot_copy = nullptr;  // the writer's scratch for snapshots of idle threads
uint8_t *g_final_copy = nullptr;     // the same for the final snapshots (finish, a handler)
// The writer's identity in the trace, taken on by a writer restarted after a failed exec: the
// trace has one profiler thread, its chunks numbered on (a chunk's thread and number are what
// the reader matches snapshots by). Set by each writer as it ends, read by the next.
struct WriterIdentity {
  bool has_tid = false;
  uint32_t tid = 0;
  uint64_t owner_id = 0;
  uint32_t next_seq = 0;
};
WriterIdentity g_writer_identity;

// glibc ends a process when the last thread it counts exits (that thread calls exit(0)), and
// it counts the writer: a program whose main thread leaves with pthread_exit, and whose other
// threads then all finish, would run on forever under the profiler (as it does under
// heaptrack), the trace never finished. The writer watches for that state (the main thread a
// zombie, no thread left but it) and ends the process as glibc would have: exit(0) on a thread
// of the program's kind, full stack and no signal blocked, named as the main thread, whose exit
// handlers and destructors are recorded like any thread's; the writer goes on writing and is
// stopped by finish() as at any exit.
constexpr size_t kThreadNameBytes = 16;  // the kernel's, with the terminating zero

// From /proc/self/stat (the main thread's state, the process's thread count): the main thread
// exited and only the writer is left; then `main_thread_name` is the main thread's name.
bool only_the_writer_left(char (&main_thread_name)[kThreadNameBytes]) {
  const int fd = own_fd(OwnFd::kStat);
  char text[1024];
  const ssize_t n = fd >= 0 ? pread(fd, text, sizeof text - 1, 0) : -1;
  if (n <= 0) return false;
  text[n] = 0;
  char *open_paren = strchr(text, '(');
  char *close_paren = strrchr(text, ')');  // the name may hold ')'
  if (!open_paren || !close_paren || close_paren[1] != ' ') return false;
  const char state = close_paren[2];
  if (state != 'Z') return false;
  // Fields after the state: ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice num_threads.
  const char *field = close_paren + 2;
  for (int skip = 0; skip < 17 && field; ++skip) {
    field = strchr(field, ' ');
    if (field) ++field;
  }
  if (!field || strtol(field, nullptr, 10) != 2) return false;  // the zombie and the writer
  const size_t name_length =
      std::min(kThreadNameBytes - 1, static_cast<size_t>(close_paren - open_paren - 1));
  memcpy(main_thread_name, open_paren + 1, name_length);
  main_thread_name[name_length] = 0;
  return true;
}

// `name`: the main thread's (the writer's, which outlives this thread).
void *end_the_process(void *name) {
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_NAME, name, 0, 0, 0);
  exit(0);
}

void *writer_main(void *) {
  ThreadState &ts = t_state;
  t_is_writer = true;
  ts.guard = 1;  // what the writer allocates is the profiler's, not the program's
  prctl(PR_SET_NAME, "adprof-writer", 0, 0, 0);
  if (g_writer_identity.has_tid) {
    ts.has_tid = true;
    ts.tid = g_writer_identity.tid;
    ts.owner_id = g_writer_identity.owner_id;
    ts.next_seq = g_writer_identity.next_seq;
  }
  // The writer's jemalloc calls (statistics) use the first arena: a thread of its own would get
  // an arena of its own, megabytes of the program's address space.
  unsigned first_arena = 0;
  mallctl("thread.arena", nullptr, nullptr, &first_arena, sizeof first_arena);
  // jemalloc sets up a thread's state on its first call, and crashes (not fails) when memory
  // is short then: that happens now, before the program runs (start_recording waits for it).
  uint64_t epoch = 1;
  size_t epoch_size = sizeof epoch;
  mallctl("epoch", &epoch, &epoch_size, &epoch, epoch_size);
  g_writer_ready.store(true, std::memory_order_release);
  Compressor &k = g_compressor;
  uint8_t *copy = g_snapshot_copy;
  uint64_t last_flush = now_ns();
  uint64_t last_sample = 0;
  bool ending_the_process = false;  // the program's threads are all gone (end_the_process)
  char main_thread_name[kThreadNameBytes] = {};
  for (;;) {
    pthread_mutex_lock(&g_queue_mutex);
    if (!g_full_head && !g_stop_writer) {
      timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += static_cast<long>(g_sample_ms) * 1000000L;
      deadline.tv_sec += deadline.tv_nsec / 1000000000L;
      deadline.tv_nsec %= 1000000000L;
      pthread_cond_timedwait(&g_work_cond, &g_queue_mutex, &deadline);
    }
    Buffer *list = take_queue_locked();
    bool stop = g_stop_writer;
    pthread_mutex_unlock(&g_queue_mutex);
    write_buffers(list, k);
    if (stop) break;

    uint64_t now = now_ns();
    if (now - last_sample >= static_cast<uint64_t>(g_sample_ms) * 1000000u) {
      last_sample = now;
      if (g_state.load() == kRecording) sample_counters(ts, false);
      if (!ending_the_process && g_state.load() == kRecording &&
          only_the_writer_left(main_thread_name)) {
        pthread_t ender;
        ending_the_process =
            pthread_create(&ender, nullptr, end_the_process, main_thread_name) == 0;
        if (ending_the_process) pthread_detach(ender);
      }
    }
    if (now - last_flush >= kFlushIntervalMs * 1000000ull) {
      last_flush = now;
      if (copy) snapshot_idle_threads(k, copy);
      g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Final counters and the writer's own buffer (stopped by finish() or before an exec; a later
  // writer, if the exec fails, starts a buffer of its own).
  if (ts.buf && (g_state.load() == kFinished || g_state.load() == kRecording)) {
    sample_counters(ts, true);
    seal(ts.buf, ts.events, static_cast<uint32_t>(ts.cursor - ts.buf->bodies));
    write_buffer(ts.buf, k);
    recycle_buffer(ts.buf);
    ts.buf = nullptr;
    ts.cursor = ts.end = nullptr;
  }
  g_writer_identity = {ts.has_tid, ts.tid, ts.owner_id, ts.next_seq};
  g_writer_running.store(false, std::memory_order_release);
  return nullptr;
}

// Starts the writer and waits until its allocator state is set up. The writer blocks every
// signal from its first instruction: a signal sent to the process must reach one of the
// program's threads, as it would without the profiler (a shell's SIGCHLD handler run on the
// writer would race with the shell's own main thread). Its stack is small: address space
// counts against a program's RLIMIT_AS.
bool start_writer() {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  g_stop_writer = false;
  g_writer_ready.store(false, std::memory_order_release);
  g_writer_running.store(true, std::memory_order_release);
  int started = pthread_create(&g_writer, &attr, writer_main, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  for (int i = 0; started == 0 && i < 5000 && !g_writer_ready.load(std::memory_order_acquire);
       ++i) {
    timespec pause{0, 100000};
    nanosleep(&pause, nullptr);
  }
  if (started != 0) g_writer_running.store(false, std::memory_order_release);
  return started == 0;
}

// Stops the writer after the buffers queued so far, its counters and its own buffer are written.
void stop_writer() {
  pthread_mutex_lock(&g_queue_mutex);
  g_stop_writer = true;
  pthread_cond_signal(&g_work_cond);
  pthread_mutex_unlock(&g_queue_mutex);
  pthread_join(g_writer, nullptr);
}

// The complete events of every thread but the caller's, as snapshot chunks (raw: a signal
// handler may not compress): at the end, the threads still running have buffers that were
// never handed to the writer. `in_handler`: no blocking on locks.
void write_final_snapshots(bool in_handler) {
  if (!g_final_copy) return;
  if (in_handler) {
    if (!lock_briefly(&g_registry_mutex)) return;
  } else {
    pthread_mutex_lock(&g_registry_mutex);
  }
  Copied c;
  for (uint32_t i = 0; i < g_registry_slots; ++i)
    if (copy_published(i, g_final_copy, /*idle_only=*/false, &c))
      write_chunk(c.buffer->tid, c.buffer->seq, c.buffer->base_ts, c.events,
                  fmt::kChunkFlagSnapshot, g_final_copy, c.bytes, c.bytes, in_handler);
  pthread_mutex_unlock(&g_registry_mutex);
}

// ---- signals, fork, exit ---------------------------------------------------------------------

void on_fork_child() {
  if (g_state.load() == kRecording || g_state.load() == kStopped) {
    g_state.store(kForkChild);
    ThreadState &ts = t_state;
    ts.buf = nullptr;
    ts.cursor = ts.end = nullptr;
    forget_own_fds();
  }
}

bool parse_int(const char *text, long lo, long hi, long *out) {
  if (!text || !*text) return false;
  char *end = nullptr;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || *end != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool absolute_path(const char *path, char *out, size_t out_size);

bool read_settings(char *path, size_t path_size, bool &want_stacks) {
  const char *output = getenv("ADPROF_OUTPUT");
  if (!output || !*output) return false;
  long v;
  if (const char *s = getenv("ADPROF_SAMPLE_MS")) {
    if (!parse_int(s, 1, 60000, &v)) {
      say("ADPROF_SAMPLE_MS must be an integer from 1 to 60000; not recording");
      return false;
    }
    g_sample_ms = static_cast<int>(v);
  }
  if (const char *s = getenv("ADPROF_ZSTD_LEVEL")) {
    if (!parse_int(s, -7, 19, &v)) {
      say("ADPROF_ZSTD_LEVEL must be an integer from -7 to 19; not recording");
      return false;
    }
    g_zstd_level = static_cast<int>(v);
  }
  if (const char *s = getenv("ADPROF_STACKS")) {
    if (!parse_int(s, 0, 1, &v)) {
      say("ADPROF_STACKS must be 0 or 1; not recording");
      return false;
    }
    want_stacks = v == 1;
  }
  long root = 0;
  const char *root_text = getenv("ADPROF_ROOT_PID");
  if (root_text && !parse_int(root_text, 1, 1L << 30, &root)) {
    say("ADPROF_ROOT_PID is not a pid; not recording");
    return false;
  }
  if (const char *run = getenv("ADPROF_RUN_ID")) {
    if (!parse_int(run, 1, 0xFFFFFFFFL, &v)) {
      say("ADPROF_RUN_ID must be an integer from 1 to 4294967295; not recording");
      return false;
    }
    g_run_id = static_cast<uint32_t>(v);
  }
  if (!absolute_path(output, g_output_base, sizeof g_output_base)) {
    say("ADPROF_OUTPUT is too long; not recording");
    return false;
  }
  int n;
  if (root_text && root != getpid())
    n = snprintf(path, path_size, "%s.%ld", output, static_cast<long>(getpid()));
  else
    n = snprintf(path, path_size, "%s", output);
  if (n <= 0 || static_cast<size_t>(n) >= path_size) {
    say("ADPROF_OUTPUT is too long; not recording");
    return false;
  }
  return true;
}

// Creates the trace exclusively, readable and writable by its owner only (0600: a trace holds
// the process's addresses, libraries and call sites). When the name is taken by an earlier
// image of this same process (it exec'd), the first free of NAME.1, NAME.2, ... is used. When
// it holds this run's claim (`adprof run` creates the root process's file before it starts
// the program, so that a second run of the same name is refused before its program runs:
// trace_format.h, "Claim"), the file is taken over.
int create_trace_file(char *path, size_t path_size) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_APPEND;
  constexpr mode_t kMode = 0600;
  int fd = open(path, kFlags, kMode);
  if (fd >= 0 || errno != EEXIST) return fd;
  int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  uint8_t h[fmt::kFileHeaderSize];
  struct stat in_st;
  const bool header = in >= 0 && fstat(in, &in_st) == 0 && S_ISREG(in_st.st_mode) &&
                      pread(in, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
                      memcmp(h, fmt::kFileMagic, 8) == 0;
  const bool same_process = header && fmt::get_u64(h + 16) == static_cast<uint64_t>(getpid()) &&
                            fmt::get_u32(h + 56) == g_run_id;
  const bool this_runs_claim = header && g_run_id != 0 && fmt::is_claim(h, g_run_id) &&
                               in_st.st_size == static_cast<off_t>(sizeof h);
  if (in >= 0) close(in);
  if (this_runs_claim) {
    fd = open(path, (kFlags & ~(O_CREAT | O_EXCL)), kMode);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == in_st.st_ino && st.st_dev == in_st.st_dev &&
        ftruncate(fd, 0) == 0)
      return fd;
    if (fd >= 0) close(fd);
    errno = EEXIST;
    return -1;
  }
  if (!same_process) {
    errno = EEXIST;
    return -1;
  }
  size_t base = strlen(path);
  for (int image = 1; image < 1000; ++image) {
    if (snprintf(path + base, path_size - base, ".%d", image) >= static_cast<int>(path_size - base))
      break;
    fd = open(path, kFlags, kMode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  path[base] = 0;
  errno = EEXIST;
  return -1;
}

// The trace's absolute name (the program may change directory before a write reopens it).
bool absolute_path(const char *path, char *out, size_t out_size) {
  if (path[0] == '/') return snprintf(out, out_size, "%s", path) < static_cast<int>(out_size);
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) return false;
  return snprintf(out, out_size, "%s/%s", cwd, path) < static_cast<int>(out_size);
}

uint64_t calibrate_ticks_per_second() {
  uint64_t n0 = now_ns(), t0 = now_ticks();
  uint64_t n1 = n0, t1 = t0;
  while (n1 - n0 < 2000000) {  // 2 ms; CLOCK counters refine it over the whole run
    n1 = now_ns();
    t1 = now_ticks();
  }
  return static_cast<uint64_t>(static_cast<double>(t1 - t0) * 1e9 / static_cast<double>(n1 - n0));
}

bool write_file_header(uint64_t ticks_per_second) {
  uint8_t h[fmt::kFileHeaderSize] = {};
  memcpy(h, fmt::kFileMagic, 8);
  fmt::put_u32(h + 8, fmt::kVersion);
  fmt::put_u32(h + 12, fmt::kFileHeaderSize);
  fmt::put_u64(h + 16, static_cast<uint64_t>(getpid()));
  fmt::put_u64(h + 24, g_start_ticks);
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  fmt::put_u64(h + 32, static_cast<uint64_t>(wall.tv_sec) * 1000000000ull + wall.tv_nsec);
  fmt::put_u64(h + 40, ticks_per_second);
  fmt::put_u32(h + 48, static_cast<uint32_t>(g_page_size));
  uint32_t flags = g_stacks ? fmt::kFileFlagStacks : 0;
#if defined(__x86_64__) || defined(__i386__)
  flags |= fmt::kFileFlagTsc;
#endif
  fmt::put_u32(h + 52, flags);
  fmt::put_u32(h + 56, g_run_id);
  fmt::put_u32(h + 60, static_cast<uint32_t>(crc32(0L, h, 60)));
  iovec iov[1] = {{h, sizeof h}};
  return write_all(iov, 1);
}

void finish_at_quick_exit();

__attribute__((constructor(101))) void start_recording() {
  resolve_allocator();
  char path[4096];
  bool want_stacks = false;
  if (!read_settings(path, sizeof path, want_stacks)) return;
  ThreadState &ts = t_state;
  ++ts.guard;
  if (want_stacks) init_stacks();  // before the header, which says whether stacks are recorded
  g_page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  g_recording_pid = getpid();
  g_start_ns = now_ns();
  g_start_ticks = now_ticks();
  int fd = create_trace_file(path, sizeof path);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !absolute_path(path, g_trace_path, sizeof g_trace_path)) {
    say("cannot create trace '", path,
        errno == EEXIST ? "': file exists; not recording" : "'; not recording");
    if (fd >= 0) close(fd);
    --ts.guard;
    return;
  }
  g_trace_dev = st.st_dev;
  g_trace_ino = st.st_ino;
  if (adopt_own_fd(OwnFd::kTrace, fd) < 0 || !write_file_header(calibrate_ticks_per_second())) {
    say("cannot write trace '", path, "'; not recording");
    close_own_fd(OwnFd::kTrace);
    --ts.guard;
    return;
  }
  adopt_own_fd(OwnFd::kStatm, open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
  adopt_own_fd(OwnFd::kStat, open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  if (!prepare_compressor(g_compressor, &g_snapshot_copy)) {
    say("cannot reserve the trace writer's memory; not recording");
    close_own_fd(OwnFd::kTrace);
    --ts.guard;
    return;
  }
  g_final_copy = static_cast<uint8_t *>(profiler_mmap(kTagBytes + kBodyBytes));
  pthread_key_create(&g_thread_key, on_thread_exit);
  pthread_atfork(nullptr, nullptr, on_fork_child);
  g_state.store(kRecording);
  record_initial_mappings(ts);
  if (!start_writer()) {
    say("cannot start the trace writer thread; not recording");
    g_state.store(kStopped);
  }
  install_signal_handlers();
  at_quick_exit(finish_at_quick_exit);
  --ts.guard;
}

// The trace file's size (where the next chunk goes: it is opened O_APPEND); -1 when unknown.
off_t trace_size() {
  lock_own_fds();
  struct stat st;
  const bool ok = ensure_trace_fd(g_trace_path, g_trace_dev, g_trace_ino) &&
                  fstat(own_fd(OwnFd::kTrace), &st) == 0;
  unlock_own_fds();
  return ok ? st.st_size : -1;
}

// The buffers handed off after the writer's last look at its queue: written here, on the
// calling thread (the writer is stopped, its compressor free).
void write_queued_buffers() {
  pthread_mutex_lock(&g_queue_mutex);
  Buffer *list = take_queue_locked();
  pthread_mutex_unlock(&g_queue_mutex);
  write_buffers(list, g_compressor);
}

// Every event recorded so far, then the footer: the calling thread's buffer, the writer's
// queue (the writer stopped after its counters and its own buffer), what was handed off after
// its last look, the complete events of the threads still running. Under g_end_mutex, with the
// thread's guard up. `footer_at`: where the footer begins in the file (-1: unknown). False when
// the footer could not be written.
bool write_the_end(fmt::EndReason reason, off_t *footer_at = nullptr) {
  ThreadState &ts = t_state;
  if (ts.buf && ts.events > 0) hand_off(ts);
  stop_writer();
  write_queued_buffers();
  write_final_snapshots(false);
  if (footer_at) *footer_at = trace_size();
  return write_footer(reason, 0);
}

void finish(fmt::EndReason reason) {
  if (getpid() != g_recording_pid) return;  // a vfork child: the recording is its parent's
  pthread_mutex_lock(&g_end_mutex);         // waits for another thread's exec to succeed or fail
  int expected = kRecording;
  if (!g_state.compare_exchange_strong(expected, kFinished)) {
    pthread_mutex_unlock(&g_end_mutex);
    return;
  }
  ThreadState &ts = t_state;
  ++ts.guard;
  g_flush_epoch.fetch_add(1, std::memory_order_relaxed);  // other threads stop appending
  write_the_end(reason);
  close_own_fd(OwnFd::kTrace);
  close_own_fd(OwnFd::kStatm);
  close_own_fd(OwnFd::kStat);
  --ts.guard;
  pthread_mutex_unlock(&g_end_mutex);
}

void finish_after_destructors(void *) { finish(fmt::EndReason::kExit); }

// Normal exit. glibc's _dl_fini runs the libraries' destructors in an order of its own, and it
// runs this library's before those of libraries the program loaded (linked or dlopened) whose
// destructors free what they hold: finished here, each such free was lost (21 of 41 in
// Lifecycle.FreesInLibraryDestructorsAreRecorded; about 800 in a PyTorch run), and its block
// read as live at exit. So this only registers an exit handler: _dl_fini is itself one, and glibc
// runs a handler registered while it runs after it returns, when every destructor has run. Where
// exit handlers are already done (registration fails), it finishes here. The library is
// NODELETE, so this runs at exit only, and it has no static objects that destructors tear down
// before the hooks stop recording.
__attribute__((destructor(101))) void finish_recording() {
  if (g_state.load(std::memory_order_relaxed) != kRecording) return;
  if (__cxa_atexit(finish_after_destructors, nullptr, nullptr) != 0) finish(fmt::EndReason::kExit);
}

// quick_exit runs no destructor and no exit handler: the handlers registered with
// at_quick_exit, then _exit from inside glibc, past the _exit hook. This one, registered when
// recording starts, runs after every handler the program registers (they run last registered
// first) and finishes the trace: before, every event of a program that ended so was lost (none
// of the 310 allocations in Lifecycle.QuickExitIsComplete) and the trace was cut.
void finish_at_quick_exit() { finish(fmt::EndReason::kExit); }

}  // namespace

bool recording() { return g_state.load(std::memory_order_relaxed) == kRecording; }

// An exec either replaces the image (this thread never returns, the others are gone) or fails
// and returns to a program that goes on: glibc's execvp tries each directory of PATH, a program
// falls back to another command. So the trace is ended as if for good, every event recorded so
// far written and the footer "exec" last, while the program's other threads go on recording into
// their buffers; only the writer stops. If the exec fails, the footer is cut off (no other
// thread writes to the file then) and the writer restarted: the trace goes on as if no exec had
// been tried, and what the other threads recorded meanwhile is written with the rest. Before, a
// failed exec ended recording, and every later event of the program was lost.
bool end_before_exec() {
  if (getpid() != g_recording_pid) return false;  // a vfork child: the recording is its parent's
  pthread_mutex_lock(&g_end_mutex);
  if (g_state.load() != kRecording) {
    pthread_mutex_unlock(&g_end_mutex);
    return false;
  }
  ThreadState &ts = t_state;
  ++ts.guard;
  off_t footer_at = -1;
  if (write_the_end(fmt::EndReason::kExec, &footer_at) && footer_at >= 0)
    g_exec_footer_at.store(footer_at);
  --ts.guard;
  return true;  // g_end_mutex stays held until the exec fails
}

void resume_after_failed_exec() {
  ThreadState &ts = t_state;
  ++ts.guard;
  const off_t footer_at = g_exec_footer_at.exchange(-1);
  bool cut = false;
  if (footer_at >= 0 && g_state.load() == kRecording) {
    lock_own_fds();
    cut = ensure_trace_fd(g_trace_path, g_trace_dev, g_trace_ino) &&
          ftruncate(own_fd(OwnFd::kTrace), footer_at) == 0;
    unlock_own_fds();
  }
  if (cut) {
    g_chunks_written.fetch_sub(1, std::memory_order_relaxed);  // the footer's, cut off
    if (!start_writer()) stop_recording("cannot restart the trace writer after a failed exec", "");
  } else if (g_state.load() == kRecording) {
    // The "exec" footer stays the trace's end; the program goes on unrecorded.
    stop_recording("cannot cut the trace's footer after a failed exec", "");
  }
  --ts.guard;
  pthread_mutex_unlock(&g_end_mutex);
}

void finish_before_exit() { finish(fmt::EndReason::kExit); }

void note_forked_child(int child) {
  if (g_state.load(std::memory_order_relaxed) != kRecording || getpid() != g_recording_pid) return;
  const uint32_t i = g_forked_count.fetch_add(1, std::memory_order_acq_rel);
  if (i < kForkedSlots) g_forked[i].store(child, std::memory_order_release);
}

// Only async-signal-safe calls. Other threads go on running meanwhile: the flush epoch makes
// them stop appending; the writer finishes what it holds (waited for, at most 2 s); then this
// thread's buffer, the chunks still queued and every other thread's complete events are
// written raw, and the footer.
void finish_in_handler(int sig) {
  if (getpid() != g_recording_pid) return;
  int expected = kRecording;
  if (!g_state.compare_exchange_strong(expected, kFinished)) return;
  ThreadState &ts = t_state;
  ++ts.guard;
  g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
  // Another thread's exec is under way and its footer may be written: the process ends here.
  if (const off_t footer_at = g_exec_footer_at.exchange(-1); footer_at >= 0)
    if (ftruncate(own_fd(OwnFd::kTrace), footer_at) == 0)
      g_chunks_written.fetch_sub(1, std::memory_order_relaxed);
  const bool on_writer = g_writer_running.load() && pthread_equal(pthread_self(), g_writer);
  if (!on_writer && lock_briefly(&g_queue_mutex)) {
    g_stop_writer = true;  // it wakes within a sample interval and stops after its list
    pthread_mutex_unlock(&g_queue_mutex);
    for (int i = 0; i < 2000 && g_writer_running.load(std::memory_order_acquire); ++i) {
      timespec ms{0, 1000000};
      nanosleep(&ms, nullptr);
    }
  }
  if (ts.buf && ts.events > 0) {
    seal(ts.buf, ts.events, static_cast<uint32_t>(ts.cursor - ts.buf->bodies));
    write_chunk(ts.tid, ts.buf->seq, ts.buf->base_ts, ts.events, 0, ts.buf->tags, ts.buf->used,
                ts.buf->used, true);
    ts.events = 0;
  }
  // Complete chunks still queued: written raw (compression is not async-signal-safe).
  if (lock_briefly(&g_queue_mutex)) {
    for (Buffer *b = g_full_head; b; b = b->next)
      write_chunk(b->tid, b->seq, b->base_ts, b->events, 0, b->tags, b->used, b->used, true);
    g_full_head = g_full_tail = nullptr;
    pthread_mutex_unlock(&g_queue_mutex);
  }
  write_final_snapshots(true);
  write_footer(fmt::EndReason::kSignal, sig, true);
  --ts.guard;
}

bool claim_tick(ThreadState &ts, uint64_t tick) {
  ts.claimed_tick = tick;
  uint64_t seen = g_tick_owner.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t seen_tick = seen >> kOwnerBits;
    // A later tick is already claimed (this thread's timestamp was read before, or on a core
    // whose TSC is a little behind): the event keeps its full time, earlier than that tick.
    if (seen_tick > tick) return false;
    uint64_t owner = ts.owner_id != 0 ? ts.owner_id : kTickShared;
    if (seen_tick == tick) {
      if ((seen & kOwnerMask) == kTickShared) return false;
      if ((seen & kOwnerMask) == ts.owner_id) return true;
      owner = kTickShared;  // another thread has recorded alone in it so far
    }
    if (g_tick_owner.compare_exchange_weak(seen, tick << kOwnerBits | owner,
                                           std::memory_order_acq_rel, std::memory_order_acquire))
      return owner != kTickShared;
  }
}

bool refill(ThreadState &ts, size_t bytes) {
  if (bytes > kBodyBytes / 2) return false;
  if (g_state.load(std::memory_order_relaxed) != kRecording) {
    if (ts.buf) ts.end = ts.cursor;  // recording never resumes: keep failing fast
    return false;
  }
  ++ts.guard;
  bool fresh_thread = !ts.has_tid;
  if (fresh_thread) {
    ts.tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
    ts.owner_id = ts.tid + 1 < kTickShared ? ts.tid + 1 : 0;
    ts.has_tid = true;
  }
  if (ts.buf) {
    if (ts.events <= 1 && static_cast<size_t>(ts.end - ts.cursor) >= bytes) {
      // Nothing but the restated phase since the last flush: keep the buffer as it is.
      ts.epoch = g_flush_epoch.load(std::memory_order_relaxed);
      --ts.guard;
      return true;
    }
    hand_off(ts);
  } else {
    pthread_setspecific(g_thread_key, &ts);  // flush at thread exit
    if (ts.registry_slot == ~0u) register_thread(ts);
  }
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
  if (!b) {
    stop_for_memory();
    --ts.guard;
    return false;
  }
  start_buffer(ts, b);
  if (fresh_thread) record_thread_name(ts);
  --ts.guard;
  return true;
}

void record_name(ThreadState &ts, uint32_t id, const char *name, size_t length) {
  if (length > fmt::kMaxNameBytes) length = fmt::kMaxNameBytes;
  if (!reserve(ts, length + 32)) return;
  uint8_t *p = begin_event(ts, fmt::EventType::kName, 0, now_ticks());
  p = fmt::put_varint(p, id);
  p = fmt::put_varint(p, length);
  memcpy(p, name, length);
  end_event(ts, p + length);
}

}  // namespace adprof::preload
