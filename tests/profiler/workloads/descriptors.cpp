// A program that takes descriptor numbers it is entitled to: it closes every descriptor it
// inherited (one way or another), opens FILE, writes to it while allocating, and exits. The
// profiler's own descriptors must survive and FILE must hold only what the program wrote.
//
// usage: descriptors close|closefrom|rawclose|dup2|vfork_dup2 FILE
//   close:     close() of every number from 3 to the descriptor limit
//   closefrom: closefrom(3)
//   rawclose:  the close_range system call, past any hook
//   dup2:      dup2() of FILE onto every number from 3 to 4 below the descriptor limit (run it
//              with a low limit: the profiler's descriptors sit at the top and must move)
//   vfork_dup2: the same, up to the limit, in a vfork child, which then exits; the parent's
//              descriptors are its own: it ends with the numbers it had (exit status 6 if not)
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "adprof/context.h"

namespace {

void *volatile g_keep[1024];

// Allocates across a few flush intervals, so chunks are written after the descriptors changed.
void allocate_for_a_while() {
  adprof_op_begin(adprof_name("after_close"), 1);
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 20000; ++i) {
      void *p = malloc(64 + static_cast<size_t>(i % 7) * 16);
      free(g_keep[i % 1024]);
      g_keep[i % 1024] = p;
    }
    timespec pause{0, 60 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  for (auto &p : g_keep) {
    free(p);
    p = nullptr;
  }
  adprof_op_end();
}

int descriptor_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur > 65536 ? 65536 : static_cast<int>(rl.rlim_cur);
}

// The open descriptor numbers, as a string ("0 1 2 ...").
std::string open_descriptors() {
  std::string numbers;
  DIR *dir = opendir("/proc/self/fd");
  const int listing = dir ? dirfd(dir) : -1;
  while (dirent *entry = dir ? readdir(dir) : nullptr)
    if (entry->d_name[0] != '.' && atoi(entry->d_name) != listing)
      numbers += std::string(entry->d_name) + " ";
  if (dir) closedir(dir);
  return numbers;
}

// The vfork_dup2 mode (its own frame: nothing of main's is live across the vfork).
int vfork_dup2(const char *path, int limit) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 3;
  const std::string before = open_descriptors();
  const pid_t child = vfork();
  if (child == 0) {
    for (int n = 3; n < limit; ++n)  // the trace's number included
      if (n != fd) dup2(fd, n);
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 5;
  const char first[] = "the program's own line\n";
  if (write(fd, first, sizeof first - 1) != sizeof first - 1) return 4;
  allocate_for_a_while();
  const char last[] = "and its last line\n";
  if (write(fd, last, sizeof last - 1) != sizeof last - 1) return 4;
  return open_descriptors() == before ? 0 : 6;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  const char *mode = argv[1];
  const int limit = descriptor_limit();
  int fd = -1;
  if (!strcmp(mode, "close")) {
    for (int n = 3; n < limit; ++n) close(n);
  } else if (!strcmp(mode, "closefrom")) {
    closefrom(3);
  } else if (!strcmp(mode, "rawclose")) {
    syscall(SYS_close_range, 3u, ~0u, 0u);
  } else if (!strcmp(mode, "dup2")) {
    fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 3;
    for (int n = 3; n < limit - 4; ++n)
      if (n != fd && dup2(fd, n) != n) return 5;
  } else if (!strcmp(mode, "vfork_dup2")) {
    return vfork_dup2(argv[2], limit);
  } else {
    return 2;
  }
  if (fd < 0) fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 3;
  const char first[] = "the program's own line\n";
  if (write(fd, first, sizeof first - 1) != sizeof first - 1) return 4;
  allocate_for_a_while();
  const char last[] = "and its last line\n";
  if (write(fd, last, sizeof last - 1) != sizeof last - 1) return 4;
  return 0;
}
