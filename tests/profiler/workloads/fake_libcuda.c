/* A stand-in for the CUDA driver (libcuda.so.1), for the tests of entry points a program looks
 * up itself (cuda_lookups_test.cpp): never linked, only dlopen'ed RTLD_LOCAL, as XLA's stubs and
 * the CUDA runtime load the real one. The allocation family over a static arena ("device" and
 * pinned memory are host memory here), the current context's device (5), and cuGetProcAddress
 * in both ABIs, picking an entry point's ABI by the CUDA version asked for and its
 * per-thread-default-stream twin by the flags, as the driver does; and the virtual memory
 * management calls (cuMemCreate, cuMemAddressReserve, cuMemMap, ...). Frees check their pointer
 * and fail (1, CUDA_ERROR_INVALID_VALUE) outside the arena. Functions call helpers, not each
 * other: a call between exported functions would go through the interposer's hooks again. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef unsigned long long devptr;

static unsigned char g_arena[64 << 20] __attribute__((aligned(4096)));
static size_t g_used;

static int take(void **out, size_t size) {
  size = (size + 4095) & ~(size_t)4095;
  if (!out || g_used + size > sizeof g_arena) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  *out = g_arena + g_used;
  g_used += size;
  return 0;
}
static int take_dev(devptr *out, size_t size) {
  void *p = NULL;
  int rc = take(&p, size);
  if (rc == 0) *out = (devptr)(uintptr_t)p;
  return rc;
}
static int release(const void *p) {
  const unsigned char *c = p;
  return !(c >= g_arena && c < g_arena + sizeof g_arena);
}

EXPORT int cuMemAlloc_v2(devptr *out, size_t size) { return take_dev(out, size); }
/* The 32-bit ABI before CUDA 3.2: never hooked, returned as it is. */
EXPORT int cuMemAlloc(unsigned *out, unsigned size) {
  (void)size;
  *out = 0;
  return 0;
}
EXPORT int cuMemAllocManaged(devptr *out, size_t size, unsigned flags) {
  (void)flags;
  return take_dev(out, size);
}
EXPORT int cuMemAllocPitch_v2(devptr *out, size_t *pitch, size_t width, size_t height,
                              unsigned element) {
  (void)element;
  *pitch = (width + 511) & ~(size_t)511;
  return take_dev(out, *pitch * height);
}
EXPORT int cuMemAllocAsync(devptr *out, size_t size, void *stream) {
  (void)stream;
  return take_dev(out, size);
}
EXPORT int cuMemAllocAsync_ptsz(devptr *out, size_t size, void *stream) {
  (void)stream;
  return take_dev(out, size);
}
EXPORT int cuMemAllocFromPoolAsync(devptr *out, size_t size, void *pool, void *stream) {
  (void)pool, (void)stream;
  return take_dev(out, size);
}
EXPORT int cuMemAllocFromPoolAsync_ptsz(devptr *out, size_t size, void *pool, void *stream) {
  (void)pool, (void)stream;
  return take_dev(out, size);
}
EXPORT int cuMemAllocHost_v2(void **out, size_t size) { return take(out, size); }
EXPORT int cuMemHostAlloc(void **out, size_t size, unsigned flags) {
  (void)flags;
  return take(out, size);
}
EXPORT int cuMemFree_v2(devptr p) { return release((void *)(uintptr_t)p); }
EXPORT int cuMemFreeAsync(devptr p, void *stream) {
  (void)stream;
  return release((void *)(uintptr_t)p);
}
EXPORT int cuMemFreeAsync_ptsz(devptr p, void *stream) {
  (void)stream;
  return release((void *)(uintptr_t)p);
}
EXPORT int cuMemFreeHost(void *p) { return release(p); }
/* Virtual memory management: physical memory is a handle (its size; no backing here), an
 * address range is reserved from the arena, and mapping checks only that it lies there. */
