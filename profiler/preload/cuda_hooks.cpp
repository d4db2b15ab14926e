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
// points on first use (a cudaMalloc is far from the hot path): dlsym(RTLD_NEXT), else the
// calling library's own scope (resolve(), below).
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

// The real entry point for a call from `caller`: the next definition after this library (a
// runtime the program links, or one loaded RTLD_GLOBAL), else the one the calling library binds
// to in its own dependencies. A runtime that came with a dlopen'ed library (adcore's CUDA
// plugin, PyTorch's CUDA extension) is loaded RTLD_LOCAL: RTLD_NEXT does not see it, but the
// caller's own scope does, and the caller's imports were bound to this library only because a
// preload comes first. Slow path (dlopen), once per entry point; a cudaMalloc is slow anyway.
void *resolve(const char *name, const void *caller, const void *hook) {
  if (void *f = dlsym(RTLD_NEXT, name)) return f;
  Dl_info info;
  if (!caller || !dladdr(caller, &info) || !info.dli_fname || !*info.dli_fname) return nullptr;
  void *library = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!library) return nullptr;
  void *f = dlsym(library, name);  // the library's own scope: itself, then its dependencies
  dlclose(library);
  return f == hook ? nullptr : f;
}

// One real entry point, found on first use (and looked for again while missing).
template <typename F>
class Real {
 public:
  constexpr explicit Real(const char *name) : name_(name) {}
  F get(const void *caller, F hook) {
    F f = fn_.load(std::memory_order_acquire);
    if (!f) {
      f = reinterpret_cast<F>(resolve(name_, caller, reinterpret_cast<const void *>(hook)));
      if (f) fn_.store(f, std::memory_order_release);
    }
    return f;
  }

 private:
  const char *name_;
  std::atomic<F> fn_{nullptr};
};

#define ADPROF_CALLER __builtin_return_address(0)

// Set once by adprof_device_memory_is_reserve, never cleared: an allocation and its free must be
// recorded in the same space.
std::atomic<bool> g_device_memory_is_reserve{false};

adprof_space device_space() {
  return g_device_memory_is_reserve.load(std::memory_order_relaxed) ? ADPROF_SPACE_DEVICE_SEGMENT
                                                                    : ADPROF_SPACE_DEVICE_RAW;
}

// cudaGetDevice from the runtime the caller uses (found as the caller's entry point was).
uint32_t current_device(const void *caller) {
  using GetDevice = CudaError (*)(int *);
  static Real<GetDevice> get("cudaGetDevice");
  const GetDevice f = get.get(caller, nullptr);
  int device = 0;
  if (f && f(&device) != 0) device = 0;
  return static_cast<uint32_t>(device);
}

void note_alloc(const void *p, size_t size, adprof_space space, const void *caller) {
  ThreadState &ts = t_state;
  if (p && ts.guard == 0)
    record_alloc(ts, p, size, space,
                 space == ADPROF_SPACE_HOST_PINNED ? 0 : current_device(caller));
}

void note_free(const void *p, adprof_space space, const void *caller) {
  ThreadState &ts = t_state;
  if (p && ts.guard == 0)
    record_free(ts, p, space, 0, space == ADPROF_SPACE_HOST_PINNED ? 0 : current_device(caller));
}

}  // namespace

ADPROF_EXPORT void adprof_device_memory_is_reserve(void) {
  g_device_memory_is_reserve.store(true, std::memory_order_relaxed);
}

ADPROF_EXPORT CudaError cudaMalloc(void **out, size_t size) {
  static Real<CudaError (*)(void **, size_t)> real("cudaMalloc");
  const auto f = real.get(ADPROF_CALLER, &cudaMalloc);
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size);
  if (rc == 0 && out) note_alloc(*out, size, device_space(), ADPROF_CALLER);
  return rc;
}

ADPROF_EXPORT CudaError cudaMallocAsync(void **out, size_t size, Stream stream) {
  static Real<CudaError (*)(void **, size_t, Stream)> real("cudaMallocAsync");
  const auto f = real.get(ADPROF_CALLER, &cudaMallocAsync);
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size, stream);
  if (rc == 0 && out) note_alloc(*out, size, device_space(), ADPROF_CALLER);
  return rc;
}

ADPROF_EXPORT CudaError cudaMallocManaged(void **out, size_t size, unsigned flags) {
  static Real<CudaError (*)(void **, size_t, unsigned)> real("cudaMallocManaged");
  const auto f = real.get(ADPROF_CALLER, &cudaMallocManaged);
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size, flags);
  if (rc == 0 && out) note_alloc(*out, size, device_space(), ADPROF_CALLER);
  return rc;
}

ADPROF_EXPORT CudaError cudaFree(void *p) {
  static Real<CudaError (*)(void *)> real("cudaFree");
  const auto f = real.get(ADPROF_CALLER, &cudaFree);
  if (!f) return kCudaErrorNotFound;
  note_free(p, device_space(), ADPROF_CALLER);
  return f(p);
}

ADPROF_EXPORT CudaError cudaFreeAsync(void *p, Stream stream) {
  static Real<CudaError (*)(void *, Stream)> real("cudaFreeAsync");
  const auto f = real.get(ADPROF_CALLER, &cudaFreeAsync);
  if (!f) return kCudaErrorNotFound;
  note_free(p, device_space(), ADPROF_CALLER);
  return f(p, stream);
}

ADPROF_EXPORT CudaError cudaMallocHost(void **out, size_t size) {
  static Real<CudaError (*)(void **, size_t)> real("cudaMallocHost");
  const auto f = real.get(ADPROF_CALLER, &cudaMallocHost);
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size);
  if (rc == 0 && out) note_alloc(*out, size, ADPROF_SPACE_HOST_PINNED, ADPROF_CALLER);
  return rc;
}

ADPROF_EXPORT CudaError cudaHostAlloc(void **out, size_t size, unsigned flags) {
  static Real<CudaError (*)(void **, size_t, unsigned)> real("cudaHostAlloc");
  const auto f = real.get(ADPROF_CALLER, &cudaHostAlloc);
  if (!f) return kCudaErrorNotFound;
  CudaError rc = f(out, size, flags);
  if (rc == 0 && out) note_alloc(*out, size, ADPROF_SPACE_HOST_PINNED, ADPROF_CALLER);
  return rc;
}

ADPROF_EXPORT CudaError cudaFreeHost(void *p) {
  static Real<CudaError (*)(void *)> real("cudaFreeHost");
  const auto f = real.get(ADPROF_CALLER, &cudaFreeHost);
  if (!f) return kCudaErrorNotFound;
  note_free(p, ADPROF_SPACE_HOST_PINNED, ADPROF_CALLER);
  return f(p);
}

ADPROF_EXPORT CuResult cuMemAlloc_v2(DevicePtr *out, size_t size) {
  static Real<CuResult (*)(DevicePtr *, size_t)> real("cuMemAlloc_v2");
  const auto f = real.get(ADPROF_CALLER, &cuMemAlloc_v2);
  if (!f) return kCudaErrorNotFound;
  CuResult rc = f(out, size);
  if (rc == 0 && out)
    note_alloc(reinterpret_cast<void *>(*out), size, device_space(), ADPROF_CALLER);
  return rc;
}

ADPROF_EXPORT CuResult cuMemFree_v2(DevicePtr p) {
  static Real<CuResult (*)(DevicePtr)> real("cuMemFree_v2");
  const auto f = real.get(ADPROF_CALLER, &cuMemFree_v2);
  if (!f) return kCudaErrorNotFound;
  note_free(reinterpret_cast<void *>(p), device_space(), ADPROF_CALLER);
  return f(p);
}
