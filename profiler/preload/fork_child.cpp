// A fork child's own recording (docs/RECORDING.md, "Life-cycle rules"). A child that does not
// exec (multiprocessing's and a DataLoader's workers on Linux, a server's forked handlers) is a
// process image of its own: what it allocates is its memory, not its parent's. It records into
// ADPROF_OUTPUT.<pid>, named as an exec'd child's, and says its parent ("job.process", the job
// facts of job_facts.h: {pid, parent pid}), so that a report of the run links it to the process
// that forked it (a rank's worker).
//
// The rules it keeps:
//   - Only the forking thread is left, and any other thread of the parent may have held any of
//     the recorder's locks at the fork (held for good in the child): each is made anew, never
//     taken first, and what it guarded is abandoned rather than reused (each file's
//     *_in_fork_child function: recorder_internal.h).
//   - The parent's memory for its buffers was wiped by the fork (profiler_mmap: the fork copies
//     no page table of it, and the parent takes no copy-on-write fault on its buffers after), so
//     the parent's unwritten events are not in the child at all: the parent's trace keeps them
//     (its writer writes them), the child's trace starts empty.
//   - The trace is created with the child's first chunk, not at the fork: a child that execs
//     before (subprocess, posix_spawn through fork, a shell) is traced as the image it execs,
//     ADPROF_OUTPUT.<pid>, as before, and costs no file (recording_end.cpp, end_before_exec).
//   - A step window (--steps) is the child's own, over its own steps (step_window.cpp): the
//     parent writer's window state is abandoned.
//   - The hot path is unchanged: a forked thread's first allocation takes a fresh buffer
//     through refill, as a new thread's does.
// A vfork child runs no fork handler, shares its parent's memory and records nothing.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>

#include "adprof/job_facts.h"
#include "own_fds.h"
#include "recorder_internal.h"
#include "stacks.h"
#include "step_window.h"

extern "C" uint32_t adprof_name(const char *name);
extern "C" void adprof_annotate(uint32_t kind_name_id, const uint64_t *values, uint32_t count);

namespace adprof::preload {

bool record_fork_child(pid_t parent) {
  ThreadState &ts = t_state;
  reset_own_fds_in_fork_child();
  reset_trace_file_in_fork_child();
  reset_chunk_writer_in_fork_child();
  reset_buffers_in_fork_child(ts);
  reset_writer_in_fork_child();
  reset_stacks_in_fork_child(ts);
  reset_step_window_in_fork_child();
  g_start_ns = now_ns();
  g_start_ticks = now_ticks();
  g_start_wall_ns = wall_clock_ns();
  g_tick_owner.store(kTickShared);
  adopt_own_fd(OwnFd::kStatm, open("/proc/self/statm", O_RDONLY | O_CLOEXEC));
  adopt_own_fd(OwnFd::kStat, open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
  g_state.store(kRecording);
  if (!start_writer()) {
    say("cannot start the trace writer thread of a forked process; it is not recorded");
    g_state.store(kForkChild);
    return false;
  }
  record_initial_mappings(ts);
  reset_names_in_fork_child(ts);
  const uint64_t facts[2] = {static_cast<uint64_t>(getpid()), static_cast<uint64_t>(parent)};
  adprof_annotate(adprof_name(ADPROF_JOB_PROCESS), facts, 2);
  return true;
}

}  // namespace adprof::preload
