/* The conformance suite's vfork program (gcc's driver and collect2, and dash, start their
 * children this way): allocates, starts /bin/true with vfork and execv, allocates again after
 * the child ran, frees everything. Prints what it did. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kBlocks = 100 };

int main(void) {
  void *before[kBlocks], *after[kBlocks];
  for (int i = 0; i < kBlocks; ++i) before[i] = malloc(32 + (size_t)i);
  char *const argv[] = {"true", NULL};
  pid_t child = vfork();
  if (child == 0) {
    execv("/bin/true", argv);
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  for (int i = 0; i < kBlocks; ++i) after[i] = malloc(64 + (size_t)i);
  for (int i = 0; i < kBlocks; ++i) {
    free(before[i]);
    free(after[i]);
  }
  printf("child exited with %d; %d blocks before and %d after\n", WEXITSTATUS(status), kBlocks,
         kBlocks);
  return 0;
}
