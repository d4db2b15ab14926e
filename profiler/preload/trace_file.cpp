// The trace file: the settings read from the environment at start-up, the file created
// exclusively (never over an existing file, never through a symlink) and its header.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "own_fds.h"
#include "recorder_internal.h"

namespace adprof::preload {

char g_trace_path[4096];
dev_t g_trace_dev = 0;
ino_t g_trace_ino = 0;
char g_output_base[4096];
bool g_trace_forks = true;
std::atomic<int> g_trace_file{kTraceOpen};

namespace {

// Same for every process of one `adprof run` (ADPROF_RUN_ID), written into each trace's header
// so that no earlier run's file is taken for this run's.
uint32_t g_run_id = 0;

bool parse_int(const char *text, long lo, long hi, long *out) {
  if (!text || !*text) return false;
  char *end = nullptr;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || *end != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

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
  if (const char *s = getenv("ADPROF_FORK")) {
    if (!parse_int(s, 0, 1, &v)) {
      say("ADPROF_FORK must be 0 or 1; not recording");
      return false;
    }
    g_trace_forks = v == 1;
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

// The header (trace_format.h) of this process's trace: its pid, the recording's start (ticks
// and wall clock, taken together) and the tick rate.
void fill_file_header(uint8_t (&h)[fmt::kFileHeaderSize]) {
  memset(h, 0, sizeof h);
  memcpy(h, fmt::kFileMagic, 8);
  fmt::put_u32(h + 8, fmt::kVersion);
  fmt::put_u32(h + 12, fmt::kFileHeaderSize);
  fmt::put_u64(h + 16, static_cast<uint64_t>(getpid()));
  fmt::put_u64(h + 24, g_start_ticks);
  // The wall clock read with the start timestamp (init, fork_child), not now: the calibration
  // (2 ms) and the file's creation lie between, longer on a loaded machine, and the processes of
  // a job are put on one clock by this field (profiler/analysis/job/job_lanes.cpp).
  fmt::put_u64(h + 32, g_start_wall_ns);
  fmt::put_u64(h + 40, g_ticks_per_second);
  fmt::put_u32(h + 48, static_cast<uint32_t>(g_page_size));
  uint32_t flags = g_stacks ? fmt::kFileFlagStacks : 0;
#if defined(__x86_64__) || defined(__i386__)
  flags |= fmt::kFileFlagTsc;
#endif
  fmt::put_u32(h + 52, flags);
  fmt::put_u32(h + 56, g_run_id);
  fmt::put_u32(h + 60, static_cast<uint32_t>(crc32(0L, h, 60)));
}

uint64_t wall_clock_ns() {
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  return static_cast<uint64_t>(wall.tv_sec) * 1000000000ull + static_cast<uint64_t>(wall.tv_nsec);
}

bool write_file_header() {
  uint8_t h[fmt::kFileHeaderSize];
  fill_file_header(h);
  iovec iov[1] = {{h, sizeof h}};
  return write_all(iov, 1);
}

namespace {

std::atomic<bool> g_pending_said{false};

// Creates a fork child's trace, ADPROF_OUTPUT.<pid>, and writes its header (as the exec'd
// children's: create_trace_file). Async-signal-safe but for snprintf of integers.
bool create_fork_childs_trace() {
  char path[sizeof g_trace_path];
  if (snprintf(path, sizeof path, "%s.%ld", g_output_base, static_cast<long>(getpid())) >=
      static_cast<int>(sizeof path))
    return false;
  int fd = create_trace_file(path, sizeof path);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (!g_pending_said.exchange(true))
      say("cannot create trace '", path,
          errno == EEXIST ? "': file exists; this forked process is not recorded"
                          : "'; this forked process is not recorded");
    if (fd >= 0) close(fd);
    return false;
  }
  uint8_t h[fmt::kFileHeaderSize];
  fill_file_header(h);
  size_t done = 0;
  while (done < sizeof h) {
    const ssize_t n = write(fd, h + done, sizeof h - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  memcpy(g_trace_path, path, sizeof path);
  g_trace_dev = st.st_dev;
  g_trace_ino = st.st_ino;
  return adopt_own_fd(OwnFd::kTrace, fd) >= 0;
}

}  // namespace

// A fork child's trace is created before its first chunk (recording_end.cpp says why). One
// creator: the others (a signal handler on another thread) wait for it, at most about a second.
bool trace_ready() {
  int state = g_trace_file.load(std::memory_order_acquire);
  if (state == kTracePending &&
      g_trace_file.compare_exchange_strong(state, kTraceCreating, std::memory_order_acq_rel)) {
    const bool created = create_fork_childs_trace();
    g_trace_file.store(created ? kTraceOpen : kTraceAbandoned, std::memory_order_release);
    if (!created) {
      int expected = kRecording;
      if (g_state.compare_exchange_strong(expected, kStopped))
        g_flush_epoch.fetch_add(1, std::memory_order_relaxed);
    }
    return created;
  }
  for (int i = 0; i < 1000 && state == kTraceCreating; ++i) {
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
    state = g_trace_file.load(std::memory_order_acquire);
  }
  return state == kTraceOpen;
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

void reset_trace_file_in_fork_child() {
  g_trace_file.store(kTracePending, std::memory_order_release);
  g_pending_said.store(false);
  g_trace_path[0] = 0;
  g_trace_dev = 0;
  g_trace_ino = 0;
}

}  // namespace adprof::preload
