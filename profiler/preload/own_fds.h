// The profiler's own file descriptors (the trace, /proc/self/statm and stat, libunwind's pipe),
// kept out of the
// program's reach. A program is entitled to every descriptor number it did not open: it may close
// "all inherited descriptors", or a shell may `exec 3>file` over whatever number 3 is. So the
// profiler's descriptors live high (near the top of RLIMIT_NOFILE, where no lowest-free
// allocation reaches), and the hooks in own_fds.cpp make them invisible: close() of one fails
// with EBADF as it would without the profiler, dup2()/dup3() onto one first moves it elsewhere,
// close_range()/closefrom() skip them. A raw close syscall the hooks cannot see is caught before
// the next write (the descriptor no longer names the trace's inode): the trace is reopened by
// its absolute path, or recording stops; the program's files are never written.
#pragma once

#include <sys/types.h>

namespace adprof::preload {

// kUnwindPipeRead/Write: libunwind's (--stacks), which it opens on its first unwind to probe
// addresses through and keeps for good; taken high by the pipe hooks (own_fds.cpp), so that
// --stacks takes none of the numbers the program would get (it took 3 and 4).
enum class OwnFd { kTrace = 0, kStatm = 1, kStat = 2, kUnwindPipeRead = 3, kUnwindPipeWrite = 4 };
inline constexpr int kOwnFdCount = 5;

// Moves `fd` to a high number (close-on-exec) and registers it; returns the new number, or -1
// (errno set; `fd` is closed either way).
int adopt_own_fd(OwnFd which, int fd);
// The current number (-1: none). The number changes when a program's dup2 takes it.
int own_fd(OwnFd which);
// Closes and unregisters it.
void close_own_fd(OwnFd which);
// Forgets every own descriptor without closing (a fork child closes them itself).
void forget_own_fds();

// Writes to the trace go through this lock, so that a dup2 over the trace's number never lands
// between reading the number and the write.
void lock_own_fds();
void unlock_own_fds();

// Before a write: true when the trace descriptor still names `ino` on `dev`; if it does not
// (closed or replaced behind the hooks' back), reopens `path` for appending when that is still
// the same file. False: the trace cannot be reached any more.
bool ensure_trace_fd(const char *path, dev_t dev, ino_t ino);

}  // namespace adprof::preload
