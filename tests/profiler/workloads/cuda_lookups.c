/* CUDA entry points looked up by the program itself (cuda_lookups_test.cpp), over the fake
 * driver (fake_libcuda.c) and runtime (fake_cudart.c), each dlopen'ed RTLD_LOCAL:
 *   dlsym LIBCUDA              XLA's way: dlsym(handle, "cuMemAlloc_v2") for each entry point,
 *                              inside op "xla_step", role activation;
 *   procaddress LIBCUDA        the runtime's way: cuGetProcAddress(_v2) by name and CUDA version,
 *                              inside op "driver_step", role workspace;
 *   runtime LIBCUDART LIBCUDA  a runtime over the driver (its cudaMalloc calls the driver through
 *                              pointers from cuGetProcAddress), reached with dlsym, and
 *                              cudaGetDriverEntryPoint(ByVersion), inside op "runtime_step",
 *                              role parameter;
 *   absent LIBRARY LIBCUDA     lookups of adprof's names with no driver loaded, from the program
 *                              and from LIBRARY (dlsym_next_a.c), then LIBCUDA loaded
 *                              RTLD_GLOBAL (run_absent).
 * Prints what the program sees (every call's status combined as "rc N", each block's offset from
 * the first, the pitch), the same with the interposer as without. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "adprof/context.h"

typedef unsigned long long devptr;
typedef int (*ProcAddress)(const char *, void **, int, unsigned long long);
typedef int (*ProcAddressV2)(const char *, void **, int, unsigned long long, int *);

static int g_rc;
static uintptr_t g_first;

static void *need(void *handle, const char *name) {
  void *f = dlsym(handle, name);
  if (!f) {
    fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    g_rc |= 1 << 20;
  }
  return f;
}

static void offset(const char *what, uintptr_t p) {
  if (!g_first) g_first = p;
  printf("%s %lld\n", what, (long long)(p - g_first));
}

static int run_dlsym(void *cuda) {
  int (*alloc)(devptr *, size_t) = need(cuda, "cuMemAlloc_v2");
  int (*managed)(devptr *, size_t, unsigned) = need(cuda, "cuMemAllocManaged");
  int (*pitched)(devptr *, size_t *, size_t, size_t, unsigned) = need(cuda, "cuMemAllocPitch_v2");
  int (*async)(devptr *, size_t, void *) = need(cuda, "cuMemAllocAsync");
  int (*async_ptsz)(devptr *, size_t, void *) = need(cuda, "cuMemAllocAsync_ptsz");
  int (*pool)(devptr *, size_t, void *, void *) = need(cuda, "cuMemAllocFromPoolAsync");
  int (*host)(void **, size_t) = need(cuda, "cuMemAllocHost_v2");
  int (*host_alloc)(void **, size_t, unsigned) = need(cuda, "cuMemHostAlloc");
  int (*release)(devptr) = need(cuda, "cuMemFree_v2");
  int (*release_async)(devptr, void *) = need(cuda, "cuMemFreeAsync");
  int (*release_async_ptsz)(devptr, void *) = need(cuda, "cuMemFreeAsync_ptsz");
  int (*release_host)(void *) = need(cuda, "cuMemFreeHost");
  int (*create)(unsigned long long *, size_t, const void *, unsigned long long) =
      need(cuda, "cuMemCreate");
  int (*reserve)(devptr *, size_t, size_t, devptr, unsigned long long) =
      need(cuda, "cuMemAddressReserve");
  int (*map)(devptr, size_t, size_t, unsigned long long, unsigned long long) =
      need(cuda, "cuMemMap");
  int (*unmap)(devptr, size_t) = need(cuda, "cuMemUnmap");
  int (*release_handle)(unsigned long long) = need(cuda, "cuMemRelease");
  int (*release_range)(devptr, size_t) = need(cuda, "cuMemAddressFree");
  if (g_rc) return g_rc;
  printf("dlerror %s\n", dlerror() ? "set" : "none");

  devptr a = 0, m = 0, p = 0, s = 0, t = 0, q = 0;
  void *h = NULL, *g = NULL;
  size_t pitch = 0;
  adprof_op_begin(adprof_name("xla_step"), 1);
  adprof_role before = adprof_set_role(ADPROF_ROLE_ACTIVATION);
  g_rc |= alloc(&a, 1 << 20);
  g_rc |= managed(&m, 3 << 20, 1);
  g_rc |= pitched(&p, &pitch, 1000, 64, 4); /* pitch 1024: 64 KiB */
  g_rc |= async(&s, 5 << 20, NULL);
  g_rc |= async_ptsz(&t, 7 << 20, NULL);
  g_rc |= pool(&q, 9 << 20, NULL, NULL);
  g_rc |= host(&h, 2 << 20);
  g_rc |= host_alloc(&g, 6 << 20, 0);
  offset("alloc", a), offset("managed", m), offset("pitched", p), offset("async", s);
  offset("async_ptsz", t), offset("pool", q), offset("host", (uintptr_t)h);
  offset("host_alloc", (uintptr_t)g);
  printf("pitch %zu\n", pitch);
  g_rc |= release_host(g);
  g_rc |= release_host(h);
  g_rc |= release_async(q, NULL);
  g_rc |= release_async_ptsz(t, NULL);
  g_rc |= release_async(s, NULL);
  g_rc |= release(p);
  g_rc |= release(m);
  g_rc |= release(a);

  /* Virtual memory: XLA's way (one range, one handle, unmapped whole) and PyTorch's expandable
   * segments' (pages of one range mapped one by one, two unmapped by one call). */
  unsigned long long whole = 0, page1 = 0, page2 = 0;
  devptr range = 0, pages = 0;
  g_rc |= create(&whole, 11 << 20, NULL, 0);
  g_rc |= reserve(&range, 11 << 20, 0, 0, 0);
  g_rc |= map(range, 11 << 20, 0, whole, 0);
  g_rc |= create(&page1, 2 << 20, NULL, 0);
  g_rc |= create(&page2, 4 << 20, NULL, 0);
  g_rc |= reserve(&pages, 8 << 20, 0, 0, 0);
  g_rc |= map(pages, 2 << 20, 0, page1, 0);
  g_rc |= map(pages + (2 << 20), 4 << 20, 0, page2, 0);
  offset("vmm_range", range), offset("vmm_pages", pages);
  g_rc |= unmap(pages, 6 << 20);
  g_rc |= unmap(range, 11 << 20);
  g_rc |= release_handle(page2) | release_handle(page1) | release_handle(whole);
  g_rc |= release_range(pages, 8 << 20) | release_range(range, 11 << 20);
  adprof_set_role(before);
  adprof_op_end();
  return g_rc;
}

