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

#if ADCORE_COUNT_MALLOC
#include "../support/counting_malloc.h"
#else
namespace adprof_support {
inline std::atomic<uint64_t> g_heap_calls{0};  // never counts: the tests skip
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
    const uint64_t before = adprof_support::g_heap_calls.load();
    for (int i = 0; i < 200; ++i) {
      const uint64_t c0 = adprof_support::g_heap_calls.load();
      adprof_step(static_cast<uint64_t>(i));
      tape.value_and_grad(samples::eam_f, args, wrt, g);
      EXPECT_EQ(adprof_support::g_heap_calls.load() - c0, 0u) << "call " << i + 2 << " N=" << N;
    }
    EXPECT_EQ(adprof_support::g_heap_calls.load() - before, 0u) << "N=" << N;
    EXPECT_EQ(tape.replayed_calls(), 200u) << "N=" << N;  // the replay plan ran every call
  }
}

TEST(AdcoreAlloc, HoldingThePreviousValueStillMakesZeroHeapAllocations) {
  if (!ADCORE_COUNT_MALLOC)
    GTEST_SKIP() << "malloc not countable under ASan/TSan (they own malloc)";
  // `loss = tape.value_and_grad(...)`: the previous value is still held when the next call
  // starts, so the plan's buffer for it changes hands; the two buffers alternate via the arena.
  const Tensor args[1] = {rand_uniform(Shape{100}, 5, 0, 1)};
  const size_t wrt[1] = {0};
  Tensor g[1], loss;
  Tape tape;
  for (int i = 0; i < 2; ++i) loss = tape.value_and_grad(samples::eam_f, args, wrt, g);
  const uint64_t before = adprof_support::g_heap_calls.load();
  for (int i = 0; i < 100; ++i) loss = tape.value_and_grad(samples::eam_f, args, wrt, g);
  EXPECT_EQ(adprof_support::g_heap_calls.load() - before, 0u);
  EXPECT_EQ(tape.replayed_calls(), 101u);
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
  const uint64_t before = adprof_support::g_heap_calls.load();
  for (int i = 0; i < 10; ++i) tape.value_and_grad(samples::eam_f, args, wrt, g);
  EXPECT_GE(adprof_support::g_heap_calls.load() - before, 10u * 10u);
}
