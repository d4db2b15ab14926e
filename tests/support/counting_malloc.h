// A counting malloc family for a test or benchmark binary: defined in the binary, it takes the
// calls before glibc and forwards to glibc's __libc_* functions, counting each allocation.
// Include it in exactly one translation unit of a binary, and not in sanitizer builds (ASan and
// TSan own malloc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace adprof_support {
inline std::atomic<uint64_t> g_heap_calls{0};  // allocations (not frees) since start
inline void count_heap_call() { g_heap_calls.fetch_add(1, std::memory_order_relaxed); }
}  // namespace adprof_support

extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);
void *malloc(size_t n) {
  adprof_support::count_heap_call();
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  adprof_support::count_heap_call();
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  adprof_support::count_heap_call();
  return __libc_realloc(p, n);
}
void *aligned_alloc(size_t al, size_t n) {
  adprof_support::count_heap_call();
  return __libc_memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n) {
  adprof_support::count_heap_call();
  *out = __libc_memalign(al, n);
  return *out ? 0 : 12;  // ENOMEM
}
void free(void *p) { __libc_free(p); }
}
