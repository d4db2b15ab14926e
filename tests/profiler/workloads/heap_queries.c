// Asks the heap what glibc's malloc.h lets a program ask (mallinfo2, mallinfo, malloc_trim,
// malloc_stats) around 32 MiB of blocks made and freed, and prints one verdict per question;
// then whether 64 MiB blocks' pages leave the resident set at their free.
// Run without the profiler and under it, the two outputs must be the same
// (Interposer.HeapQueriesAnswerForTheHeapInUse): under adprof the answers describe jemalloc's
// heap, which holds the program's blocks, not glibc's, which holds none.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kBlocks = 512, kBlockSize = 64 << 10 };  // below glibc's mmap threshold: in its heap

static size_t resident_bytes(void) {
  unsigned long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%lu %lu", &size, &resident) != 2) {
    fprintf(stderr, "heap_queries: cannot read /proc/self/statm\n");
    exit(2);
  }
  fclose(f);
  return resident * (size_t)sysconf(_SC_PAGESIZE);
}

static const char *yes(int condition) { return condition ? "yes" : "no"; }

// Whether the resident set falls from `before` by 3/4 of `bytes` within 3 s of the call.
static int pages_leave(size_t before, size_t bytes) {
  for (int i = 0; i <= 60; ++i) {
    if (i) usleep(50 * 1000);
    const size_t now = resident_bytes();
    if (now < before && before - now >= bytes * 3 / 4) return 1;
  }
  return 0;
}

int main(void) {
  const size_t total = (size_t)kBlocks * kBlockSize;
  static void *blocks[kBlocks];
  const struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < kBlocks; ++i) {
    blocks[i] = malloc(kBlockSize);
    memset(blocks[i], 1, kBlockSize);
  }
  void *pin = malloc(64);  // after the blocks: glibc cannot trim its heap's top on their free
  const struct mallinfo2 held = mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const struct mallinfo held_int = mallinfo();
#pragma GCC diagnostic pop
  for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
  const struct mallinfo2 freed = mallinfo2();
  const size_t resident_before_trim = resident_bytes();
  const int trimmed = malloc_trim(0);
  const size_t resident_after_trim = resident_bytes();
  free(pin);

  // The profiler's own memory is none of the program's heap (its zstd contexts were 2.2 MB).
  printf("the heap holds under 1 MiB before the program's blocks: %s\n",
         yes(before.uordblks < (1u << 20)));
  // Within 1/16: the blocks' headers (glibc), other blocks a thread cache gave back (jemalloc).
  const size_t grown = held.uordblks - before.uordblks;
  printf("in use grew by the blocks: %s\n",
         yes(grown >= total - total / 16 && grown < total + total / 16));
  printf("the heap holds what is in use: %s\n", yes(held.arena + held.hblkhd >= held.uordblks));
  printf("mallinfo says what mallinfo2 says: %s\n",
         yes((size_t)held_int.uordblks == held.uordblks && (size_t)held_int.arena == held.arena));
  printf("in use fell back after the frees: %s\n",
         yes(freed.uordblks < before.uordblks + total / 16));
  printf("the freed bytes are held as free: %s\n", yes(freed.fordblks >= total / 2));
  printf("malloc_trim says it released memory: %d\n", trimmed);
  printf("the resident set fell by half the freed bytes or more: %s\n",
         yes(resident_before_trim > resident_after_trim &&
             resident_before_trim - resident_after_trim >= total / 2));

  // A block above glibc's largest mmap threshold (32 MiB) is unmapped at its free: its pages
  // leave the resident set without a trim (under adprof, once no such block was made for a
  // flush tick or two: looked at for up to 3 s). Two of them, the second freed once the
  // first's pages left.
  const size_t huge_size = (size_t)64 << 20;
  char *first = malloc(huge_size), *second = malloc(huge_size);
  memset(first, 1, huge_size);
  memset(second, 1, huge_size);
  size_t resident = resident_bytes();
  free(first);
  printf("a freed 64 MiB block left the resident set: %s\n", yes(pages_leave(resident, huge_size)));
  resident = resident_bytes();
  free(second);
  printf("a second, freed later, left it too: %s\n", yes(pages_leave(resident, huge_size)));
  fflush(stdout);
  malloc_stats();  // to stderr
  return 0;
}
