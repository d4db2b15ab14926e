/* A stand-in for the CUDA runtime, for the CUDA hooks' tests on machines without one: the
 * entry points the interposer hooks, over a static arena ("device" memory is host memory here).
 * Only the plugin (fake_cuda_plugin.c) links it, so it is loaded RTLD_LOCAL, as the real
 * runtime is with adcore's CUDA plugin or PyTorch's CUDA extension.
 *
 * After fake_cudart_use_driver(path), it works as the real runtime does over the driver: it
 * dlopens the fake driver (fake_libcuda.c) RTLD_LOCAL, finds its cuGetProcAddress_v2 with dlsym
 * and fetches through it the driver functions its allocation calls then make
 * (cuda_lookups_test.cpp); cudaGetDriverEntryPoint(ByVersion) answer through it too. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

static unsigned char g_arena[64 << 20] __attribute__((aligned(4096)));
static size_t g_used;

typedef unsigned long long devptr;
typedef int (*ProcAddress)(const char *, void **, int, unsigned long long, int *);
static struct {
  ProcAddress proc;
  int (*alloc)(devptr *, size_t);
  int (*free)(devptr);
  int (*alloc_async)(devptr *, size_t, void *);
  int (*free_async)(devptr, void *);
  int (*host_alloc)(void **, size_t, unsigned);
  int (*free_host)(void *);
} g_driver;
enum { kRuntimeVersion = 12080 };

EXPORT int fake_cudart_use_driver(const char *path) {
  void *driver = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!driver) return 1;
  g_driver.proc = (ProcAddress)dlsym(driver, "cuGetProcAddress_v2");
  if (!g_driver.proc) return 1;
  int status = 0, rc = 0;
  rc |= g_driver.proc("cuMemAlloc", (void **)&g_driver.alloc, kRuntimeVersion, 0, &status);
  rc |= g_driver.proc("cuMemFree", (void **)&g_driver.free, kRuntimeVersion, 0, &status);
  rc |=
      g_driver.proc("cuMemAllocAsync", (void **)&g_driver.alloc_async, kRuntimeVersion, 0, &status);
  rc |= g_driver.proc("cuMemFreeAsync", (void **)&g_driver.free_async, kRuntimeVersion, 0, &status);
  rc |= g_driver.proc("cuMemHostAlloc", (void **)&g_driver.host_alloc, kRuntimeVersion, 0, &status);
  rc |= g_driver.proc("cuMemFreeHost", (void **)&g_driver.free_host, kRuntimeVersion, 0, &status);
  return rc;
}

static int take(void **out, size_t size) {
  size = (size + 4095) & ~(size_t)4095;
  if (!out || g_used + size > sizeof g_arena) return 2; /* cudaErrorMemoryAllocation */
  *out = g_arena + g_used;
  g_used += size;
  return 0;
}

static int driver_alloc(void **out, size_t size) {
  devptr p = 0;
  const int rc = g_driver.alloc(&p, size);
  if (rc == 0) *out = (void *)(uintptr_t)p;
  return rc;
}
static int driver_alloc_async(void **out, size_t size, void *stream) {
  devptr p = 0;
  const int rc = g_driver.alloc_async(&p, size, stream);
  if (rc == 0) *out = (void *)(uintptr_t)p;
  return rc;
}

EXPORT int cudaMalloc(void **out, size_t size) {
  return g_driver.proc ? driver_alloc(out, size) : take(out, size);
}
EXPORT int cudaMallocAsync(void **out, size_t size, void *stream) {
  return g_driver.proc ? driver_alloc_async(out, size, stream) : take(out, size);
}
EXPORT int cudaMallocHost(void **out, size_t size) {
  return g_driver.proc ? g_driver.host_alloc(out, size, 0) : take(out, size);
}
EXPORT int cudaHostAlloc(void **out, size_t size, unsigned flags) {
  return g_driver.proc ? g_driver.host_alloc(out, size, flags) : take(out, size);
}
/* Frees call this, not each other: a call between exported functions would go through the
 * interposer's hooks again. */
static int release(void *p) {
  return p && ((unsigned char *)p < g_arena || (unsigned char *)p >= g_arena + sizeof g_arena);
}
EXPORT int cudaFree(void *p) { return g_driver.proc ? g_driver.free((uintptr_t)p) : release(p); }
EXPORT int cudaFreeAsync(void *p, void *stream) {
  return g_driver.proc ? g_driver.free_async((uintptr_t)p, stream) : release(p);
}
EXPORT int cudaFreeHost(void *p) { return g_driver.proc ? g_driver.free_host(p) : release(p); }
EXPORT int cudaGetDevice(int *device) {
  *device = 3; /* recorded as the allocations' device */
  return 0;
}
EXPORT int cudaRuntimeGetVersion(int *version) {
  *version = kRuntimeVersion;
  return 0;
}
/* The driver's function for `symbol` in the runtime's own CUDA version, or in the one asked. */
EXPORT int cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                   int *status) {
  if (!g_driver.proc) return 3; /* cudaErrorInitializationError */
  return g_driver.proc(symbol, fn, kRuntimeVersion, flags, status) == 0 ? 0 : 500;
}
EXPORT int cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                            unsigned long long flags, int *status) {
  if (!g_driver.proc) return 3;
  return g_driver.proc(symbol, fn, (int)version, flags, status) == 0 ? 0 : 500;
}
