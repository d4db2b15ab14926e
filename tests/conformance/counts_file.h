/* The counts file the conformance suite's independent counter (counting_shim.c) keeps for each
 * process it is loaded into, and the test (conformance_test.cpp) reads. Plain C, shared by both.
 *
 * One file per process image: PREFIX.<pid>, or PREFIX.<pid>.1, .2, ... for the images that
 * follow an exec in the same process (PREFIX is $ADPROF_CONFORMANCE_COUNTS). The file is a
 * struct counts_file (native byte order, 8-byte fields) mapped MAP_SHARED by the process, so
 * each count is in the file the moment it is made: nothing needs to run at exit, and a process
 * that ends through _exit or a signal leaves its counts too.
 *
 * calls[k] counts the successful calls of kind k (a null result is not an allocation, as in
 * the adprof trace); at_start[k] is calls[k] when the counter's constructor ran (what the
 * dynamic loader and earlier constructors did), at_finish[k] when its destructor ran (what
 * is left after it: later destructors and exit). */
#ifndef ADPROF_CONFORMANCE_COUNTS_FILE_H
#define ADPROF_CONFORMANCE_COUNTS_FILE_H

#include <stdint.h>

#define COUNTS_FILE_MAGIC 0x31544e554f434441ull /* "ADCOUNT1" */
#define COUNTS_ENV "ADPROF_CONFORMANCE_COUNTS"

/* One kind per entry point and meaning. An allocation in the adprof trace is one of
 * CK_MALLOC .. CK_PVALLOC (realloc to a new block counts as one allocation and one free, as
 * the interposer records it); a free is CK_FREE, CK_REALLOC_MOVE or CK_REALLOC_FREE. */
enum counts_kind {
  CK_MALLOC,         /* malloc */
  CK_CALLOC,         /* calloc */
  CK_REALLOC_NULL,   /* realloc(NULL, n) and reallocarray(NULL, ...): an allocation */
  CK_REALLOC_MOVE,   /* realloc(p, n > 0): a free of p and an allocation */
  CK_REALLOC_FREE,   /* realloc(p, 0) that freed p: a free */
  CK_POSIX_MEMALIGN, /* posix_memalign */
  CK_ALIGNED_ALLOC,  /* aligned_alloc */
  CK_MEMALIGN,       /* memalign */
  CK_VALLOC,         /* valloc */
  CK_PVALLOC,        /* pvalloc */
  CK_FREE,           /* free of a non-null pointer */
  /* The counter's own operator new/delete (see counting_shim.c) allocate through its malloc,
   * aligned_alloc and free above, so these are already counted there; they say how many. */
  CK_NEW,
  CK_DELETE,
  CK_KINDS
};

struct counts_file {
  uint64_t magic;
  uint64_t pid;
  char comm[16];     /* the process's name (PR_GET_NAME) when the counter started */
  uint64_t started;  /* 1 once the constructor ran */
  uint64_t finished; /* 1 once the destructor ran */
  uint64_t calls[CK_KINDS];
  uint64_t at_start[CK_KINDS];
  uint64_t at_finish[CK_KINDS];
};

static inline uint64_t counts_allocations(const uint64_t *c) {
  return c[CK_MALLOC] + c[CK_CALLOC] + c[CK_REALLOC_NULL] + c[CK_REALLOC_MOVE] +
         c[CK_POSIX_MEMALIGN] + c[CK_ALIGNED_ALLOC] + c[CK_MEMALIGN] + c[CK_VALLOC] + c[CK_PVALLOC];
}

static inline uint64_t counts_frees(const uint64_t *c) {
  return c[CK_FREE] + c[CK_REALLOC_MOVE] + c[CK_REALLOC_FREE];
}

#endif
