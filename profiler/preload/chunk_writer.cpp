// Chunks into the trace: compression (zstd, columnar: chunk_columns.h), the chunk header
// (trace_format.h) and the write itself, one writev per chunk; a write error stops recording.
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_createCCtx_advanced: exported by libzstd 1.4 and later
#include <zstd.h>

#include <cstring>

#include "own_fds.h"
#include "preload_internal.h"
#include "recorder_internal.h"
#include "stacks.h"
#include "step_window.h"

namespace adprof::preload {

int g_zstd_level = kDefaultZstdLevel;
std::atomic<uint64_t> g_events_written{0};
std::atomic<uint64_t> g_chunks_written{0};
std::atomic<uint64_t> g_events_dropped{0};

namespace {

std::atomic<bool> g_write_error_said{false};

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

}  // namespace

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

namespace {
void stop_on_write_error(int err) { stop_recording("trace write failed: ", strerror(err)); }
}  // namespace

// No memory for another trace buffer: the program is at its memory limit.
void stop_for_memory() {
  stop_recording("no memory for the trace's buffers (the program is at its memory limit)", "");
}

// Packs the chunk header documented in trace_format.h and writes header + payload in one
// writev, so chunks from the writer and from a signal handler never interleave (O_APPEND).
// `in_handler`: called from a signal handler, which must not take the descriptors' lock (the
// interrupted thread may hold it).
bool write_all(const iovec *iov, int count, bool in_handler) {
  if (in_handler) return write_all_locked(iov, count);
  lock_own_fds();
  bool ok = write_all_locked(iov, count);
  int err = errno;
  unlock_own_fds();
  errno = err;
  return ok;
}

bool write_chunk(uint32_t tid, uint32_t seq, uint64_t base_ts, uint32_t events, uint32_t flags,
                 const uint8_t *payload, uint32_t stored, uint32_t raw, bool in_handler) {
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
  if (g_trace_file.load(std::memory_order_acquire) != kTraceOpen && !trace_ready())
    return false;  // a fork child's trace that could not be made (said), or given up at exec
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

namespace {

enum Pass { kFirstPass = 0, kSecondPass = 1 };
constexpr int kFirstPassLevel = 1, kSecondPassLevel = 5;
constexpr size_t kSecondPassRatio = 16;  // a first frame under 1/16 of the part's bytes
constexpr int kSecondPassHashLog = 17, kSecondPassChainLog = 16;  // ZSTD_getCParams(5, 128 KiB)

int pass_level(Pass pass) {
  if (g_zstd_level != kDefaultZstdLevel) return g_zstd_level;
  return pass == kFirstPass ? kFirstPassLevel : kSecondPassLevel;
}

}  // namespace

// zstd's contexts in mappings of their own (profiler_mmap), not the program's heap: from malloc
// they were 2.2 MB of jemalloc's (21 MB at level 19) that the program's mallinfo2 counted as its
// own and its heap was laid out around (Interposer.HeapQueriesAnswerForTheHeapInUse). Not wiped
// on fork, unlike the profiler's other memory: a fork child goes on compressing with the
// contexts it inherited. Each mapping starts with its length, 64 bytes ahead of what zstd gets
// (its alignment needs).
namespace {

constexpr size_t kZstdMapHeader = 64;

void *zstd_map(void *, size_t size) {
  const size_t length = size + kZstdMapHeader;
  auto *base = static_cast<uint8_t *>(profiler_mmap(length, /*wipe_on_fork=*/false));
  if (!base) return nullptr;
  std::memcpy(base, &length, sizeof length);
  return base + kZstdMapHeader;
}

void zstd_unmap(void *, void *p) {
  if (!p) return;
  uint8_t *base = static_cast<uint8_t *>(p) - kZstdMapHeader;
  size_t length;
  std::memcpy(&length, base, sizeof length);
  syscall(SYS_munmap, base, length);
}

}  // namespace

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
      c = ZSTD_createCCtx_advanced(ZSTD_customMem{zstd_map, zstd_unmap, nullptr});
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

// The frames of a chunk, as recorder_internal.h (Compressor) describes them.
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
  if (g_step_window)
    write_windowed_buffer(b, k);  // step_window.cpp: whole, or folded outside the window
  else
    write_buffer_whole(b, k);
}

void write_buffer_whole(Buffer *b, Compressor &k) {
  uint32_t flags = 0, raw = 0;
  if (size_t n = compress_chunk(k, b->tags, b->events, b->tags + b->events, b->used - b->events,
                                &flags, &raw)) {
    write_chunk(b->tid, b->seq, b->base_ts, b->events, flags, k.z, static_cast<uint32_t>(n), raw);
    return;
  }
  write_chunk(b->tid, b->seq, b->base_ts, b->events, 0, b->tags, b->used, b->used);
}

// Writes a list taken from the queue, in order, and gives each buffer back to the pool.
void write_buffers(Buffer *list, Compressor &k) {
  while (list) {
    Buffer *next = list->next;
    write_buffer(list, k);
    recycle_buffer(list);
    list = next;
  }
  // The last buffers, written by the thread that ends the recording after the writer stopped:
  // the steps not yet summarised are over.
  if (!g_writer_running.load(std::memory_order_acquire)) write_remaining_steps(k);
}

void reset_chunk_writer_in_fork_child() {
  g_events_written.store(0);
  g_chunks_written.store(0);
  g_events_dropped.store(0);
  g_write_error_said.store(false);
}

}  // namespace adprof::preload
