/* The conformance suite's independent allocation counter: an LD_PRELOAD library, no adprof
 * code, that counts a process's calls into the C allocation family and forwards each to the
 * next definition found with dlsym(RTLD_NEXT): glibc's alone, the interposer's in front of it. The
 * counts live in a file mapped MAP_SHARED (counts_file.h), so they are complete whatever way the
 * process ends.
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
 * once, which is also what adprof must record. Alone, the one difference from libstdc++: a throwing
 * form that cannot allocate aborts with a message instead of calling the new-handler and
 * throwing std::bad_alloc (C cannot throw; no conformance program runs out of memory).
 *
 * In front of adprof's interposer (LD_PRELOAD=counter:interposer, how the conformance test
 * runs it: one process both counted and recorded, so that the two counts are of the same run),
 * the next definitions are the interposer's. Each call is forwarded to the interposer's entry
 * point of the same name, operator new and delete included (so that its hooks for them are the
 * ones the recording goes through), and what the interposer calls back while serving a call (its
 * realloc(NULL, n) is its malloc, reached through the PLT: here) is its own work, not counted;
 * nor is anything on the threads it starts (its writer's zstd contexts: 38 mallocs and frees in
 * the PyTorch program), which it does not record either: they are not the program's.
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
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The interposer walks the loader's list of objects (_r_debug, profiler/preload/elf_symbols.cpp),
 * so it needs ld.so; this counter refers to it too, so that both need the same libraries. */
__attribute__((used)) static const void *const needs_the_loader = &_r_debug;

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
/* The next malloc is adprof's interposer's (LD_PRELOAD=counter:interposer), not glibc's: the
 * operators are forwarded to the interposer's own (see the top of the file). */
static int stacked;
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
    static const char msg[] = "counting shim: an allocation function is missing\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    abort();
  }
  return f;
}

static int defined_in(void *function, const char *library) {
  Dl_info info;
  return dladdr(function, &info) && info.dli_fname && strstr(info.dli_fname, library);
}

static void resolve_operators(void);

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
  stacked = defined_in((void *)real.malloc, "libadprof_preload");
  if (stacked) resolve_operators();
  --t_internal;
  atomic_store_explicit(&resolved, 1, memory_order_release);
}

/* ---- the C allocation family ------------------------------------------------------------ */

/* The bodies are static so that the counter's operator new reaches them, not whichever
 * malloc comes first in the process. */
static void *counted_malloc(size_t size) {
  if (t_internal && !atomic_load(&resolved)) return bootstrap_alloc(size);
  resolve();
  ++t_internal; /* what the next allocator calls back is its own work */
  void *p = real.malloc(size);
  --t_internal;
  if (p) count(CK_MALLOC);
  return p;
}

EXPORT void *calloc(size_t n, size_t size) {
  if (t_internal && !atomic_load(&resolved)) {
    size_t total;
    return __builtin_mul_overflow(n, size, &total) ? NULL : bootstrap_alloc(total);
  }
  resolve();
  ++t_internal;
  void *p = real.calloc(n, size);
  --t_internal;
  if (p) count(CK_CALLOC);
  return p;
}

static void counted_free(void *p) {
  if (!p || in_bootstrap(p)) return;
  resolve();
  count(CK_FREE);
  ++t_internal;
  real.free(p);
  --t_internal;
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
  ++t_internal;
  void *p = real.realloc(old, size);
  --t_internal;
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
  ++t_internal;
  int r = real.posix_memalign(out, alignment, size);
  --t_internal;
  if (r == 0) count(CK_POSIX_MEMALIGN);
  return r;
}

static void *counted_aligned_alloc(size_t alignment, size_t size) {
  resolve();
  ++t_internal;
  void *p = real.aligned_alloc(alignment, size);
  --t_internal;
  if (p) count(CK_ALIGNED_ALLOC);
  return p;
}

EXPORT void *aligned_alloc(size_t alignment, size_t size) {
  return counted_aligned_alloc(alignment, size);
}

EXPORT void *memalign(size_t alignment, size_t size) {
  resolve();
  ++t_internal;
  void *p = real.memalign(alignment, size);
  --t_internal;
  if (p) count(CK_MEMALIGN);
  return p;
}

EXPORT void *valloc(size_t size) {
  resolve();
  ++t_internal;
  void *p = real.valloc(size);
  --t_internal;
  if (p) count(CK_VALLOC);
  return p;
}

EXPORT void *pvalloc(size_t size) {
  resolve();
  ++t_internal;
  void *p = real.pvalloc(size);
  --t_internal;
  if (p) count(CK_PVALLOC);
  return p;
}

/* ---- operator new and delete, as libstdc++ defines them (x86-64 / AArch64 mangling) ------- */

