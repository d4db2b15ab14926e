/* The conformance suite's independent allocation counter: an LD_PRELOAD library, no adprof
 * code, that counts a process's calls into the C allocation family and forwards each to the
 * next definition (glibc's) found with dlsym(RTLD_NEXT). The counts live in a file mapped
 * MAP_SHARED (counts_file.h), so they are complete whatever way the process ends.
 *
 * What a count means, so that it can be compared with the allocations and frees in an adprof
 * trace: one allocation per successful malloc, calloc, realloc (to a new block: also a free of
 * the old one), reallocarray, posix_memalign, aligned_alloc, memalign, valloc or pvalloc; one
 * free per free of a non-null pointer and per realloc that released its block.
 *
 * operator new and delete: libstdc++ implements every form on malloc, aligned_alloc and free,
 * so a program's `new` is one malloc here. But a process may hold another library that
 * exports its own operator new (jemalloc does; adprof's interposer depends on it), which would
 * serve `new` without calling malloc and be invisible to a malloc counter. So this library
 * defines every replaceable form itself, as libstdc++ does (on its own counted malloc,
 * aligned_alloc and free): whichever library the process holds, each `new` is counted exactly
 * once, which is also what adprof must record. The one difference from libstdc++: a throwing
 * form that cannot allocate aborts with a message instead of calling the new-handler and
 * throwing std::bad_alloc (C cannot throw; no conformance program runs out of memory).
 *
 * Bootstrap: dlsym itself may allocate before the real functions are known; while this thread
 * is resolving them, allocations come from a static buffer and are not counted. The counter's
 * own work (resolving, registering the fork handler) is not counted either.
 *
 * fork: the child's counts go nowhere until it execs (adprof does not trace a fork child that
 * does not exec either); the new image writes its own file. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "counts_file.h"

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*reallocarray_fn)(void *, size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*aligned_fn)(size_t, size_t);
typedef void (*free_fn)(void *);

/* The process's counter state (one per process: it is what an LD_PRELOAD counter is). */
static struct {
  malloc_fn malloc;
  calloc_fn calloc;
  realloc_fn realloc;
  reallocarray_fn reallocarray;
  posix_memalign_fn posix_memalign;
  aligned_fn aligned_alloc, memalign;
  malloc_fn valloc, pvalloc;
  free_fn free;
} real;
static atomic_int resolved;
static struct counts_file early;   /* counts before the file exists */
static struct counts_file dropped; /* a fork child's counts until it execs */
static _Atomic(struct counts_file *) current = &early;

static TLS int t_internal; /* this thread is in the counter's own work: do not count */

static _Alignas(64) char bootstrap[1 << 16];
static atomic_size_t bootstrap_used;

static int in_bootstrap(const void *p) {
  return (const char *)p >= bootstrap && (const char *)p < bootstrap + sizeof bootstrap;
}

static void *bootstrap_alloc(size_t size) {
  size_t rounded = (size + 63) & ~(size_t)63;
  size_t at = atomic_fetch_add(&bootstrap_used, rounded);
  if (at + rounded > sizeof bootstrap) return NULL;
  return bootstrap + at; /* static storage: already zero, so calloc is served too */
}

static void count(enum counts_kind kind) {
  if (t_internal) return;
  struct counts_file *f = atomic_load_explicit(&current, memory_order_acquire);
  __atomic_fetch_add(&f->calls[kind], 1, __ATOMIC_RELAXED);
}

static void *next(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    static const char msg[] = "counting shim: a C allocation function is missing\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    abort();
  }
  return f;
}

static void resolve(void) {
  if (atomic_load_explicit(&resolved, memory_order_acquire)) return;
  ++t_internal;
  real.malloc = (malloc_fn)next("malloc");
  real.calloc = (calloc_fn)next("calloc");
  real.realloc = (realloc_fn)next("realloc");
  real.reallocarray = (reallocarray_fn)next("reallocarray");
  real.posix_memalign = (posix_memalign_fn)next("posix_memalign");
  real.aligned_alloc = (aligned_fn)next("aligned_alloc");
  real.memalign = (aligned_fn)next("memalign");
  real.valloc = (malloc_fn)next("valloc");
  real.pvalloc = (malloc_fn)next("pvalloc");
  real.free = (free_fn)next("free");
  --t_internal;
  atomic_store_explicit(&resolved, 1, memory_order_release);
}

