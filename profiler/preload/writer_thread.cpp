// The writer thread: it takes the full buffers off the queue and writes them as chunks, samples
// the counters (RSS, jemalloc's statistics) every ADPROF_SAMPLE_MS, snapshots the complete
// events of threads that went idle every kFlushIntervalMs, and ends a process whose threads
// are all gone but it.
#include <jemalloc/jemalloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "own_fds.h"
#include "preload_internal.h"
#include "recorder_internal.h"
#include "step_window.h"

namespace adprof::preload {

int g_sample_ms = 10;
std::atomic<uint64_t> g_main_thread_left_ns{0};
pthread_t g_writer;
std::atomic<bool> g_writer_running{false};
thread_local bool t_is_writer __attribute__((tls_model("initial-exec"))) = false;
constinit Compressor g_compressor;   // the writer's (prepare_compressor)
uint8_t *g_snapshot_copy = nullptr;  // the writer's scratch for snapshots of idle threads
uint8_t *g_final_copy = nullptr;     // the same for the final snapshots (finish, a handler)

namespace {

constexpr int kFlushIntervalMs = 100;
std::atomic<bool> g_writer_ready{false};  // its allocator state is set up

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

// The writer's identity in the trace, taken on by a writer restarted after a failed exec: the
// trace has one profiler thread, its chunks numbered on (a chunk's thread and number are what
// the reader matches snapshots by), and one schedule of counter samples (`last_sample_ns`, 0:
// none yet). Set by each writer as it ends, read by the next.
struct WriterIdentity {
  bool has_tid = false;
  uint32_t tid = 0;
  uint64_t owner_id = 0;
  uint32_t next_seq = 0;
  uint64_t last_sample_ns = 0;
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

// For 100 ms after the main thread left, the process's end is looked for every millisecond, not
// every sample: a fork child whose only thread leaves (forked from a thread) waited up to a
// sample interval for its writer to end it. Later, other threads still run: sampling goes on.
bool soon_after_main_left() {
  const uint64_t left = g_main_thread_left_ns.load(std::memory_order_relaxed);
  return left != 0 && now_ns() - left < 100000000u;
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
  // The counters are sampled on one schedule across the writers of a recording (`last_sample`:
  // the first writer's start until a sample is taken): a writer restarted after a failed exec
  // takes a sample due before the program goes on (start_writer waits for it). Before, each
  // writer first sampled a sample interval after its own start, if it was not stopped by then:
  // a program whose failed execs restarted the writer every millisecond (execvp through PATH)
  // had no sample while they went on, nor, if it ended soon after, a writer in its trace at all
  // (Lifecycle.FailedExecsKeepTheCountersSampled; FailedExecLosesNoEvent, 1 run in 10 on a
  // loaded machine): the final sample at the writer's stop needs the buffer a sample takes.
  const uint64_t started = now_ns();
  uint64_t last_sample =
      g_writer_identity.last_sample_ns ? g_writer_identity.last_sample_ns : started;
  if (started - last_sample >= static_cast<uint64_t>(g_sample_ms) * 1000000u &&
      g_state.load() == kRecording) {
    last_sample = started;
    sample_counters(ts, false);
  }
  g_writer_ready.store(true, std::memory_order_release);
  Compressor &k = g_compressor;
  uint8_t *copy = g_snapshot_copy;
  uint64_t last_flush = now_ns();
  bool ending_the_process = false;  // the program's threads are all gone (end_the_process)
  char main_thread_name[kThreadNameBytes] = {};
  for (;;) {
    // What the threads still hold, looked at before the queue is taken (a buffer queued while
    // the writer waits is read in this round all the same).
    note_unread_events();
    pthread_mutex_lock(&g_queue_mutex);
    if (!g_full_head && !g_stop_writer) {
      timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += (soon_after_main_left() ? 1L : static_cast<long>(g_sample_ms)) * 1000000L;
      deadline.tv_sec += deadline.tv_nsec / 1000000000L;
      deadline.tv_nsec %= 1000000000L;
      pthread_cond_timedwait(&g_work_cond, &g_queue_mutex, &deadline);
    }
    Buffer *list = take_queue_locked();
    bool stop = g_stop_writer;
    pthread_mutex_unlock(&g_queue_mutex);
    write_buffers(list, k);
    if (stop) break;
    write_settled_steps(k);

    uint64_t now = now_ns();
    const bool sample_due = now - last_sample >= static_cast<uint64_t>(g_sample_ms) * 1000000u;
    if (sample_due || soon_after_main_left()) {
      if (sample_due) {
        last_sample = now;
        if (g_state.load() == kRecording) sample_counters(ts, false);
      }
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
      // Under a step window a snapshot's events could be folded later (its buffer's chunk
      // then holds fewer events than the snapshot it should replace): none are taken; the
      // threads' buffers still reach the writer at each flush tick, or at the end.
      if (copy && !g_step_window) snapshot_idle_threads(k, copy);
      g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
      purge_idle_huge_blocks();
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
  g_writer_identity = {ts.has_tid, ts.tid, ts.owner_id, ts.next_seq, last_sample};
  g_writer_running.store(false, std::memory_order_release);
  return nullptr;
}

}  // namespace

// Starts the writer and waits until its allocator state is set up. The writer blocks every
// signal from its first instruction: a signal sent to the process must reach one of the
// program's threads, as it would without the profiler (a shell's SIGCHLD handler run on the
// writer would race with the shell's own main thread). Its stack is small: address space
// counts against a program's RLIMIT_AS.
bool start_writer() {
  configure_step_window();  // once, before the program runs
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

// The parent's writer is not in the child: the child's starts as the first of a new trace.
void reset_writer_in_fork_child() {
  g_main_thread_left_ns.store(0);
  g_writer_running.store(false);
  g_writer_ready.store(false);
  g_writer_identity = {};
}

}  // namespace adprof::preload