typedef struct nothrow_t nothrow_t;

/* The replaceable forms, in the order of the definitions below and of their names. */
enum new_form { NW, NA, NW_NT, NA_NT, NW_AL, NA_AL, NW_AL_NT, NA_AL_NT, NEW_FORMS };
enum delete_form {
  DL,
  DA,
  DL_SZ,
  DA_SZ,
  DL_NT,
  DA_NT,
  DL_AL,
  DA_AL,
  DL_SZ_AL,
  DA_SZ_AL,
  DL_AL_NT,
  DA_AL_NT,
  DELETE_FORMS
};
static const char *const new_names[NEW_FORMS] = {"_Znwm",
                                                 "_Znam",
                                                 "_ZnwmRKSt9nothrow_t",
                                                 "_ZnamRKSt9nothrow_t",
                                                 "_ZnwmSt11align_val_t",
                                                 "_ZnamSt11align_val_t",
                                                 "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                                 "_ZnamSt11align_val_tRKSt9nothrow_t"};
static const char *const delete_names[DELETE_FORMS] = {"_ZdlPv",
                                                       "_ZdaPv",
                                                       "_ZdlPvm",
                                                       "_ZdaPvm",
                                                       "_ZdlPvRKSt9nothrow_t",
                                                       "_ZdaPvRKSt9nothrow_t",
                                                       "_ZdlPvSt11align_val_t",
                                                       "_ZdaPvSt11align_val_t",
                                                       "_ZdlPvmSt11align_val_t",
                                                       "_ZdaPvmSt11align_val_t",
                                                       "_ZdlPvSt11align_val_tRKSt9nothrow_t",
                                                       "_ZdaPvSt11align_val_tRKSt9nothrow_t"};
/* In front of the interposer (see stacked): its own operators, by form. */
static void *next_new[NEW_FORMS], *next_delete[DELETE_FORMS];

static void resolve_operators(void) {
  for (int f = 0; f < NEW_FORMS; ++f) next_new[f] = next(new_names[f]);
  for (int f = 0; f < DELETE_FORMS; ++f) next_delete[f] = next(delete_names[f]);
}

/* The counter's own work until the end of the scope, even when the next operator new throws
 * (the library is built with -fexceptions, so the cleanup runs as the exception passes). */
static void leave_internal(int *unused) {
  (void)unused;
  --t_internal;
}
#define INTERNAL_SCOPE __attribute__((cleanup(leave_internal))) int internal_scope = ++t_internal

static void *call_next_new(enum new_form form, size_t size, size_t alignment,
                           const nothrow_t *tag) {
  INTERNAL_SCOPE;
  (void)internal_scope;
  void *f = next_new[form];
  switch (form) {
    case NW:
    case NA:
      return ((void *(*)(size_t))f)(size);
    case NW_NT:
    case NA_NT:
      return ((void *(*)(size_t, const nothrow_t *))f)(size, tag);
    case NW_AL:
    case NA_AL:
      return ((void *(*)(size_t, size_t))f)(size, alignment);
    default:
      return ((void *(*)(size_t, size_t, const nothrow_t *))f)(size, alignment, tag);
  }
}

static void call_next_delete(enum delete_form form, void *p, size_t size, size_t alignment,
                             const nothrow_t *tag) {
  INTERNAL_SCOPE;
  (void)internal_scope;
  void *f = next_delete[form];
  switch (form) {
    case DL:
    case DA:
      ((void (*)(void *))f)(p);
      break;
    case DL_SZ:
    case DA_SZ:
      ((void (*)(void *, size_t))f)(p, size);
      break;
    case DL_NT:
    case DA_NT:
      ((void (*)(void *, const nothrow_t *))f)(p, tag);
      break;
    case DL_AL:
    case DA_AL:
      ((void (*)(void *, size_t))f)(p, alignment);
      break;
    case DL_SZ_AL:
    case DA_SZ_AL:
      ((void (*)(void *, size_t, size_t))f)(p, size, alignment);
      break;
    default:
      ((void (*)(void *, size_t, const nothrow_t *))f)(p, alignment, tag);
      break;
  }
}

/* Every form counts as one `new` and one allocation of malloc's kind (aligned_alloc's for the
 * aligned forms), as libstdc++'s operators on malloc would. */
static void *new_plain(enum new_form form, size_t size, const nothrow_t *tag) {
  resolve();
  count(CK_NEW);
  if (stacked) {
    void *p = call_next_new(form, size, 0, tag);
    if (p) count(CK_MALLOC);
    return p;
  }
  void *p = counted_malloc(size ? size : 1);
  if (!p && !tag) {
    static const char msg[] = "counting shim: operator new: out of memory\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    abort();
  }
  return p;
}

static void *new_aligned(enum new_form form, size_t size, size_t alignment, const nothrow_t *tag) {
  resolve();
  count(CK_NEW);
  if (stacked) {
    void *p = call_next_new(form, size, alignment, tag);
    if (p) count(CK_ALIGNED_ALLOC);
    return p;
  }
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  size = size ? (size + alignment - 1) & ~(alignment - 1) : alignment; /* as libstdc++ */
  void *p = counted_aligned_alloc(alignment, size);
  if (!p && !tag) {
    static const char msg[] = "counting shim: aligned operator new: out of memory\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    abort();
  }
  return p;
}

static void delete_any(enum delete_form form, void *p, size_t size, size_t alignment,
                       const nothrow_t *tag) {
  if (!p) return;
  resolve();
  count(CK_DELETE);
  if (stacked && !in_bootstrap(p)) {
    count(CK_FREE);
    call_next_delete(form, p, size, alignment, tag);
    return;
  }
  counted_free(p);
}

EXPORT void *_Znwm(size_t n) { return new_plain(NW, n, NULL); }
EXPORT void *_Znam(size_t n) { return new_plain(NA, n, NULL); }
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) { return new_plain(NW_NT, n, t); }
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) { return new_plain(NA_NT, n, t); }
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned(NW_AL, n, a, NULL); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned(NA_AL, n, a, NULL); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) {
  return new_aligned(NW_AL_NT, n, a, t);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) {
  return new_aligned(NA_AL_NT, n, a, t);
}
EXPORT void _ZdlPv(void *p) { delete_any(DL, p, 0, 0, NULL); }
EXPORT void _ZdaPv(void *p) { delete_any(DA, p, 0, 0, NULL); }
EXPORT void _ZdlPvm(void *p, size_t n) { delete_any(DL_SZ, p, n, 0, NULL); }
EXPORT void _ZdaPvm(void *p, size_t n) { delete_any(DA_SZ, p, n, 0, NULL); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) { delete_any(DL_NT, p, 0, 0, t); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) { delete_any(DA_NT, p, 0, 0, t); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { delete_any(DL_AL, p, 0, a, NULL); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { delete_any(DA_AL, p, 0, a, NULL); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) {
  delete_any(DL_SZ_AL, p, n, a, NULL);
}
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) {
  delete_any(DA_SZ_AL, p, n, a, NULL);
}
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) {
  delete_any(DL_AL_NT, p, 0, a, t);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) {
  delete_any(DA_AL_NT, p, 0, a, t);
}

