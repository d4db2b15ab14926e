// The trace's ending, once, whichever way the process goes: exit (after every library's
// destructor), _exit and quick_exit, exec (ended, and taken up again if the exec fails), a
// fork (the child's own recording starts: fork_child.cpp), a fatal signal (async-signal-safe
// writes only). The rules are at the top of recorder.cpp.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "own_fds.h"
#include "recorder_internal.h"

extern "C" int __cxa_atexit(void (*function)(void *), void *argument, void *dso_handle);

namespace adprof::preload {

namespace {

// The children this process forked, for the footer's count of those with no trace of their own
// when it ends (g_output_base.<pid>: a fork child's own, or the image it exec'd; none under
// ADPROF_FORK=0 until it execs, none for a child killed before its first chunk). The first
// kForkedSlots are kept; later forks are counted, not checked.
constexpr uint32_t kForkedSlots = 4096;
std::atomic<uint32_t> g_forked_count{0};
std::atomic<int> g_forked[kForkedSlots];

// Held by whoever ends the trace (finish), and by a thread that execs from before the "exec"
// footer until its exec fails (end_before_exec): one ending at a time.
pthread_mutex_t g_end_mutex = PTHREAD_MUTEX_INITIALIZER;
// Where the "exec" footer of an exec under way begins in the file (-1: none): a failed exec cuts
// the file back to it, and so does a fatal signal that ends the process meanwhile.
std::atomic<off_t> g_exec_footer_at{-1};

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

}  // namespace

// The fork handler, in the child (registered when recording starts, before the program's own
// handlers, which may allocate). Only the forking thread is left; the recording goes on as the
// child's own (fork_child.cpp), or, when it cannot or must not (ADPROF_FORK=0, the parent's
// recording stopped or ending), the child records nothing.
void on_fork_child() {
  const pid_t parent = g_process_pid;
  g_process_pid = getpid();  // whatever the state: recording or not, this memory is its own
  reset_recording_end_in_fork_child();  // the end lock, held by another thread at the fork?
  const int state = g_state.load();
  if (state != kRecording && state != kStopped && state != kFinished) return;
  ThreadState &ts = t_state;
  ++ts.guard;
  g_state.store(kForkChild);
  if (state == kRecording && g_trace_forks && record_fork_child(parent)) {
    --ts.guard;
    return;
  }
  ts.buf = nullptr;
  ts.cursor = ts.end = nullptr;
  forget_own_fds();
  --ts.guard;
}

void reset_recording_end_in_fork_child() {
  g_forked_count.store(0);
  g_end_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_exec_footer_at.store(-1);
}

namespace {

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

// The signals a process sends or is sent (all but the faults an instruction raises): held back
// on the thread that ends the trace while it holds g_end_mutex. A handler that ends the process
// (_exit, exit) run there would come back into finish() and wait for the mutex its own thread
// holds, for good: PyTorch's SIGTERM handler in a DataLoader worker calls _exit(0), and its
// parent sends SIGTERM to a worker still ending 5 s after it was told to (a worker and its rank
// hung in TorchSteps.PersistentWorkersNumberEachBatchByTheStepThatConsumesIt). Held back, the
// signal is taken once the trace is ended, as it would have been a moment later.
sigset_t signals_held_while_ending() {
  sigset_t held;
  sigfillset(&held);
  for (const int fault : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS})
    sigdelset(&held, fault);
  return held;
}

void finish(fmt::EndReason reason) {
  if (in_vfork_child()) return;  // the recording is its parent's
  const sigset_t held = signals_held_while_ending();
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &held, &old_mask);
  pthread_mutex_lock(&g_end_mutex);  // waits for another thread's exec to succeed or fail
  int expected = kRecording;
  if (!g_state.compare_exchange_strong(expected, kFinished)) {
    pthread_mutex_unlock(&g_end_mutex);
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    return;
  }
  ThreadState &ts = t_state;
  ++ts.guard;
  g_flush_epoch.fetch_add(1, std::memory_order_relaxed);  // other threads stop appending
  wait_for_hand_offs();
  write_the_end(reason);
  close_own_fd(OwnFd::kTrace);
  close_own_fd(OwnFd::kStatm);
  close_own_fd(OwnFd::kStat);
  --ts.guard;
  pthread_mutex_unlock(&g_end_mutex);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
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

}  // namespace

// quick_exit runs no destructor and no exit handler: the handlers registered with
// at_quick_exit, then _exit from inside glibc, past the _exit hook. This one, registered when
// recording starts, runs after every handler the program registers (they run last registered
// first) and finishes the trace: before, every event of a program that ended so was lost (none
// of the 310 allocations in Lifecycle.QuickExitIsComplete) and the trace was cut.
void finish_at_quick_exit() { finish(fmt::EndReason::kExit); }

// An exec either replaces the image (this thread never returns, the others are gone) or fails
// and returns to a program that goes on: glibc's execvp tries each directory of PATH, a program
// falls back to another command. So the trace is ended as if for good, every event recorded so
// far written and the footer "exec" last, while the program's other threads go on recording into
// their buffers; only the writer stops. If the exec fails, the footer is cut off (no other
// thread writes to the file then) and the writer restarted: the trace goes on as if no exec had
// been tried, and what the other threads recorded meanwhile is written with the rest. Before, a
// failed exec ended recording, and every later event of the program was lost.
//
// A fork child whose trace is still pending (it wrote no chunk yet: subprocess's and most
// fork+exec children exec at once) gives its recording up instead: the image it execs is its
// trace, ADPROF_OUTPUT.<pid> as without fork tracing; what it allocated between the fork and
// the exec (little or nothing) is not written. A failed exec leaves it unrecorded.
bool end_before_exec() {
  if (in_vfork_child()) return false;  // the recording is its parent's
  pthread_mutex_lock(&g_end_mutex);
  if (g_state.load() != kRecording) {
    pthread_mutex_unlock(&g_end_mutex);
    return false;
  }
  ThreadState &ts = t_state;
  ++ts.guard;
  int pending = kTracePending;
  if (g_trace_file.compare_exchange_strong(pending, kTraceAbandoned)) {
    g_state.store(kForkChild);  // the writer drops what it holds; refill fails from now on
    g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
    stop_writer();
    ts.buf = nullptr;
    ts.cursor = ts.end = nullptr;
    --ts.guard;
    return true;  // g_end_mutex stays held until the exec fails
  }
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
  if (g_state.load(std::memory_order_relaxed) != kRecording || in_vfork_child()) return;
  const uint32_t i = g_forked_count.fetch_add(1, std::memory_order_acq_rel);
  if (i < kForkedSlots) g_forked[i].store(child, std::memory_order_release);
}

// Only async-signal-safe calls. Other threads go on running meanwhile: the flush epoch makes
// them stop appending; the writer finishes what it holds (waited for, at most 2 s); then this
// thread's buffer, the chunks still queued and every other thread's complete events are
// written raw, and the footer.
void finish_in_handler(int sig) {
  if (in_vfork_child()) return;
  int expected = kRecording;
  if (!g_state.compare_exchange_strong(expected, kFinished)) return;
  ThreadState &ts = t_state;
  ++ts.guard;
  g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
  wait_for_hand_offs();
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

}  // namespace adprof::preload
