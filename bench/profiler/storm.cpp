// Allocation storm for the profiler benchmark: THREADS threads, each ITERATIONS times frees a
// random slot of a sliding window of live blocks and mallocs a new mixed-size block there
// (two events per iteration). Uses nothing but malloc/free, so every profiler sees the same
// program. With STEPS, the first thread marks a step (adprof_step, when the preload library
// is there) every ITERATIONS / STEPS iterations, the others going on beside it: a step window's
// writer merges their events by time. usage: profiler_bench_storm THREADS ITERATIONS [WINDOW]
// [STEPS]
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <thread>
#include <vector>

// The preload library's step mark; absent when the storm runs alone.
extern "C" void adprof_step(uint64_t step) __attribute__((weak));

namespace {

uint64_t next(uint64_t &s) {  // xorshift64*
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 2685821657736338717ull;
}

void worker(int index, long iterations, size_t window, long steps) {
  uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  std::vector<void *> slots(window, nullptr);
  const long per_step = steps > 0 ? std::max(1L, iterations / steps) : 0;
  for (long i = 0; i < iterations; ++i) {
    if (index == 0 && per_step && i % per_step == 0 && adprof_step)
      adprof_step(static_cast<uint64_t>(i / per_step));
    void *&slot = slots[next(rng) % window];
    free(slot);
    uint64_t r = next(rng) % 100;
    size_t size = r < 80   ? 8 + next(rng) % 248
                  : r < 98 ? 256 + next(rng) % 7936
                           : 8192 + next(rng) % 57344;
    slot = malloc(size);
    static_cast<volatile char *>(slot)[0] = 1;
  }
  for (void *p : slots) free(p);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: profiler_bench_storm THREADS ITERATIONS [WINDOW] [STEPS]\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  long iterations = atol(argv[2]);
  size_t window = argc > 3 ? static_cast<size_t>(atol(argv[3])) : 4096;
  long steps = argc > 4 ? atol(argv[4]) : 0;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker, i, iterations, window, steps);
  for (auto &t : pool) t.join();
  return 0;
}