EXPORT int cuMemCreate(unsigned long long *handle, size_t size, const void *prop,
                       unsigned long long flags) {
  (void)prop, (void)flags;
  *handle = size;
  return 0;
}
EXPORT int cuMemRelease(unsigned long long handle) { return handle == 0; }
EXPORT int cuMemAddressReserve(devptr *out, size_t size, size_t alignment, devptr addr,
                               unsigned long long flags) {
  (void)alignment, (void)addr, (void)flags;
  return take_dev(out, size);
}
EXPORT int cuMemAddressFree(devptr p, size_t size) {
  (void)size;
  return release((void *)(uintptr_t)p);
}
EXPORT int cuMemMap(devptr p, size_t size, size_t offset, unsigned long long handle,
                    unsigned long long flags) {
  (void)offset, (void)flags;
  return release((void *)(uintptr_t)p) || size > handle;
}
EXPORT int cuMemUnmap(devptr p, size_t size) {
  (void)size;
  return release((void *)(uintptr_t)p);
}
EXPORT int cuCtxGetDevice(int *device) {
  *device = 5; /* recorded as the driver allocations' device */
  return 0;
}

/* cuGetProcAddress: the symbol without its ABI suffix; cudaVersion picks the ABI; flags bit 1
 * (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) the _ptsz twin. */
struct entry {
  const char *name;
  void *legacy, *current, *ptds;
  int since; /* `current` from this CUDA version on */
};
static int proc_address_v1(const char *symbol, void **fn, int version, unsigned long long flags);
static int proc_address_v2(const char *symbol, void **fn, int version, unsigned long long flags,
                           int *status);
EXPORT int cuGetProcAddress(const char *symbol, void **fn, int version, unsigned long long flags) {
  return proc_address_v1(symbol, fn, version, flags);
}
EXPORT int cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags,
                               int *status) {
  return proc_address_v2(symbol, fn, version, flags, status);
}
static const struct entry kEntries[] = {
    {"cuMemAlloc", (void *)cuMemAlloc, (void *)cuMemAlloc_v2, NULL, 3020},
    {"cuMemFree", NULL, (void *)cuMemFree_v2, NULL, 3020},
    {"cuMemAllocManaged", NULL, (void *)cuMemAllocManaged, NULL, 0},
    {"cuMemAllocPitch", NULL, (void *)cuMemAllocPitch_v2, NULL, 3020},
    {"cuMemAllocAsync", NULL, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz, 0},
    {"cuMemAllocFromPoolAsync", NULL, (void *)cuMemAllocFromPoolAsync,
     (void *)cuMemAllocFromPoolAsync_ptsz, 0},
    {"cuMemFreeAsync", NULL, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz, 0},
    {"cuMemAllocHost", NULL, (void *)cuMemAllocHost_v2, NULL, 3020},
    {"cuMemHostAlloc", NULL, (void *)cuMemHostAlloc, NULL, 0},
    {"cuMemFreeHost", NULL, (void *)cuMemFreeHost, NULL, 0},
    {"cuCtxGetDevice", NULL, (void *)cuCtxGetDevice, NULL, 0},
    {"cuMemMap", NULL, (void *)cuMemMap, NULL, 0},
    {"cuMemUnmap", NULL, (void *)cuMemUnmap, NULL, 0},
    {"cuGetProcAddress", (void *)cuGetProcAddress, (void *)cuGetProcAddress_v2, NULL, 12000},
};
static int proc_address_v1(const char *symbol, void **fn, int version, unsigned long long flags) {
  *fn = NULL;
  for (size_t i = 0; i < sizeof kEntries / sizeof kEntries[0]; ++i) {
    const struct entry *e = &kEntries[i];
    if (strcmp(e->name, symbol) != 0) continue;
    *fn = version >= e->since ? ((flags & 2) && e->ptds ? e->ptds : e->current) : e->legacy;
    return *fn ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
  }
  return 500;
}
static int proc_address_v2(const char *symbol, void **fn, int version, unsigned long long flags,
                           int *status) {
  const int rc = proc_address_v1(symbol, fn, version, flags);
  if (status) *status = rc == 0 ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS, _SYMBOL_NOT_FOUND */
  return rc;
}
