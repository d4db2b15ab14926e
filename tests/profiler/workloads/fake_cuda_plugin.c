/* A plugin over the fake CUDA runtime (fake_cudart.c), loaded by fake_cuda.c with dlopen: device
 * memory as a program's library takes it, inside an op "device_work" with role input: raw
 * cudaMalloc, cudaMallocAsync, pinned host memory; then, after adprof_device_memory_is_reserve(),
 * a cudaMalloc that is an allocator's segment, with a block declared inside it. */
#include <stddef.h>

#include "adprof/context.h"

int cudaMalloc(void **out, size_t size);
int cudaMallocAsync(void **out, size_t size, void *stream);
int cudaMallocHost(void **out, size_t size);
int cudaHostAlloc(void **out, size_t size, unsigned flags);
int cudaFree(void *p);
int cudaFreeAsync(void *p, void *stream);
int cudaFreeHost(void *p);

__attribute__((visibility("default"))) int run_device_work(void) {
  void *raw = NULL, *async = NULL, *pinned = NULL, *pinned2 = NULL, *segment = NULL;
  int rc = 0;
  adprof_op_begin(adprof_name("device_work"), 1);
  adprof_role before = adprof_set_role(ADPROF_ROLE_INPUT);
  rc |= cudaMalloc(&raw, 1 << 20);
  rc |= cudaMallocAsync(&async, 5 << 20, NULL);
  rc |= cudaMallocHost(&pinned, 4 << 20);
  rc |= cudaHostAlloc(&pinned2, 6 << 20, 0);
  adprof_device_memory_is_reserve(); /* from here on, driver memory is an allocator's reserve */
  rc |= cudaMalloc(&segment, 2 << 20);
  if (segment) {
    adprof_track_alloc((char *)segment + 4096, 256 << 10, ADPROF_SPACE_DEVICE_BLOCK, 3);
    adprof_track_free((char *)segment + 4096, ADPROF_SPACE_DEVICE_BLOCK, 3);
  }
  rc |= cudaFree(segment);
  rc |= cudaFreeHost(pinned2);
  rc |= cudaFreeHost(pinned);
  rc |= cudaFreeAsync(async, NULL);
  rc |= cudaFree(raw); /* taken before the declaration, freed after it */
  adprof_set_role(before);
  adprof_op_end();
  return rc;
}