/* ---- the C allocation family ------------------------------------------------------------ */

/* The bodies are static so that the counter's operator new reaches them, not whichever
 * malloc comes first in the process. */
static void *counted_malloc(size_t size) {
  if (t_internal && !atomic_load(&resolved)) return bootstrap_alloc(size);
  resolve();
  void *p = real.malloc(size);
  if (p) count(CK_MALLOC);
  return p;
}

EXPORT void *calloc(size_t n, size_t size) {
  if (t_internal && !atomic_load(&resolved)) {
    size_t total;
    return __builtin_mul_overflow(n, size, &total) ? NULL : bootstrap_alloc(total);
  }
  resolve();
  void *p = real.calloc(n, size);
  if (p) count(CK_CALLOC);
  return p;
}

static void counted_free(void *p) {
  if (!p || in_bootstrap(p)) return;
  resolve();
  count(CK_FREE);
  real.free(p);
}

EXPORT void *malloc(size_t size) { return counted_malloc(size); }
EXPORT void free(void *p) { counted_free(p); }

/* The kinds a realloc of OLD to SIZE that returned P counts as (see counts_file.h). */
static void count_realloc(void *old, size_t size, void *p) {
  if (!old) {
    if (p) count(CK_REALLOC_NULL);
  } else if (p) {
    count(CK_REALLOC_MOVE);
  } else if (size == 0) {
    count(CK_REALLOC_FREE); /* glibc frees the block and returns NULL */
  }
}

EXPORT void *realloc(void *old, size_t size) {
  if (in_bootstrap(old) || (t_internal && !atomic_load(&resolved))) {
    void *p = t_internal && !atomic_load(&resolved) ? bootstrap_alloc(size) : counted_malloc(size);
    if (p && old) {
      size_t room = in_bootstrap(old) ? (size_t)(bootstrap + sizeof bootstrap - (char *)old) : 0;
      memcpy(p, old, size < room ? size : room);
    }
    return p;
  }
  resolve();
  void *p = real.realloc(old, size);
  count_realloc(old, size, p);
  return p;
}

EXPORT void *reallocarray(void *old, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(old, total); /* glibc's reallocarray would bypass the realloc above */
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
  resolve();
  int r = real.posix_memalign(out, alignment, size);
  if (r == 0) count(CK_POSIX_MEMALIGN);
  return r;
}

static void *counted_aligned_alloc(size_t alignment, size_t size) {
  resolve();
  void *p = real.aligned_alloc(alignment, size);
  if (p) count(CK_ALIGNED_ALLOC);
  return p;
}

EXPORT void *aligned_alloc(size_t alignment, size_t size) {
  return counted_aligned_alloc(alignment, size);
}

EXPORT void *memalign(size_t alignment, size_t size) {
  resolve();
  void *p = real.memalign(alignment, size);
  if (p) count(CK_MEMALIGN);
  return p;
}

EXPORT void *valloc(size_t size) {
  resolve();
  void *p = real.valloc(size);
  if (p) count(CK_VALLOC);
  return p;
}

EXPORT void *pvalloc(size_t size) {
  resolve();
  void *p = real.pvalloc(size);
  if (p) count(CK_PVALLOC);
  return p;
}

/* ---- operator new and delete, as libstdc++ defines them (x86-64 / AArch64 mangling) ------- */

static void *new_plain(size_t size, int nothrow) {
  count(CK_NEW);
  void *p = counted_malloc(size ? size : 1);
  if (!p && !nothrow) {
    static const char msg[] = "counting shim: operator new: out of memory\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    abort();
  }
  return p;
}

static void *new_aligned(size_t size, size_t alignment, int nothrow) {
  count(CK_NEW);
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  size = size ? (size + alignment - 1) & ~(alignment - 1) : alignment; /* as libstdc++ */
  void *p = counted_aligned_alloc(alignment, size);
  if (!p && !nothrow) {
    static const char msg[] = "counting shim: aligned operator new: out of memory\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    abort();
  }
  return p;
}

static void delete_any(void *p) {
  if (!p) return;
  count(CK_DELETE);
  counted_free(p);
}

typedef struct nothrow_t nothrow_t;