static int run_proc_address(void *cuda) {
  ProcAddressV2 get2 = need(cuda, "cuGetProcAddress_v2");
  ProcAddress get1 = need(cuda, "cuGetProcAddress");
  void *legacy_by_name = need(cuda, "cuMemAlloc");
  if (g_rc) return g_rc;
  int status = 0;
  int (*alloc)(devptr *, size_t) = NULL;
  int (*release)(devptr) = NULL;
  int (*async_ptds)(devptr *, size_t, void *) = NULL;
  int (*release_async_ptds)(devptr, void *) = NULL;
  int (*pool)(devptr *, size_t, void *, void *) = NULL;
  int (*release_async)(devptr, void *) = NULL;
  int (*host_alloc)(void **, size_t, unsigned) = NULL;
  int (*release_host)(void *) = NULL;
  int (*managed)(devptr *, size_t, unsigned) = NULL;
  int (*host)(void **, size_t) = NULL;
  void *legacy = NULL;
  ProcAddressV2 get_again = NULL;
  g_rc |= get2("cuMemAlloc", (void **)&alloc, 12000, 0, &status);
  g_rc |= get2("cuMemFree", (void **)&release, 12000, 0, &status);
  g_rc |= get2("cuMemAllocAsync", (void **)&async_ptds, 12000, 2, &status);
  g_rc |= get2("cuMemFreeAsync", (void **)&release_async_ptds, 12000, 2, &status);
  g_rc |= get2("cuMemAllocFromPoolAsync", (void **)&pool, 12000, 0, &status);
  g_rc |= get2("cuMemFreeAsync", (void **)&release_async, 12000, 0, &status);
  g_rc |= get2("cuMemHostAlloc", (void **)&host_alloc, 12000, 0, &status);
  g_rc |= get2("cuMemFreeHost", (void **)&release_host, 12000, 0, &status);
  g_rc |= get1("cuMemAllocManaged", (void **)&managed, 11040, 0);
  g_rc |= get2("cuMemAlloc", &legacy, 3010, 0, &status); /* the 32-bit ABI: left alone */
  g_rc |= get2("cuGetProcAddress", (void **)&get_again, 12000, 0, &status);
  if (g_rc || !get_again) return g_rc | 1;
  g_rc |= get_again("cuMemAllocHost", (void **)&host, 12000, 0, &status);
  printf("status %d\n", status);
  printf("legacy is dlsym's %d\n", legacy == legacy_by_name);
  if (g_rc) return g_rc;

  devptr a = 0, s = 0, q = 0, m = 0;
  void *h = NULL, *g = NULL;
  adprof_op_begin(adprof_name("driver_step"), 1);
  adprof_role before = adprof_set_role(ADPROF_ROLE_WORKSPACE);
  g_rc |= alloc(&a, 1 << 20);
  g_rc |= async_ptds(&s, 5 << 20, NULL);
  g_rc |= pool(&q, 9 << 20, NULL, NULL);
  g_rc |= host_alloc(&g, 6 << 20, 0);
  g_rc |= managed(&m, 3 << 20, 1);
  g_rc |= host(&h, 2 << 20);
  offset("alloc", a), offset("async_ptds", s), offset("pool", q);
  offset("host_alloc", (uintptr_t)g), offset("managed", m), offset("host", (uintptr_t)h);
  g_rc |= release_host(h);
  g_rc |= release(m);
  g_rc |= release_host(g);
  g_rc |= release_async(q, NULL);
  g_rc |= release_async_ptds(s, NULL);
  g_rc |= release(a);
  adprof_set_role(before);
  adprof_op_end();
  return g_rc;
}

