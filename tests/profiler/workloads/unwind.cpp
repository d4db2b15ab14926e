// Allocations whose call stacks change between consecutive allocations in the ways the stack
// walker's reuse of the previous stack (profiler/preload/stacks.cpp) must notice, for
// stacks_test.cpp (run with ADPROF_STACKS_CHECK=1: every stack is also unwound by libunwind and
// compared). Built like sites.cpp: -O2, no frame pointers, unwind tables only.
//   recursion   a recursion whose depth changes between allocations (inner frames change)
//   callers     two callers at the same depth (same stack pointer, different return address)
//   alloca      frames whose CFA is rbp-based, of changing size, from one call site
//   same_sp     two paths with the same stack pointer and return address in every frame from
//               the allocation in, differing only in rbp (by which the rest is found)
//   longjmp     allocations deep in a recursion left by longjmp, then from shallower frames
//   exceptions  the same with a C++ exception
//   signal      allocations in a signal handler (a signal frame on the stack), and around it
//   threads     four threads doing the above at once, each first freeing a block of main's
//   deep        a recursion deeper than the 64 frames recorded
// Every block is kept to the end (the test reads the live blocks at the peak by stack). Each
// allocation's size says where it was made: SIZE = scenario base + detail.
// usage: profiler_wl_unwind
#include <alloca.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdint>

#define NOINLINE __attribute__((noinline))

namespace {

constexpr int kMaxKept = 1 << 16;
void *g_kept[kMaxKept];
std::atomic<int> g_kept_count{0};
volatile int g_sink;  // after every call: no tail calls (which would leave a caller off the stack)

void keep(void *p) {
  const int i = g_kept_count.fetch_add(1);
  if (i < kMaxKept) g_kept[i] = p;
}

}  // namespace

extern "C" NOINLINE void unwind_leaf(size_t size) {
  keep(malloc(size));
  g_sink = g_sink + 1;
}

extern "C" NOINLINE void unwind_caller_a(size_t size) {
  unwind_leaf(size);
  g_sink = g_sink + 2;
}

extern "C" NOINLINE void unwind_caller_b(size_t size) {
  unwind_leaf(size);
  g_sink = g_sink + 3;
}

extern "C" NOINLINE void unwind_recurse(int depth, size_t size) {
  if (depth == 0)
    unwind_leaf(size);
  else
    unwind_recurse(depth - 1, size);
  g_sink = g_sink + depth;
}

extern "C" NOINLINE void unwind_alloca(int words, size_t size) {
  volatile char *p = static_cast<volatile char *>(alloca(static_cast<size_t>(words) * 16));
  p[0] = 1;
  unwind_leaf(size);
  g_sink = g_sink + p[0];
}

// Two paths that reach unwind_leaf with the same stack pointers and return addresses in every
// frame from the leaf in, differing only in rbp (unwind_alloca_to's frame base, by which its
// caller is found): alloca takes the stack down to the same address, and both are called through
// one pointer from one call site.
extern "C" NOINLINE void unwind_alloca_to(uintptr_t target, size_t size) {
  const uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  volatile char *p = static_cast<volatile char *>(alloca(here - target));
  p[0] = 1;
  unwind_leaf(size);
  g_sink = g_sink + p[0];
}

extern "C" NOINLINE void unwind_wrapper(uintptr_t target, size_t size) {
  volatile char pad[256];
  pad[0] = 1;
  unwind_alloca_to(target, size);
  g_sink = g_sink + pad[0];
}

namespace {
using Target = void (*)(uintptr_t, size_t);
Target volatile g_targets[2] = {unwind_alloca_to, unwind_wrapper};
}  // namespace

extern "C" NOINLINE void unwind_same_sp(size_t base) {
  volatile char here = 0;
  const uintptr_t target = (reinterpret_cast<uintptr_t>(&here) - 4096) & ~uintptr_t{15};
  for (int i = 0; i < 20; ++i) g_targets[i % 2](target, base + 8000 + static_cast<size_t>(i % 2));
  g_sink = g_sink + here;
}

namespace {
thread_local jmp_buf g_jump;
volatile bool g_jump_armed = true;
}  // namespace

extern "C" NOINLINE void unwind_jump_from(int depth, size_t size) {
  if (depth == 0) {
    unwind_leaf(size);
    if (g_jump_armed) longjmp(g_jump, 1);
    return;
  }
  unwind_jump_from(depth - 1, size);
  g_sink = g_sink + depth;
}

extern "C" NOINLINE void unwind_throw_from(int depth, size_t size) {
  if (depth == 0) {
    unwind_leaf(size);
    throw depth;
  }
  unwind_throw_from(depth - 1, size);
  g_sink = g_sink + depth;
}

extern "C" void unwind_on_signal(int) {
  unwind_leaf(6100);
  unwind_caller_a(6101);
  g_sink = g_sink + 4;
}

extern "C" NOINLINE void unwind_signal_at(int depth) {
  if (depth == 0) {
    unwind_leaf(6000);
    raise(SIGUSR1);
    unwind_leaf(6001);
  } else {
    unwind_signal_at(depth - 1);
  }
  g_sink = g_sink + depth;
}

extern "C" NOINLINE void unwind_jump_once(int depth, size_t base) {
  volatile size_t b = base;
  if (setjmp(g_jump) == 0) unwind_jump_from(depth, b + 4000);
  unwind_caller_a(b + 4001);
  unwind_recurse(3, b + 4002);
}

extern "C" NOINLINE void unwind_scenarios(size_t base) {
  for (int round = 0; round < 3; ++round) {
    for (int d = 0; d < 40; ++d)
      unwind_recurse((d * 7) % 40, base + 1000 + static_cast<size_t>((d * 7) % 40));
    for (int i = 0; i < 100; ++i) {
      if (i % 2)
        unwind_caller_a(base + 2000);
      else
        unwind_caller_b(base + 2001);
    }
    for (int k = 1; k < 50; ++k)
      unwind_alloca(k % 7 + 1, base + 3000 + static_cast<size_t>(k % 7 + 1));
    for (int i = 0; i < 10; ++i) unwind_jump_once(5 + i, base);
    for (int i = 0; i < 10; ++i) {
      try {
        unwind_throw_from(5 + i, base + 5000);
      } catch (int) {
        unwind_caller_b(base + 5001);
      }
      unwind_recurse(2, base + 5002);
    }
    unwind_same_sp(base);
    unwind_recurse(100, base + 7000);
    unwind_recurse(90, base + 7001);
    unwind_recurse(60, base + 7002);
  }
}

namespace {
void *g_from_main[4];
void *thread_main(void *arg) {
  // The thread's first call into the allocator frees a block of another thread's: jemalloc sets
  // up this thread's cache (an mmap) inside the profiler's size query.
  const size_t base = reinterpret_cast<size_t>(arg);
  free(g_from_main[base / 10000 - 1]);
  unwind_scenarios(base);
  return nullptr;
}
}  // namespace

int main() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = unwind_on_signal;
  sigaction(SIGUSR1, &sa, nullptr);
  unwind_scenarios(0);
  for (int i = 0; i < 5; ++i) unwind_signal_at(i * 3);
  for (void *&p : g_from_main) p = malloc(64);
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i)
    pthread_create(&threads[i], nullptr, thread_main, reinterpret_cast<void *>((i + 1) * 10000));
  for (pthread_t t : threads) pthread_join(t, nullptr);
  return g_kept_count.load() > 0 ? 0 : 1;
}
