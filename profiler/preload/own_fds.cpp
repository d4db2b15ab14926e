// The profiler's own descriptors and the hooks that keep them out of the program's reach
// (own_fds.h says why).
#include "own_fds.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "recorder.h"
#include "stacks.h"

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

namespace adprof::preload {

namespace {

std::atomic<int> g_own[kOwnFdCount] = {-1, -1, -1, -1, -1};
pthread_mutex_t g_own_mutex = PTHREAD_MUTEX_INITIALIZER;

}  // namespace

void lock_own_fds() { pthread_mutex_lock(&g_own_mutex); }
void unlock_own_fds() { pthread_mutex_unlock(&g_own_mutex); }

namespace {

// The real calls, as raw syscalls: no lookup, usable at any time (even before the dynamic
// linker has finished with this library, and in a fork child).
int real_close(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }
int real_dup3(int from, int to, int flags) {
  return static_cast<int>(syscall(SYS_dup3, from, to, flags));
}
int real_close_range(unsigned first, unsigned last, unsigned flags) {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

bool is_own(int fd) {
  if (fd < 0) return false;
  for (const auto &own : g_own)
    if (own.load(std::memory_order_acquire) == fd) return true;
  return false;
}

// A number near the top of the soft descriptor limit, below any a program allocates first.
int high_fd(int from) {
  rlimit rl{};
  long top = 1024;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    top = static_cast<long>(rl.rlim_cur);
  if (top > 65536) top = 65536;
  for (long want = top - 1; want >= 64 && want >= top - 64; want -= 4) {
    int fd = fcntl(from, F_DUPFD_CLOEXEC, static_cast<int>(want));
    if (fd >= 0) return fd;
  }
  return fcntl(from, F_DUPFD_CLOEXEC, 3);  // a tight limit: any free number
}

// Moves an own descriptor that the program is about to take (dup2 onto it) to another number.
void relocate(int fd) {
  for (auto &own : g_own) {
    if (own.load(std::memory_order_acquire) != fd) continue;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
    if (moved < 0) moved = high_fd(fd);
    own.store(moved, std::memory_order_release);  // -1 if no number was free: writes stop
  }
}

// dup3 onto `to`, moving an own descriptor out of the way first. Only then is the lock taken:
// the common dup2 takes none (a fork while the writer holds the lock would leave it held in
// the child). A vfork child's descriptors are its own copy, but g_own is its parent's: there
// the number is simply taken (the child writes no trace; the parent's descriptor stays).
int dup_onto(int from, int to, int flags) {
  if (!is_own(to) || in_vfork_child()) return real_dup3(from, to, flags);
  lock_own_fds();
  relocate(to);
  int r = real_dup3(from, to, flags);
  unlock_own_fds();
  return r;
}

}  // namespace

int adopt_own_fd(OwnFd which, int fd) {
  if (fd < 0) return -1;
  int high = high_fd(fd);
  int saved = errno;
  real_close(fd);
  errno = saved;
  g_own[static_cast<int>(which)].store(high, std::memory_order_release);
  return high;
}

int own_fd(OwnFd which) { return g_own[static_cast<int>(which)].load(std::memory_order_acquire); }

void close_own_fd(OwnFd which) {
  int fd = g_own[static_cast<int>(which)].exchange(-1, std::memory_order_acq_rel);
  if (fd >= 0) real_close(fd);
}

void forget_own_fds() {
  for (auto &own : g_own) {
    int fd = own.exchange(-1, std::memory_order_acq_rel);
    if (fd >= 0) real_close(fd);
  }
}

// The parent's trace and /proc files (which name the parent: /proc/self is resolved when
// opened) are closed; libunwind's pipe is kept (libunwind holds its numbers).
void reset_own_fds_in_fork_child() {
  g_own_mutex = PTHREAD_MUTEX_INITIALIZER;
  for (OwnFd which : {OwnFd::kTrace, OwnFd::kStatm, OwnFd::kStat}) close_own_fd(which);
}

bool ensure_trace_fd(const char *path, dev_t dev, ino_t ino) {
  int fd = own_fd(OwnFd::kTrace);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino) return true;
  // Closed or replaced by a call the hooks did not see: never write to what the number names
  // now. Reopen the trace itself, if it is still the file this process created.
  g_own[static_cast<int>(OwnFd::kTrace)].store(-1, std::memory_order_release);
  int again = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (again < 0) return false;
  if (fstat(again, &st) != 0 || st.st_dev != dev || st.st_ino != ino) {
    real_close(again);
    return false;
  }
  return adopt_own_fd(OwnFd::kTrace, again) >= 0;
}

}  // namespace adprof::preload

