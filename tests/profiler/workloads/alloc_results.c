// Calls every allocation function at its edges (odd alignments, sizes no allocator can give)
// and prints, one line per call, what it returned and errno after it. Run without the profiler
// and under it, the two outputs must be the same (Interposer.AllocationResultsMatchGlibcs):
// a program gets under adprof what its glibc gives it.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile size_t huge = SIZE_MAX;  // volatile: the compiler must not reason about it

// "NAME: null errno=E" or "NAME: block, aligned to A: yes errno=E".
static void say(const char *name, void *p, size_t alignment, int err) {
  if (!p) {
    printf("%s: null errno=%s\n", name, err ? strerrorname_np(err) : "0");
    return;
  }
  printf("%s: block, aligned to %zu: %s errno=%s\n", name, alignment,
         (uintptr_t)p % alignment == 0 ? "yes" : "no", err ? strerrorname_np(err) : "0");
  free(p);
}

#define CALL(expr, alignment)         \
  do {                                \
    errno = 0;                        \
    void *p_ = (expr);                \
    say(#expr, p_, alignment, errno); \
  } while (0)

static void posix(size_t alignment, size_t size) {
  void *p = NULL;
  errno = 0;
  int r = posix_memalign(&p, alignment, size);
  int err = errno;
  printf("posix_memalign(%zu, %zu): %s errno=%s%s\n", alignment, size, r ? strerrorname_np(r) : "0",
         err ? strerrorname_np(err) : "0",
         r == 0 && p && (uintptr_t)p % alignment == 0 ? " aligned" : "");
  if (r == 0) free(p);
}

int main(void) {
  CALL(malloc(0), 1);
  CALL(malloc(huge), 1);
  CALL(malloc(huge / 2), 1);
  CALL(calloc(huge, 2), 1);
  CALL(calloc(1, huge), 1);
  CALL(aligned_alloc(3, 64), 16);
  CALL(aligned_alloc(0, 64), 16);
  CALL(aligned_alloc(48, 64), 64);
  CALL(aligned_alloc(64, huge), 64);
  CALL(aligned_alloc(huge, 64), 1);
  CALL(aligned_alloc(4096, 100), 4096);
  CALL(memalign(3, 64), 16);
  CALL(memalign(0, 64), 16);
  CALL(memalign(48, 64), 64);
  CALL(memalign(1000, 10), 1024);
  CALL(memalign(64, huge), 64);
  CALL(memalign(huge, 64), 1);
  CALL(memalign((huge / 2) + 2, 64), 1);
  CALL(valloc(huge), 4096);
  CALL(valloc(10), 4096);
  CALL(pvalloc(huge), 4096);
  CALL(pvalloc(huge - 8192), 4096);
  CALL(pvalloc(0), 4096);
  posix(3, 64);
  posix(0, 64);
  posix(4, 64);
  posix(24, 64);
  posix(64, 64);
  posix(64, huge);
  posix(huge / 2 + 1, 64);
  // realloc: a failure leaves the block as it was.
  void *p = malloc(100);
  errno = 0;
  void *q = realloc(p, huge);
  printf("realloc(p, SIZE_MAX): %s errno=%s\n", q ? "block" : "null",
         errno ? strerrorname_np(errno) : "0");
  errno = 0;
  q = reallocarray(q ? q : p, huge, 2);
  printf("reallocarray(p, SIZE_MAX, 2): %s errno=%s\n", q ? "block" : "null",
         errno ? strerrorname_np(errno) : "0");
  free(q ? q : p);
  return 0;
}