EXPORT void *_Znwm(size_t n) { return new_plain(n, 0); }
EXPORT void *_Znam(size_t n) { return new_plain(n, 0); }
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) { return (void)t, new_plain(n, 1); }
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) { return (void)t, new_plain(n, 1); }
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, 0); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, 0); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) {
  return (void)t, new_aligned(n, a, 1);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) {
  return (void)t, new_aligned(n, a, 1);
}
EXPORT void _ZdlPv(void *p) { delete_any(p); }
EXPORT void _ZdaPv(void *p) { delete_any(p); }
EXPORT void _ZdlPvm(void *p, size_t n) { (void)n, delete_any(p); }
EXPORT void _ZdaPvm(void *p, size_t n) { (void)n, delete_any(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t, delete_any(p); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t, delete_any(p); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a, delete_any(p); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a, delete_any(p); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a, delete_any(p); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a, delete_any(p); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) {
  (void)a, (void)t, delete_any(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) {
  (void)a, (void)t, delete_any(p);
}

/* ---- life cycle ---------------------------------------------------------------------------- */

static void after_fork_in_child(void) {
  atomic_store_explicit(&current, &dropped, memory_order_release);
}

/* Creates PREFIX.<pid>, or the first free PREFIX.<pid>.N when an earlier image of this
 * process (it exec'd) holds the name. */
static int create_counts_file(const char *prefix) {
  char path[4096];
  int n = snprintf(path, sizeof path, "%s.%d", prefix, (int)getpid());
  if (n <= 0 || (size_t)n >= sizeof path - 8) return -1;
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = open(path, flags, 0644);
  for (int image = 1; fd < 0 && errno == EEXIST && image < 1000; ++image) {
    snprintf(path + n, sizeof path - (size_t)n, ".%d", image);
    fd = open(path, flags, 0644);
  }
  return fd;
}

/* The counter links the interposer's libraries, jemalloc among them; it must still forward to
 * glibc (which every program links directly, so it comes first in the lookup order). */
static void check_forwards_to_glibc(void) {
  Dl_info info;
  if (dladdr((void *)real.malloc, &info) && info.dli_fname && strstr(info.dli_fname, "libc.so"))
    return;
  static const char msg[] = "counting shim: malloc does not forward to glibc's\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  abort();
}

__attribute__((constructor(101))) static void counter_start(void) {
  resolve();
  ++t_internal;
  check_forwards_to_glibc();
  pthread_atfork(NULL, NULL, after_fork_in_child);
  struct counts_file *f = NULL;
  const char *prefix = getenv(COUNTS_ENV);
  int fd = prefix && *prefix ? create_counts_file(prefix) : -1;
  if (fd >= 0 && ftruncate(fd, sizeof *f) == 0) {
    void *m = mmap(NULL, sizeof *f, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) f = m;
  }
  if (fd >= 0) close(fd);
  if (!f) {
    if (prefix && *prefix) {
      static const char msg[] = "counting shim: cannot create the counts file\n";
      ssize_t ignored = write(2, msg, sizeof msg - 1);
      (void)ignored;
    }
    --t_internal;
    return;
  }
  f->magic = COUNTS_FILE_MAGIC;
  f->pid = (uint64_t)getpid();
  prctl(PR_GET_NAME, f->comm, 0, 0, 0);
  /* From here on counts go to the file; the early ones are added after the switch, so that
   * none made meanwhile by another thread is lost. */
  atomic_store_explicit(&current, f, memory_order_release);
  for (int k = 0; k < CK_KINDS; ++k) {
    uint64_t before = __atomic_load_n(&early.calls[k], __ATOMIC_RELAXED);
    f->at_start[k] = before;
    __atomic_fetch_add(&f->calls[k], before, __ATOMIC_RELAXED);
  }
  f->started = 1;
  --t_internal;
}

static void counter_finish(void *unused) {
  (void)unused;
  struct counts_file *f = atomic_load(&current);
  if (!f) return;
  for (int k = 0; k < CK_KINDS; ++k)
    f->at_finish[k] = __atomic_load_n(&f->calls[k], __ATOMIC_RELAXED);
  f->finished = 1;
}

int __cxa_atexit(void (*function)(void *), void *argument, void *dso_handle);

/* As the interposer's recorder (finish_recording): the window closes in an exit handler
 * registered from the destructor, which glibc runs after every library's destructor. */
__attribute__((destructor(101))) static void counter_defer_finish(void) {
  if (__cxa_atexit(counter_finish, NULL, NULL) != 0) counter_finish(NULL);
}
