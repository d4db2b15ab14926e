// CUDA allocation hooks: cudaMalloc & co. and the driver's cuMemAlloc family, for programs that
// link the CUDA runtime shared (a statically linked runtime binds its calls internally, out of
// an interposer's reach). Device memory is recorded as DEVICE_RAW (pinned host memory as
// HOST_PINNED), stamped with the thread's op, phase and role like any malloc. A caching
// allocator that declares its segments with adprof_track_alloc(..., DEVICE_SEGMENT, ...) is
// counted once: the replay turns the raw block into the declared segment. An allocator that
// cannot declare its segments (PyTorch's, seen from Python) calls adprof_device_memory_is_reserve
// once: from then on device memory from the runtime or the driver is recorded as DEVICE_SEGMENT
// itself, since every byte of it is that allocator's reserve, and its blocks are declared apart.
//
// No CUDA header is needed: the hooks use the ABI's plain types, and resolve the real entry
// points with dlsym(RTLD_NEXT) on first use (a cudaMalloc is far from the hot path).
#include <dlfcn.h>

#include <atomic>

#include "recorder.h"

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))

using namespace adprof::preload;

namespace {

using CudaError = int;                   // cudaError_t; 0 is cudaSuccess
using CuResult = int;                    // CUresult; 0 is CUDA_SUCCESS
using Stream = void *;                   // cudaStream_t
using DevicePtr = unsigned long long;    // CUdeviceptr
constexpr int kCudaErrorNotFound = 500;  // what we return if the real function is missing

template <typename F>
F real(const char *name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// Set once by adprof_device_memory_is_reserve, never cleared: an allocation and its free must be
// recorded in the same space.
std::atomic<bool> g_device_memory_is_reserve{false};

adprof_space device_space() {
  return g_device_memory_is_reserve.load(std::memory_order_relaxed) ? ADPROF_SPACE_DEVICE_SEGMENT
                                                                    : ADPROF_SPACE_DEVICE_RAW;
}

uint32_t current_device() {
  static auto get = real<CudaError (*)(int *)>("cudaGetDevice");
  int device = 0;
  if (get && get(&device) != 0) device = 0;
  return static_cast<uint32_t>(device);
}

void note_alloc(const void *p, size_t size, adprof_space space) {
  ThreadState &ts = t_state;
  if (p && ts.guard == 0)
    record_alloc(ts, p, size, space, space == ADPROF_SPACE_HOST_PINNED ? 0 : current_device());
}

void note_free(const void *p, adprof_space space) {
  ThreadState &ts = t_state;
  if (p && ts.guard == 0)
    record_free(ts, p, space, 0, space == ADPROF_SPACE_HOST_PINNED ? 0 : current_device());
}

}  // namespace

ADPROF_EXPORT void adprof_device_memory_is_reserve(void) {
  g_device_memory_is_reserve.store(true, std::memory_order_relaxed);
}

ADPROF_EXPORT CudaError cudaMalloc(void **out, size_t size) {
  static auto f = real<CudaError (*)(void **, size_t)>("cudaMalloc");
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size);
  if (rc == 0 && out) note_alloc(*out, size, device_space());
  return rc;
}

ADPROF_EXPORT CudaError cudaMallocAsync(void **out, size_t size, Stream stream) {
  static auto f = real<CudaError (*)(void **, size_t, Stream)>("cudaMallocAsync");
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size, stream);
  if (rc == 0 && out) note_alloc(*out, size, device_space());
  return rc;
}

ADPROF_EXPORT CudaError cudaMallocManaged(void **out, size_t size, unsigned flags) {
  static auto f = real<CudaError (*)(void **, size_t, unsigned)>("cudaMallocManaged");
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size, flags);
  if (rc == 0 && out) note_alloc(*out, size, device_space());
  return rc;
}

ADPROF_EXPORT CudaError cudaFree(void *p) {
  static auto f = real<CudaError (*)(void *)>("cudaFree");
  if (!f) return kCudaErrorNotFound;
  note_free(p, device_space());
  return f(p);
}

ADPROF_EXPORT CudaError cudaFreeAsync(void *p, Stream stream) {
  static auto f = real<CudaError (*)(void *, Stream)>("cudaFreeAsync");
  if (!f) return kCudaErrorNotFound;
  note_free(p, device_space());
  return f(p, stream);
}

ADPROF_EXPORT CudaError cudaMallocHost(void **out, size_t size) {
  static auto f = real<CudaError (*)(void **, size_t)>("cudaMallocHost");
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size);
  if (rc == 0 && out) note_alloc(*out, size, ADPROF_SPACE_HOST_PINNED);
  return rc;
}

ADPROF_EXPORT CudaError cudaHostAlloc(void **out, size_t size, unsigned flags) {
  static auto f = real<CudaError (*)(void **, size_t, unsigned)>("cudaHostAlloc");
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size, flags);
  if (rc == 0 && out) note_alloc(*out, size, ADPROF_SPACE_HOST_PINNED);
  return rc;
}

ADPROF_EXPORT CudaError cudaFreeHost(void *p) {
  static auto f = real<CudaError (*)(void *)>("cudaFreeHost");
  if (!f) return kCudaErrorNotFound;
  note_free(p, ADPROF_SPACE_HOST_PINNED);
  return f(p);
}

ADPROF_EXPORT CuResult cuMemAlloc_v2(DevicePtr *out, size_t size) {
  static auto f = real<CuResult (*)(DevicePtr *, size_t)>("cuMemAlloc_v2");
  if (!f) return kCudaErrorNotFound;
  CuResult rc = f(out, size);
  if (rc == 0 && out) note_alloc(reinterpret_cast<void *>(*out), size, device_space());
  return rc;
}

ADPROF_EXPORT CuResult cuMemFree_v2(DevicePtr p) {
  static auto f = real<CuResult (*)(DevicePtr)>("cuMemFree_v2");
  if (!f) return kCudaErrorNotFound;
  note_free(reinterpret_cast<void *>(p), device_space());
  return f(p);
}
