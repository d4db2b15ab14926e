// The recorder's life cycle and start-up, and the hot path's out-of-line helpers (claim_tick,
// record_name; refill is in buffer_pool.cpp). The rest of the recorder, by what it holds, is
// listed at the top of recorder_internal.h.
//
// Life cycle (documented in docs/RECORDING.md, "Life-cycle rules"):
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

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "own_fds.h"
#include "preload_internal.h"
#include "recorder_internal.h"
#include "signals.h"
#include "stacks.h"

namespace adprof::preload {

PublishedSlot g_unread_slot;
thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));
std::atomic<uint32_t> g_flush_epoch{0};
static_assert(fmt::kSpaceHeap == ADPROF_SPACE_HEAP);
// A line of its own: written at most twice per share tick, loaded by every event.
alignas(64) std::atomic<uint64_t> g_tick_owner{kTickShared};

std::atomic<int> g_state{kInert};
uint64_t g_start_ns = 0;
uint64_t g_start_ticks = 0;
uint64_t g_start_wall_ns = 0;
uint64_t g_ticks_per_second = 0;
size_t g_page_size = 4096;

pid_t g_process_pid = 0;

void say(const char *a, const char *b, const char *c) {
  // One line on stderr without allocating.
  char line[1024];
  snprintf(line, sizeof line, "adprof: %s%s%s\n", a, b, c);
  ssize_t ignored = write(2, line, strlen(line));
  (void)ignored;
}

namespace {

__attribute__((constructor(101))) void start_recording() {
  resolve_allocator();
  char path[4096];
  bool want_stacks = false;
  if (!read_settings(path, sizeof path, want_stacks)) return;
  ThreadState &ts = t_state;
  ++ts.guard;
  if (want_stacks) init_stacks();  // before the header, which says whether stacks are recorded
  g_page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  g_process_pid = getpid();
  g_start_ns = now_ns();
  g_start_ticks = now_ticks();
  g_start_wall_ns = wall_clock_ns();
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
  g_ticks_per_second = calibrate_ticks_per_second();
  if (adopt_own_fd(OwnFd::kTrace, fd) < 0 || !write_file_header()) {
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
  pthread_atfork(nullptr, nullptr, on_fork_child);  // before the program's: they may allocate
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

}  // namespace

bool recording() { return g_state.load(std::memory_order_relaxed) == kRecording; }

bool in_vfork_child() { return g_process_pid != 0 && getpid() != g_process_pid; }

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
