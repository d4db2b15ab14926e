// Process life cycle workload: normal exit, fork, exec, fork+exec, abort, and a sleep to be
// killed. Each mode allocates inside an op scope named after what it wants to show, so the test
// can find (or not find) those allocations in the trace.
//
// usage: lifecycle exit CODE | fork | exec | forkexec | abort | sleep MARKER_FILE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adprof/context.h"

namespace {

void *volatile g_keep[4096];

// `count` blocks of `size` inside op `name`; frees the even ones.
void allocate(const char *name, int count, size_t size) {
  adprof_op_begin(adprof_name(name), 1);
  for (int i = 0; i < count; ++i) {
    g_keep[i % 4096] = malloc(size);
    memset(g_keep[i % 4096], i, size);
    if (i % 2 == 0) {
      free(g_keep[i % 4096]);
      g_keep[i % 4096] = nullptr;
    }
  }
  adprof_op_end();
}

const char *self() {
  static char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "/proc/self/exe";
  path[n] = 0;
  return path;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  if (!strcmp(mode, "exit")) {
    allocate("main", 100, 1111);
    return argc > 2 ? atoi(argv[2]) : 0;
  }
  if (!strcmp(mode, "fork")) {
    allocate("parent", 1000, 2222);
    fflush(nullptr);
    pid_t child = fork();
    if (child == 0) {
      allocate("child", 2000, 777);
      exit(0);  // destructors run: the child must still write nothing
    }
    int status = 0;
    waitpid(child, &status, 0);
    allocate("after_fork", 10, 3333);
    printf("child %d\n", static_cast<int>(child));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  if (!strcmp(mode, "exec")) {
    allocate("before_exec", 10, 4444);
    execl(self(), "lifecycle", "exit", "0", static_cast<char *>(nullptr));
    return 3;
  }
  if (!strcmp(mode, "forkexec")) {
    allocate("parent", 10, 5555);
    fflush(nullptr);
    pid_t child = fork();
    if (child == 0) {
      execl(self(), "lifecycle", "exit", "0", static_cast<char *>(nullptr));
      _exit(3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child %d\n", static_cast<int>(child));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
  }
  if (!strcmp(mode, "abort")) {
    allocate("before_abort", 500, 4242);
    abort();
  }
  if (!strcmp(mode, "sleep") && argc > 2) {
    allocate("before_kill", 1000, 4343);
    char text[32];
    int n = snprintf(text, sizeof text, "%d\n", static_cast<int>(getpid()));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      ssize_t ignored = write(fd, text, static_cast<size_t>(n));
      (void)ignored;
      close(fd);
      rename(tmp, argv[2]);  // the marker appears with its content
    }
    for (;;) pause();
  }
  return 2;
}
