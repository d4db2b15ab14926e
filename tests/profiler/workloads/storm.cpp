// Allocation storm for the interposer test: THREADS threads, each ITERATIONS random operations
// over a sliding window of live blocks, through every C allocation entry point (malloc, calloc,
// realloc, posix_memalign, aligned_alloc, memalign, valloc, free). Each thread works inside the
// op scope "storm", so its allocations are told apart from the runtime's; it counts what it did
// and checks the allocator's semantics (calloc zeroes, alignment, realloc keeps contents).
//
// usage: storm THREADS ITERATIONS RESULT_FILE [WINDOW]
// RESULT_FILE gets "allocations N", "frees N", "bytes N", "violations N" lines.
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "adprof/context.h"

namespace {

struct Totals {
  uint64_t allocations = 0, frees = 0, bytes = 0, violations = 0;
};

struct Slot {
  unsigned char *p = nullptr;
  size_t size = 0;
  unsigned char pattern = 0;
};

uint64_t next(uint64_t &s) {  // xorshift64*
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s * 2685821657736338717ull;
}

size_t pick_size(uint64_t &rng) {
  uint64_t r = next(rng) % 100;
  if (r < 70) return 1 + next(rng) % 256;
  if (r < 95) return 257 + next(rng) % 16128;
  return 16385 + next(rng) % 245760;
}

constexpr size_t kFill = 256;  // bytes of each block that carry its pattern

void fill(Slot &s) { memset(s.p, s.pattern, s.size < kFill ? s.size : kFill); }

bool check(const unsigned char *p, size_t n, unsigned char pattern) {
  for (size_t i = 0; i < n && i < kFill; ++i)
    if (p[i] != pattern) return false;
  return true;
}

void worker(int index, long iterations, size_t window, Totals *out) {
  Totals t;
  uint64_t rng = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  std::vector<Slot> slots(window);  // allocated before the op scope: not counted
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  adprof_op_begin(adprof_name("storm"), static_cast<uint64_t>(index) + 1);
  for (long i = 0; i < iterations; ++i) {
    Slot &s = slots[next(rng) % window];
    if (s.p) {
      if (next(rng) % 4 == 0) {  // realloc: grow or shrink, contents kept
        size_t size = pick_size(rng);
        auto *p = static_cast<unsigned char *>(realloc(s.p, size));
        if (!p) {
          ++t.violations;
          continue;
        }
        size_t kept = s.size < size ? s.size : size;
        if (!check(p, kept, s.pattern)) ++t.violations;
        ++t.frees;
        ++t.allocations;
        t.bytes += size;
        s.p = p;
        s.size = size;
        fill(s);
      } else {
        if (!check(s.p, s.size, s.pattern)) ++t.violations;
        free(s.p);
        ++t.frees;
        s.p = nullptr;
      }
      continue;
    }
    size_t size = pick_size(rng);
    size_t align = 0;
    void *p = nullptr;
    switch (next(rng) % 8) {
      case 0:
      case 1:
        p = malloc(size);
        break;
      case 2: {
        size_t n = 1 + size / 8;
        size = n * 8;
        p = calloc(n, 8);
        if (p)
          for (size_t k = 0; k < size; ++k)
            if (static_cast<unsigned char *>(p)[k] != 0) {
              ++t.violations;
              break;
            }
        break;
      }
      case 3:
        p = realloc(nullptr, size);
        break;
      case 4:
        align = size_t{8} << (next(rng) % 10);  // 8 .. 4096
        if (posix_memalign(&p, align, size) != 0) p = nullptr;
        break;
      case 5:
        align = size_t{16} << (next(rng) % 8);  // 16 .. 2048
        size = (size + align - 1) / align * align;
        p = aligned_alloc(align, size);
        break;
      case 6:
        align = size_t{16} << (next(rng) % 9);
        p = memalign(align, size);
        break;
      case 7:
        align = page;
        p = valloc(size);
        break;
    }
    if (!p) {
      ++t.violations;
      continue;
    }
    if (align && reinterpret_cast<uintptr_t>(p) % align != 0) ++t.violations;
    ++t.allocations;
    t.bytes += size;
    s.p = static_cast<unsigned char *>(p);
    s.size = size;
    s.pattern = static_cast<unsigned char>(1 + next(rng) % 255);
    fill(s);
  }
  for (Slot &s : slots)
    if (s.p) {
      free(s.p);
      ++t.frees;
      s.p = nullptr;
    }
  adprof_op_end();
  *out = t;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: storm THREADS ITERATIONS RESULT_FILE [WINDOW]\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  long iterations = atol(argv[2]);
  size_t window = argc > 4 ? static_cast<size_t>(atol(argv[4])) : 512;
  std::vector<Totals> totals(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i)
    pool.emplace_back(worker, i, iterations, window, &totals[static_cast<size_t>(i)]);
  for (auto &t : pool) t.join();
  Totals sum;
  for (auto &t : totals) {
    sum.allocations += t.allocations;
    sum.frees += t.frees;
    sum.bytes += t.bytes;
    sum.violations += t.violations;
  }
  if (strcmp(argv[3], "-") != 0) {
    FILE *f = fopen(argv[3], "w");
    if (!f) return 3;
    fprintf(f, "allocations %llu\nfrees %llu\nbytes %llu\nviolations %llu\n",
            static_cast<unsigned long long>(sum.allocations),
            static_cast<unsigned long long>(sum.frees), static_cast<unsigned long long>(sum.bytes),
            static_cast<unsigned long long>(sum.violations));
    fclose(f);
  }
  return sum.violations == 0 ? 0 : 1;
}
