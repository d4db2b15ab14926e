// Zero heap allocations on repeated eam gradients with the reusable tape, counted by a
// malloc-family interposer defined in this binary (forwarding to glibc's __libc_* functions).
#include <adcore/adcore.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "../support/sanitized_build.h"
#include "workloads.h"

// ASan and TSan own malloc: a counting malloc in the binary would fight their interceptors.
#ifdef ADPROF_SANITIZED_BUILD
#define ADCORE_COUNT_MALLOC 0
#else
#define ADCORE_COUNT_MALLOC 1
#endif

namespace {
std::atomic<uint64_t> g_calls{0};
}

#if ADCORE_COUNT_MALLOC
extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void __libc_free(void *);
void *malloc(size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void *aligned_alloc(size_t al, size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  *out = __libc_memalign(al, n);
  return *out ? 0 : 12;
}
void free(void *p) { __libc_free(p); }
}
#endif

using namespace adcore;

TEST(AdcoreAlloc, RepeatedEamGradientsMakeZeroHeapAllocations) {
  if (!ADCORE_COUNT_MALLOC)
    GTEST_SKIP() << "malloc not countable under ASan/TSan (they own malloc)";
  for (int64_t N : {100, 1000}) {
    const Tensor args[1] = {rand_uniform(Shape{N}, 5, 0, 1)};
    const size_t wrt[1] = {0};
    Tensor g[1];
    Tape tape;
    tape.value_and_grad(samples::eam_f, args, wrt, g);  // first call: allocates
    const uint64_t before = g_calls.load();
    for (int i = 0; i < 200; ++i) {
      const uint64_t c0 = g_calls.load();
      adprof_step(static_cast<uint64_t>(i));
      tape.value_and_grad(samples::eam_f, args, wrt, g);
      EXPECT_EQ(g_calls.load() - c0, 0u) << "call " << i + 2 << " N=" << N;
    }
    EXPECT_EQ(g_calls.load() - before, 0u) << "N=" << N;
  }
}

TEST(AdcoreAlloc, WithoutReuseEveryCallAllocates) {
  if (!ADCORE_COUNT_MALLOC)
    GTEST_SKIP() << "malloc not countable under ASan/TSan (they own malloc)";
  Options o;
  o.reuse_tape = false;
  const Tensor args[1] = {rand_uniform(Shape{100}, 5, 0, 1)};
  const size_t wrt[1] = {0};
  Tensor g[1];
  Tape tape(o);
  tape.value_and_grad(samples::eam_f, args, wrt, g);
  const uint64_t before = g_calls.load();
  for (int i = 0; i < 10; ++i) tape.value_and_grad(samples::eam_f, args, wrt, g);
  EXPECT_GE(g_calls.load() - before, 10u * 10u);
}