static int run_runtime(void *runtime, const char *driver_path) {
  int (*use_driver)(const char *) = need(runtime, "fake_cudart_use_driver");
  int (*malloc_)(void **, size_t) = need(runtime, "cudaMalloc");
  int (*malloc_async)(void **, size_t, void *) = need(runtime, "cudaMallocAsync");
  int (*malloc_host)(void **, size_t) = need(runtime, "cudaMallocHost");
  int (*free_)(void *) = need(runtime, "cudaFree");
  int (*free_async)(void *, void *) = need(runtime, "cudaFreeAsync");
  int (*free_host)(void *) = need(runtime, "cudaFreeHost");
  int (*entry)(const char *, void **, unsigned long long, int *) =
      need(runtime, "cudaGetDriverEntryPoint");
  int (*entry_by_version)(const char *, void **, unsigned, unsigned long long, int *) =
      need(runtime, "cudaGetDriverEntryPointByVersion");
  if (g_rc) return g_rc;
  g_rc |= use_driver(driver_path);
  int status = 0;
  int (*alloc)(devptr *, size_t) = NULL;
  int (*release)(devptr) = NULL;
  int (*host)(void **, size_t) = NULL;
  int (*release_host)(void *) = NULL;
  g_rc |= entry("cuMemAlloc", (void **)&alloc, 0, &status);
  g_rc |= entry("cuMemFree", (void **)&release, 0, &status);
  g_rc |= entry_by_version("cuMemAllocHost", (void **)&host, 12000, 0, &status);
  g_rc |= entry_by_version("cuMemFreeHost", (void **)&release_host, 12000, 0, &status);
  if (g_rc) return g_rc;

  void *r = NULL, *s = NULL, *h = NULL, *g = NULL;
  devptr a = 0;
  adprof_op_begin(adprof_name("runtime_step"), 1);
  adprof_role before = adprof_set_role(ADPROF_ROLE_PARAMETER);
  g_rc |= malloc_(&r, 1 << 20);
  g_rc |= malloc_async(&s, 5 << 20, NULL);
  g_rc |= malloc_host(&h, 4 << 20);
  g_rc |= alloc(&a, 3 << 20);
  g_rc |= host(&g, 2 << 20);
  offset("cudaMalloc", (uintptr_t)r), offset("cudaMallocAsync", (uintptr_t)s);
  offset("cudaMallocHost", (uintptr_t)h), offset("cuMemAlloc", a);
  offset("cuMemAllocHost", (uintptr_t)g);
  g_rc |= release_host(g);
  g_rc |= release(a);
  g_rc |= free_host(h);
  g_rc |= free_async(s, NULL);
  g_rc |= free_(r);
  adprof_set_role(before);
  adprof_op_end();
  return g_rc;
}