/* ---- threads (pthread_create: forwarded, and in front of the interposer, its own marked)
 * ------------------------------------------------------------------------------ */

/* A thread the interposer starts (its start routine is the interposer's) does the profiler's
 * work: it runs with t_internal set. The start routine and its argument reach the new thread
 * through a slot of a small static table, free again once the thread has read it (nothing is
 * allocated: an allocation here would be counted, or recorded, as the program's). */
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static struct own_thread {
  atomic_int used;
  void *(*start)(void *);
  void *arg;
} own_threads[16];

static void *own_thread_main(void *slot_pointer) {
  struct own_thread *slot = slot_pointer;
  void *(*start)(void *) = slot->start;
  void *arg = slot->arg;
  atomic_store_explicit(&slot->used, 0, memory_order_release);
  t_internal = 1; /* for the thread's life */
  return start(arg);
}

EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                          void *arg) {
  static pthread_create_fn next_create;
  if (!next_create) next_create = (pthread_create_fn)next("pthread_create");
  if (!stacked || !defined_in((void *)start, "libadprof_preload"))
    return next_create(thread, attr, start, arg);
  for (size_t i = 0; i < sizeof own_threads / sizeof own_threads[0]; ++i) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&own_threads[i].used, &expected, 1)) continue;
    own_threads[i].start = start;
    own_threads[i].arg = arg;
    int r = next_create(thread, attr, own_thread_main, &own_threads[i]);
    if (r != 0) atomic_store(&own_threads[i].used, 0);
    return r;
  }
  static const char msg[] = "counting shim: more than 16 of the interposer's threads starting\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  abort();
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

/* The counter links the interposer's libraries, jemalloc among them; alone it must still forward
 * to glibc (which every program links directly, so it comes first in the lookup order), and in
 * front of the interposer to the interposer. */
static void check_forwards(void) {
  if (stacked || defined_in((void *)real.malloc, "libc.so")) return;
  static const char msg[] = "counting shim: malloc forwards neither to glibc's nor to adprof's\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  abort();
}

__attribute__((constructor(101))) static void counter_start(void) {
  resolve();
  ++t_internal;
  check_forwards();
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