using namespace adprof::preload;

ADPROF_EXPORT int close(int fd) {
  if (is_own(fd)) {  // without the profiler this number would not be open
    errno = EBADF;
    return -1;
  }
  using Close = int (*)(int);
  static Close real = reinterpret_cast<Close>(dlsym(RTLD_NEXT, "close"));
  return real ? real(fd) : real_close(fd);
}

ADPROF_EXPORT int dup2(int from, int to) {
  if (is_own(from)) {
    errno = EBADF;
    return -1;
  }
  if (from == to) return fcntl(from, F_GETFD) < 0 ? -1 : to;
  return dup_onto(from, to, 0);
}

ADPROF_EXPORT int dup3(int from, int to, int flags) {
  if (is_own(from)) {
    errno = EBADF;
    return -1;
  }
  if (from == to) {
    errno = EINVAL;
    return -1;
  }
  return dup_onto(from, to, flags);
}

// Closes [first, last] but the own descriptors in it (at most kOwnFdCount holes).
ADPROF_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  if (flags & CLOSE_RANGE_CLOEXEC)  // marks only; the own descriptors are close-on-exec already
    return real_close_range(first, last, static_cast<unsigned>(flags));
  int holes[kOwnFdCount];
  int count = 0;
  for (const auto &own : g_own) {
    int fd = own.load(std::memory_order_acquire);
    if (fd >= 0 && static_cast<unsigned>(fd) >= first && static_cast<unsigned>(fd) <= last)
      holes[count++] = fd;
  }
  for (int i = 1; i < count; ++i)  // in ascending order (insertion sort: at most five)
    for (int j = i; j > 0 && holes[j] < holes[j - 1]; --j) {
      const int t = holes[j];
      holes[j] = holes[j - 1];
      holes[j - 1] = t;
    }
  unsigned from = first;
  for (int i = 0; i < count; ++i) {
    unsigned hole = static_cast<unsigned>(holes[i]);
    if (hole > from && real_close_range(from, hole - 1, static_cast<unsigned>(flags)) != 0)
      return -1;
    from = hole + 1;
  }
  if (from > last || (count > 0 && static_cast<unsigned>(holes[count - 1]) == ~0u)) return 0;
  return real_close_range(from, last, static_cast<unsigned>(flags));
}

ADPROF_EXPORT void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  close_range(static_cast<unsigned>(lowfd), ~0u, 0);
}

// pipe2/pipe: libunwind (--stacks) opens a pipe on its first unwind and keeps it for good, to
// probe addresses through (it writes a byte from an address it doubts). Made by the program's
// lowest free numbers, the pair took two of the program's descriptors: with RLIMIT_NOFILE 16 a
// program opened 10 files instead of 12, and the numbers it got differed from a run without the
// profiler. A pipe made from libunwind's code is moved high, as the profiler's own descriptors
// (invisible to close, dup2, close_range), and libunwind keeps the high numbers. Every other
// caller gets the system call's result as it is.
namespace {
int pipe_for(void *caller, int fds[2], int flags) {
  const int r = static_cast<int>(syscall(SYS_pipe2, fds, flags));
  if (r != 0 || !called_from_unwinder(caller)) return r;
  close_own_fd(OwnFd::kUnwindPipeRead);  // a pipe it opens again replaces the first
  close_own_fd(OwnFd::kUnwindPipeWrite);
  const int read_end = adopt_own_fd(OwnFd::kUnwindPipeRead, fds[0]);
  const int write_end = adopt_own_fd(OwnFd::kUnwindPipeWrite, fds[1]);
  if (read_end < 0 || write_end < 0) {
    close_own_fd(OwnFd::kUnwindPipeRead);
    close_own_fd(OwnFd::kUnwindPipeWrite);
    errno = EMFILE;
    return -1;
  }
  fds[0] = read_end;
  fds[1] = write_end;
  return 0;
}
}  // namespace

ADPROF_EXPORT int pipe2(int fds[2], int flags) {
  return pipe_for(__builtin_return_address(0), fds, flags);
}

ADPROF_EXPORT int pipe(int fds[2]) { return pipe_for(__builtin_return_address(0), fds, 0); }