/* A process without a driver in its scope: each lookup of a name adprof exports says NULL, as
 * without adprof, from the program (RTLD_DEFAULT, RTLD_NEXT, its own handle) and from a library
 * loaded RTLD_LOCAL (dlsym_next_a.c), whose error names it; in that library's own scope
 * (dlsym_next_b.c, its dependency) cuMemAlloc_v2 is found. Then a driver loaded RTLD_GLOBAL is
 * found from the program, and its functions work. */
static int run_absent(void *library, const char *driver) {
  static const char *const names[] = {"cuMemAlloc_v2",    "cuMemFree_v2",
                                      "cudaMalloc",       "cudaMallocHost",
                                      "cuGetProcAddress", "cudaGetDriverEntryPoint"};
  void *(*default_from_library)(const char *) = need(library, "wl_default_lookup");
  void *(*next_from_library)(const char *) = need(library, "wl_next_lookup");
  void *self = dlopen(NULL, RTLD_NOW);
  if (!default_from_library || !next_from_library || !self) return 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char *name = names[i];
    const char *e;
    dlerror();
    void *f = dlsym(RTLD_DEFAULT, name);
    e = dlerror();
    printf("program default %s: %s, error %s\n", name, f ? "found" : "null", e ? "said" : "none");
    f = dlsym(RTLD_NEXT, name);
    e = dlerror();
    printf("program next %s: %s, error %s\n", name, f ? "found" : "null", e ? "said" : "none");
    f = dlsym(self, name);
    e = dlerror();
    printf("program handle %s: %s, error %s\n", name, f ? "found" : "null", e ? "said" : "none");
    f = default_from_library(name);
    e = dlerror();
    printf("library default %s: %s, error %s\n", name, f ? "found" : "null", e ? e : "none");
    f = next_from_library(name);
    e = dlerror();
    printf("library next %s: %s, error %s\n", name, f ? "found" : "null", e ? e : "none");
  }
  void *cuda = dlopen(driver, RTLD_NOW | RTLD_GLOBAL);
  if (!cuda) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  int (*alloc)(devptr *, size_t) = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  int (*release)(devptr) = dlsym(self, "cuMemFree_v2");
  printf("global driver: cuMemAlloc_v2 %s, cuMemFree_v2 %s\n", alloc ? "found" : "null",
         release ? "found" : "null");
  if (!alloc || !release) return 1;
  devptr p = 0;
  return alloc(&p, 1 << 20) | release(p);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  int rc;
  if (strcmp(argv[1], "dlsym") == 0)
    rc = run_dlsym(lib);
  else if (strcmp(argv[1], "procaddress") == 0)
    rc = run_proc_address(lib);
  else if (strcmp(argv[1], "runtime") == 0 && argc >= 4)
    rc = run_runtime(lib, argv[3]);
  else if (strcmp(argv[1], "absent") == 0 && argc >= 4)
    rc = run_absent(lib, argv[3]);
  else
    return 2;
  printf("rc %d\n", rc);
  return 0;
}
