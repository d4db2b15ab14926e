// Allocations from known call sites, for the call-stack evidence test (stacks_test.cpp):
//   site_direct   100 x 48 bytes, a function of its own, kept live to the end
//   site_inlined   30 x 200 bytes, always inlined into run_inlined, freed
//   lib_allocate   20 x 1000 bytes, in a library dlopen'd and dlclose'd before exit, freed
//   site_temporary 40 x 64 bytes, each freed before the next allocation: 40 temporaries (the
//                  other sites' last block is one too: freed before anything else is allocated)
// Each allocating line carries a SITE marker the test finds the line numbers by. Built with -g
// and without frame pointers: the unwinder must use the unwind tables. The results are stored,
// so no call to malloc is a tail call (which would leave its caller off the stack).
// usage: profiler_wl_sites LIBRARY
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

namespace {
void *g_kept[100];
void *g_freed[30];
}  // namespace

__attribute__((noinline)) void site_direct(int count) {
  for (int i = 0; i < count; ++i) g_kept[i] = malloc(48);  // SITE_DIRECT
}

__attribute__((always_inline)) inline void site_inlined(int count) {
  for (int i = 0; i < count; ++i) g_freed[i] = malloc(200);  // SITE_INLINED
}

__attribute__((noinline)) void run_inlined(int count) {
  site_inlined(count);  // SITE_INLINED_CALL
  for (int i = 0; i < count; ++i) free(g_freed[i]);
}

__attribute__((noinline)) void site_temporary(int count) {
  for (int i = 0; i < count; ++i) {
    void *volatile p = malloc(64);  // SITE_TEMPORARY
    free(p);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: profiler_wl_sites LIBRARY\n");
    return 2;
  }
  site_direct(100);
  run_inlined(30);
  site_temporary(40);
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "profiler_wl_sites: %s\n", dlerror());
    return 1;
  }
  using Allocate = void (*)(int, void **);
  auto allocate = reinterpret_cast<Allocate>(dlsym(lib, "lib_allocate"));
  void *blocks[20];
  allocate(20, blocks);
  for (void *b : blocks) free(b);
  if (dlclose(lib) != 0) return 1;
  return g_kept[99] ? 0 : 1;
}
