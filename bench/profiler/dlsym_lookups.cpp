// What a dlsym costs a program under the preload, now that dlsym and dlvsym are its trampolines
// (profiler/preload/dlsym_trampoline.cpp): a name not starting with "cu" jumps straight to
// glibc's; a "cu" name in a library's scope takes the slow path (adprof_dlsym_cuda: glibc's
// lookup, then a look at adprof's table of hooked entry points). libc has such a name,
// cuserid, so no CUDA is needed. A "cu" name with RTLD_DEFAULT asks first whether adprof's
// definition would be the only one found (adprof_dlsym_scope_is_only_adprofs): cuserid (found
// in libc: one more lookup, then glibc's), and cuMemAlloc_v2 where no driver is loaded
// (adprof's lookups, then NULL; without the preload, glibc's failing lookup).
//
//   profiler_bench_dlsym [CALLS]   prints ns per call, median of 7 rounds, for each kind
//
// Run it plain and with LD_PRELOAD=libadprof_preload.so (docs/PERFORMANCE.md has the command).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double median_ns_per_call(void *library, const char *name, long calls) {
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) {
      void *f = dlsym(library, name);
      asm volatile("" : : "r"(f) : "memory");  // the lookup is not optimized away
    }
    const auto t1 = std::chrono::steady_clock::now();
    rounds.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                     static_cast<double>(calls));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 1000000;
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc || !dlsym(libc, "malloc") || !dlsym(libc, "cuserid")) {
    std::fprintf(stderr, "profiler_bench_dlsym: libc.so.6 or its malloc/cuserid not found\n");
    return 2;
  }
  std::printf("dlsym(libc, \"malloc\")   %.1f ns/call\n",
              median_ns_per_call(libc, "malloc", calls));
  std::printf("dlsym(libc, \"cuserid\")  %.1f ns/call\n",
              median_ns_per_call(libc, "cuserid", calls));
  std::printf("dlsym(RTLD_NEXT, \"free\") %.1f ns/call\n",
              median_ns_per_call(RTLD_NEXT, "free", calls));
  std::printf("dlsym(RTLD_DEFAULT, \"cuserid\") %.1f ns/call\n",
              median_ns_per_call(RTLD_DEFAULT, "cuserid", calls));
  std::printf("dlsym(RTLD_DEFAULT, \"cuMemAlloc_v2\"), no driver %.1f ns/call\n",
              median_ns_per_call(RTLD_DEFAULT, "cuMemAlloc_v2", calls / 10));
  return 0;
}
