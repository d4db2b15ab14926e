/* A stand-in for the CUDA runtime, for the CUDA hooks' tests on machines without one: the
 * entry points the interposer hooks, over a static arena ("device" memory is host memory here).
 * Only the plugin (fake_cuda_plugin.c) links it, so it is loaded RTLD_LOCAL, as the real
 * runtime is with adcore's CUDA plugin or PyTorch's CUDA extension. */
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

static unsigned char g_arena[64 << 20] __attribute__((aligned(4096)));
static size_t g_used;

static int take(void **out, size_t size) {
  size = (size + 4095) & ~(size_t)4095;
  if (!out || g_used + size > sizeof g_arena) return 2; /* cudaErrorMemoryAllocation */
  *out = g_arena + g_used;
  g_used += size;
  return 0;
}

EXPORT int cudaMalloc(void **out, size_t size) { return take(out, size); }
EXPORT int cudaMallocAsync(void **out, size_t size, void *stream) {
  (void)stream;
  return take(out, size);
}
EXPORT int cudaMallocHost(void **out, size_t size) { return take(out, size); }
EXPORT int cudaHostAlloc(void **out, size_t size, unsigned flags) {
  (void)flags;
  return take(out, size);
}
/* Frees call this, not each other: a call between exported functions would go through the
 * interposer's hooks again. */
static int release(void *p) {
  return p && ((unsigned char *)p < g_arena || (unsigned char *)p >= g_arena + sizeof g_arena);
}
EXPORT int cudaFree(void *p) { return release(p); }
EXPORT int cudaFreeAsync(void *p, void *stream) {
  (void)stream;
  return release(p);
}
EXPORT int cudaFreeHost(void *p) { return release(p); }
EXPORT int cudaGetDevice(int *device) {
  *device = 3; /* recorded as the allocations' device */
  return 0;
}
