// The entry points of a ThreadSanitizer-instrumented libadprof_preload.so (scripts/
// tsan-preload.sh), built without instrumentation. The interposer's own malloc, free, calloc,
// realloc, mmap, mmap64 and munmap are renamed adprof_tsan_* in its object; these come first and
// call them only where instrumented code can run:
//   - before the library's constructors (libtsan, a dependency, is initialized by then),
//     allocations come from a static arena: libtsan's own initialization allocates through
//     dlsym, when neither instrumented code nor jemalloc (whose mutexes go through TSan's
//     interceptors, not yet set up) can run; mmap is the system call itself;
//   - on a thread before its start routine runs (TSan sets the thread up: pthread_getattr_np
//     allocates), jemalloc directly.
// Not a test and not built by CMake: a tool for looking for data races in the interposer.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

void *mallocx(size_t size, int flags);
void *rallocx(void *p, size_t size, int flags);
void dallocx(void *p, int flags);
void *adprof_tsan_malloc(size_t size);
void adprof_tsan_free(void *p);
void *adprof_tsan_calloc(size_t count, size_t size);
void *adprof_tsan_realloc(void *p, size_t size);
void *adprof_tsan_mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);
void *adprof_tsan_mmap64(void *addr, size_t length, int prot, int flags, int fd, long offset);
int adprof_tsan_munmap(void *addr, size_t length);

#define EXPORT __attribute__((visibility("default")))
enum { kMallocxZero = 0x40 };

static volatile int g_ready;         // the library's constructors have begun
static __thread int t_thread_ready;  // this thread's TSan state is set up
static _Alignas(16) char g_arena[4 << 20];
static size_t g_arena_used;

__attribute__((constructor(101))) static void shim_ready(void) {
  t_thread_ready = 1;
  g_ready = 1;
}

static int instrumented_ok(void) { return g_ready && t_thread_ready; }

static int in_arena(void *p) {
  return (char *)p >= g_arena && (char *)p < g_arena + sizeof g_arena;
}

// A block of the arena, its size in the 16 bytes before it (realloc copies it out).
static void *arena_block(size_t n) {
  size_t need = ((n + 15) & ~(size_t)15) + 16;
  if (g_arena_used + need > sizeof g_arena) return NULL;
  char *p = g_arena + g_arena_used + 16;
  *(size_t *)(p - 16) = n;
  g_arena_used += need;
  return p;
}

struct start {
  void *(*fn)(void *);
  void *arg;
};

static void *started(void *p) {
  struct start s = *(struct start *)p;
  t_thread_ready = 1;
  dallocx(p, 0);
  return s.fn(s.arg);
}

EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg) {
  static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  if (!real)
    real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(
        RTLD_NEXT, "pthread_create");
  struct start *s = mallocx(sizeof *s, 0);
  s->fn = fn;
  s->arg = arg;
  return real(thread, attr, started, s);
}

EXPORT void *malloc(size_t n) {
  if (instrumented_ok()) return adprof_tsan_malloc(n);
  return g_ready ? mallocx(n ? n : 1, 0) : arena_block(n);
}

EXPORT void free(void *p) {
  if (!p || in_arena(p) || !g_ready) return;
  if (!t_thread_ready) {
    dallocx(p, 0);
    return;
  }
  adprof_tsan_free(p);
}

EXPORT void *calloc(size_t count, size_t n) {
  if (instrumented_ok()) return adprof_tsan_calloc(count, n);
  return g_ready ? mallocx(count * n ? count * n : 1, kMallocxZero) : arena_block(count * n);
}

EXPORT void *realloc(void *p, size_t n) {
  if (in_arena(p)) {
    void *q = malloc(n);
    size_t old = *(size_t *)((char *)p - 16);
    if (q) memcpy(q, p, old < n ? old : n);
    return q;
  }
  if (!g_ready) return arena_block(n);  // p is null: every earlier block is the arena's
  if (instrumented_ok()) return adprof_tsan_realloc(p, n);
  if (!p) return mallocx(n ? n : 1, 0);
  if (!n) {
    dallocx(p, 0);
    return NULL;
  }
  return rallocx(p, n, 0);
}

static long raw_syscall6(long n, long a, long b, long c, long d, long e, long f) {
  long r;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(r)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return r;
}

static void *raw_mmap(void *addr, size_t length, int prot, int flags, int fd, long offset) {
  long r = raw_syscall6(9, (long)addr, (long)length, prot, flags, fd, offset);  // SYS_mmap
  return r < 0 && r > -4096 ? (void *)-1 : (void *)r;
}

EXPORT void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset) {
  if (instrumented_ok()) return adprof_tsan_mmap(addr, length, prot, flags, fd, offset);
  return raw_mmap(addr, length, prot, flags, fd, offset);
}

EXPORT void *mmap64(void *addr, size_t length, int prot, int flags, int fd, long offset) {
  if (instrumented_ok()) return adprof_tsan_mmap64(addr, length, prot, flags, fd, offset);
  return raw_mmap(addr, length, prot, flags, fd, offset);
}

EXPORT int munmap(void *addr, size_t length) {
  if (instrumented_ok()) return adprof_tsan_munmap(addr, length);
  return (int)raw_syscall6(11, (long)addr, (long)length, 0, 0, 0, 0);  // SYS_munmap
}
