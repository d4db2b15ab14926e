// CUDA allocation hooks: cudaMalloc & co. and the driver's cuMemAlloc family, for programs that
// link the CUDA runtime shared (a statically linked runtime binds its calls internally, out of
// an interposer's reach, but fetches the driver's functions through cuGetProcAddress, which
// cuda_lookups.cpp covers). Device memory is recorded as DEVICE_RAW (pinned host memory as
// HOST_PINNED), stamped with the thread's op, phase and role like any malloc. A caching
// allocator that declares its segments with adprof_track_alloc(..., DEVICE_SEGMENT, ...) is
// counted once: the replay turns the raw block into the declared segment. An allocator that
// cannot declare its segments (PyTorch's, seen from Python) calls adprof_device_memory_is_reserve
// once: from then on device memory from the runtime or the driver is recorded as DEVICE_SEGMENT
// itself, since every byte of it is that allocator's reserve, and its blocks are declared apart.
//
// Each entry point is a body (what a call records, given the real function) reached two ways
// (cuda_hooks.h): by its exported name, resolving its real target on first use (a cudaMalloc
// is far from the hot path: dlsym(RTLD_NEXT), else the calling library's own scope, resolve()
// below); or through a looked-up hook, whose target is the function a lookup found. Calls nest
// (the runtime's cudaMalloc calls the driver's cuMemAlloc_v2 through a looked-up hook): only
// the outermost records.
//
// No CUDA header is needed: the hooks use the ABI's plain types.
#include "cuda_hooks.h"

#include <atomic>

#include "device_mappings.h"
#include "elf_symbols.h"
#include "recorder.h"

using namespace adprof::preload;
using namespace adprof::preload::cuda;

thread_local int adprof::preload::cuda::t_call_depth = 0;

namespace {

// Set once by adprof_device_memory_is_reserve, never cleared: an allocation and its free must be
// recorded in the same space.
std::atomic<bool> g_device_memory_is_reserve{false};

adprof_space device_space() {
  return g_device_memory_is_reserve.load(std::memory_order_relaxed) ? ADPROF_SPACE_DEVICE_SEGMENT
                                                                    : ADPROF_SPACE_DEVICE_RAW;
}

// cudaGetDevice from the runtime that defines `runtime_fn` (found in its symbol table: a runtime
// loaded RTLD_LOCAL and reached through a lookup is in no scope the caller sees), else from the
// one the caller uses (found as the caller's entry point was).
uint32_t runtime_device_at(const void *runtime_fn, const void *caller) {
  using GetDevice = CudaError (*)(int *);
  static std::atomic<GetDevice> found{nullptr};
  static Real<GetDevice> get("cudaGetDevice");
  GetDevice f = found.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<GetDevice>(symbol_of_object_at(runtime_fn, "cudaGetDevice"));
    if (f)
      found.store(f, std::memory_order_release);
    else
      f = get.get(caller, nullptr);
  }
  int device = 0;
  if (f && f(&device) != 0) device = 0;
  return static_cast<uint32_t>(device);
}

template <typename F>
uint32_t runtime_device(F runtime_fn, const void *caller) {
  return runtime_device_at(reinterpret_cast<const void *>(runtime_fn), caller);
}

// The device of the current context, from the driver that defines `driver_fn`: its
// cuCtxGetDevice, found in that library's symbol table (no dlsym: a failed lookup would leave
// an error for the program's next dlerror()). Asking the runtime instead could initialize it
// in a program that only uses the driver. 0 without a current context.
uint32_t driver_device_at(const void *driver_fn) {
  using CtxGetDevice = CuResult (*)(int *);
  static std::atomic<CtxGetDevice> get{nullptr};
  CtxGetDevice f = get.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<CtxGetDevice>(symbol_of_object_at(driver_fn, "cuCtxGetDevice"));
    if (!f) return 0;
    get.store(f, std::memory_order_release);
  }
  int device = 0;
  if (f(&device) != 0) device = 0;
  return static_cast<uint32_t>(device);
}

template <typename F>
uint32_t driver_device(F driver_fn) {
  return driver_device_at(reinterpret_cast<const void *>(driver_fn));
}

// Records a block the outermost call obtained; `device` is asked only then.
template <typename Device>
void note_alloc(const NestedCall &call, const void *p, size_t size, adprof_space space,
                Device device) {
  ThreadState &ts = t_state;
  if (p && call.outermost() && ts.guard == 0)
    record_alloc(ts, p, size, space, space == ADPROF_SPACE_HOST_PINNED ? 0 : device());
}

template <typename Device>
void note_free(const NestedCall &call, const void *p, adprof_space space, Device device) {
  ThreadState &ts = t_state;
  if (p && call.outermost() && ts.guard == 0)
    record_free(ts, p, space, 0, space == ADPROF_SPACE_HOST_PINNED ? 0 : device());
}

void *as_ptr(DevicePtr p) { return reinterpret_cast<void *>(static_cast<uintptr_t>(p)); }

// ---- bodies: the real call and what it records ------------------------------------------------
// Runtime: the device is cudaGetDevice's.

template <adprof_space (*Space)()>
CudaError rt_alloc(CudaError (*real)(void **, size_t), const void *caller, void **out,
                   size_t size) {
  NestedCall call;
  const CudaError rc = real(out, size);
  if (rc == 0 && out)
    note_alloc(call, *out, size, Space(), [real, caller] { return runtime_device(real, caller); });
  return rc;
}

template <adprof_space (*Space)()>
CudaError rt_alloc_flags(CudaError (*real)(void **, size_t, unsigned), const void *caller,
                         void **out, size_t size, unsigned flags) {
  NestedCall call;
  const CudaError rc = real(out, size, flags);
  if (rc == 0 && out)
    note_alloc(call, *out, size, Space(), [real, caller] { return runtime_device(real, caller); });
  return rc;
}

CudaError rt_alloc_async(CudaError (*real)(void **, size_t, Stream), const void *caller, void **out,
                         size_t size, Stream stream) {
  NestedCall call;
  const CudaError rc = real(out, size, stream);
  if (rc == 0 && out)
    note_alloc(call, *out, size, device_space(),
               [real, caller] { return runtime_device(real, caller); });
  return rc;
}

CudaError rt_alloc_from_pool(CudaError (*real)(void **, size_t, MemPool, Stream),
                             const void *caller, void **out, size_t size, MemPool pool,
                             Stream stream) {
  NestedCall call;
  const CudaError rc = real(out, size, pool, stream);
  if (rc == 0 && out)
    note_alloc(call, *out, size, device_space(),
               [real, caller] { return runtime_device(real, caller); });
  return rc;
}

// The pitch times the rows: the bytes the runtime set aside.
CudaError rt_alloc_pitch(CudaError (*real)(void **, size_t *, size_t, size_t), const void *caller,
                         void **out, size_t *pitch, size_t width, size_t height) {
  NestedCall call;
  const CudaError rc = real(out, pitch, width, height);
  if (rc == 0 && out && pitch)
    note_alloc(call, *out, *pitch * height, device_space(),
               [real, caller] { return runtime_device(real, caller); });
  return rc;
}

template <adprof_space (*Space)()>
CudaError rt_free(CudaError (*real)(void *), const void *caller, void *p) {
  NestedCall call;
  note_free(call, p, Space(), [real, caller] { return runtime_device(real, caller); });
  return real(p);
}

CudaError rt_free_async(CudaError (*real)(void *, Stream), const void *caller, void *p,
                        Stream stream) {
  NestedCall call;
  note_free(call, p, device_space(), [real, caller] { return runtime_device(real, caller); });
  return real(p, stream);
}

adprof_space pinned() { return ADPROF_SPACE_HOST_PINNED; }

// Driver: the device is the current context's.

CuResult cu_alloc(CuResult (*real)(DevicePtr *, size_t), const void *, DevicePtr *out,
                  size_t size) {
  NestedCall call;
  const CuResult rc = real(out, size);
  if (rc == 0 && out)
    note_alloc(call, as_ptr(*out), size, device_space(), [real] { return driver_device(real); });
  return rc;
}

CuResult cu_alloc_flags(CuResult (*real)(DevicePtr *, size_t, unsigned), const void *,
                        DevicePtr *out, size_t size, unsigned flags) {
  NestedCall call;
  const CuResult rc = real(out, size, flags);
  if (rc == 0 && out)
    note_alloc(call, as_ptr(*out), size, device_space(), [real] { return driver_device(real); });
  return rc;
}

CuResult cu_alloc_async(CuResult (*real)(DevicePtr *, size_t, Stream), const void *, DevicePtr *out,
                        size_t size, Stream stream) {
  NestedCall call;
  const CuResult rc = real(out, size, stream);
  if (rc == 0 && out)
    note_alloc(call, as_ptr(*out), size, device_space(), [real] { return driver_device(real); });
  return rc;
}

CuResult cu_alloc_from_pool(CuResult (*real)(DevicePtr *, size_t, MemPool, Stream), const void *,
                            DevicePtr *out, size_t size, MemPool pool, Stream stream) {
  NestedCall call;
  const CuResult rc = real(out, size, pool, stream);
  if (rc == 0 && out)
    note_alloc(call, as_ptr(*out), size, device_space(), [real] { return driver_device(real); });
  return rc;
}

CuResult cu_alloc_pitch(CuResult (*real)(DevicePtr *, size_t *, size_t, size_t, unsigned),
                        const void *, DevicePtr *out, size_t *pitch, size_t width, size_t height,
                        unsigned element_size) {
  NestedCall call;
  const CuResult rc = real(out, pitch, width, height, element_size);
  if (rc == 0 && out && pitch)
    note_alloc(call, as_ptr(*out), *pitch * height, device_space(),
               [real] { return driver_device(real); });
  return rc;
}

CuResult cu_alloc_host(CuResult (*real)(void **, size_t), const void *, void **out, size_t size) {
  NestedCall call;
  const CuResult rc = real(out, size);
  if (rc == 0 && out) note_alloc(call, *out, size, ADPROF_SPACE_HOST_PINNED, [] { return 0u; });
  return rc;
}

CuResult cu_host_alloc(CuResult (*real)(void **, size_t, unsigned), const void *, void **out,
                       size_t size, unsigned flags) {
  NestedCall call;
  const CuResult rc = real(out, size, flags);
  if (rc == 0 && out) note_alloc(call, *out, size, ADPROF_SPACE_HOST_PINNED, [] { return 0u; });
  return rc;
}

CuResult cu_free(CuResult (*real)(DevicePtr), const void *, DevicePtr p) {
  NestedCall call;
  note_free(call, as_ptr(p), device_space(), [real] { return driver_device(real); });
  return real(p);
}

CuResult cu_free_async(CuResult (*real)(DevicePtr, Stream), const void *, DevicePtr p,
                       Stream stream) {
  NestedCall call;
  note_free(call, as_ptr(p), device_space(), [real] { return driver_device(real); });
  return real(p, stream);
}

CuResult cu_free_host(CuResult (*real)(void *), const void *, void *p) {
  NestedCall call;
  note_free(call, p, ADPROF_SPACE_HOST_PINNED, [] { return 0u; });
  return real(p);
}

// Virtual memory management: cuMemCreate makes physical memory (a handle, no address) and
// cuMemMap makes it addressable. The bytes are recorded where they are mapped, as a block of the
// mapped range; cuMemUnmap frees every mapping in its range.
DeviceMappings g_mappings;

CuResult cu_map(CuResult (*real)(DevicePtr, size_t, size_t, unsigned long long, unsigned long long),
                const void *, DevicePtr ptr, size_t size, size_t offset, unsigned long long handle,
                unsigned long long flags) {
  NestedCall call;
  const CuResult rc = real(ptr, size, offset, handle, flags);
  ThreadState &ts = t_state;
  if (rc != 0 || !ptr || !call.outermost() || ts.guard != 0) return rc;
  ++ts.guard;  // the table's first mmap is the profiler's
  const bool added = g_mappings.add(ptr);
  --ts.guard;
  if (added) record_alloc(ts, as_ptr(ptr), size, device_space(), driver_device(real));
  return rc;
}

CuResult cu_unmap(CuResult (*real)(DevicePtr, size_t), const void *, DevicePtr ptr, size_t size) {
  NestedCall call;
  ThreadState &ts = t_state;
  if (call.outermost() && ts.guard == 0) {
    const adprof_space space = device_space();
    const uint32_t device = driver_device(real);
    g_mappings.remove_in(ptr, size,
                         [&](uint64_t start) { record_free(ts, as_ptr(start), space, 0, device); });
  }
  return real(ptr, size);
}

}  // namespace

ADPROF_EXPORT void adprof_device_memory_is_reserve(void) {
  g_device_memory_is_reserve.store(true, std::memory_order_relaxed);
}

// ---- the exported hooks -----------------------------------------------------------------------
// Each: its real target, then the body. A missing target (no such library) is an error as the
// runtime would give for a missing symbol.

ADPROF_EXPORT CudaError cudaMalloc(void **out, size_t size) {
  ADPROF_FORWARD(cudaMalloc, kCudaErrorNotFound, rt_alloc<device_space>, out, size);
}
ADPROF_EXPORT CudaError cudaMallocAsync(void **out, size_t size, Stream stream) {
  ADPROF_FORWARD(cudaMallocAsync, kCudaErrorNotFound, rt_alloc_async, out, size, stream);
}
ADPROF_EXPORT CudaError cudaMallocAsync_ptsz(void **out, size_t size, Stream stream) {
  ADPROF_FORWARD(cudaMallocAsync_ptsz, kCudaErrorNotFound, rt_alloc_async, out, size, stream);
}
ADPROF_EXPORT CudaError cudaMallocFromPoolAsync(void **out, size_t size, MemPool pool,
                                                Stream stream) {
  ADPROF_FORWARD(cudaMallocFromPoolAsync, kCudaErrorNotFound, rt_alloc_from_pool, out, size, pool,
                 stream);
}
ADPROF_EXPORT CudaError cudaMallocFromPoolAsync_ptsz(void **out, size_t size, MemPool pool,
                                                     Stream stream) {
  ADPROF_FORWARD(cudaMallocFromPoolAsync_ptsz, kCudaErrorNotFound, rt_alloc_from_pool, out, size,
                 pool, stream);
}
ADPROF_EXPORT CudaError cudaMallocManaged(void **out, size_t size, unsigned flags) {
  ADPROF_FORWARD(cudaMallocManaged, kCudaErrorNotFound, rt_alloc_flags<device_space>, out, size,
                 flags);
}
ADPROF_EXPORT CudaError cudaMallocPitch(void **out, size_t *pitch, size_t width, size_t height) {
  ADPROF_FORWARD(cudaMallocPitch, kCudaErrorNotFound, rt_alloc_pitch, out, pitch, width, height);
}
ADPROF_EXPORT CudaError cudaFree(void *p) {
  ADPROF_FORWARD(cudaFree, kCudaErrorNotFound, rt_free<device_space>, p);
}
ADPROF_EXPORT CudaError cudaFreeAsync(void *p, Stream stream) {
  ADPROF_FORWARD(cudaFreeAsync, kCudaErrorNotFound, rt_free_async, p, stream);
}
ADPROF_EXPORT CudaError cudaFreeAsync_ptsz(void *p, Stream stream) {
  ADPROF_FORWARD(cudaFreeAsync_ptsz, kCudaErrorNotFound, rt_free_async, p, stream);
}
ADPROF_EXPORT CudaError cudaMallocHost(void **out, size_t size) {
  ADPROF_FORWARD(cudaMallocHost, kCudaErrorNotFound, rt_alloc<pinned>, out, size);
}
ADPROF_EXPORT CudaError cudaHostAlloc(void **out, size_t size, unsigned flags) {
  ADPROF_FORWARD(cudaHostAlloc, kCudaErrorNotFound, rt_alloc_flags<pinned>, out, size, flags);
}
ADPROF_EXPORT CudaError cudaFreeHost(void *p) {
  ADPROF_FORWARD(cudaFreeHost, kCudaErrorNotFound, rt_free<pinned>, p);
}

ADPROF_EXPORT CuResult cuMemAlloc_v2(DevicePtr *out, size_t size) {
  ADPROF_FORWARD(cuMemAlloc_v2, kCudaErrorNotFound, cu_alloc, out, size);
}
ADPROF_EXPORT CuResult cuMemAllocManaged(DevicePtr *out, size_t size, unsigned flags) {
  ADPROF_FORWARD(cuMemAllocManaged, kCudaErrorNotFound, cu_alloc_flags, out, size, flags);
}
ADPROF_EXPORT CuResult cuMemAllocPitch_v2(DevicePtr *out, size_t *pitch, size_t width,
                                          size_t height, unsigned element_size) {
  ADPROF_FORWARD(cuMemAllocPitch_v2, kCudaErrorNotFound, cu_alloc_pitch, out, pitch, width, height,
                 element_size);
}
ADPROF_EXPORT CuResult cuMemAllocAsync(DevicePtr *out, size_t size, Stream stream) {
  ADPROF_FORWARD(cuMemAllocAsync, kCudaErrorNotFound, cu_alloc_async, out, size, stream);
}
ADPROF_EXPORT CuResult cuMemAllocAsync_ptsz(DevicePtr *out, size_t size, Stream stream) {
  ADPROF_FORWARD(cuMemAllocAsync_ptsz, kCudaErrorNotFound, cu_alloc_async, out, size, stream);
}
ADPROF_EXPORT CuResult cuMemAllocFromPoolAsync(DevicePtr *out, size_t size, MemPool pool,
                                               Stream stream) {
  ADPROF_FORWARD(cuMemAllocFromPoolAsync, kCudaErrorNotFound, cu_alloc_from_pool, out, size, pool,
                 stream);
}
ADPROF_EXPORT CuResult cuMemAllocFromPoolAsync_ptsz(DevicePtr *out, size_t size, MemPool pool,
                                                    Stream stream) {
  ADPROF_FORWARD(cuMemAllocFromPoolAsync_ptsz, kCudaErrorNotFound, cu_alloc_from_pool, out, size,
                 pool, stream);
}
ADPROF_EXPORT CuResult cuMemFree_v2(DevicePtr p) {
  ADPROF_FORWARD(cuMemFree_v2, kCudaErrorNotFound, cu_free, p);
}
ADPROF_EXPORT CuResult cuMemFreeAsync(DevicePtr p, Stream stream) {
  ADPROF_FORWARD(cuMemFreeAsync, kCudaErrorNotFound, cu_free_async, p, stream);
}
ADPROF_EXPORT CuResult cuMemFreeAsync_ptsz(DevicePtr p, Stream stream) {
  ADPROF_FORWARD(cuMemFreeAsync_ptsz, kCudaErrorNotFound, cu_free_async, p, stream);
}
ADPROF_EXPORT CuResult cuMemAllocHost_v2(void **out, size_t size) {
  ADPROF_FORWARD(cuMemAllocHost_v2, kCudaErrorNotFound, cu_alloc_host, out, size);
}
ADPROF_EXPORT CuResult cuMemHostAlloc(void **out, size_t size, unsigned flags) {
  ADPROF_FORWARD(cuMemHostAlloc, kCudaErrorNotFound, cu_host_alloc, out, size, flags);
}
ADPROF_EXPORT CuResult cuMemFreeHost(void *p) {
  ADPROF_FORWARD(cuMemFreeHost, kCudaErrorNotFound, cu_free_host, p);
}
ADPROF_EXPORT CuResult cuMemMap(DevicePtr ptr, size_t size, size_t offset,
                                unsigned long long handle, unsigned long long flags) {
  ADPROF_FORWARD(cuMemMap, kCudaErrorNotFound, cu_map, ptr, size, offset, handle, flags);
}
ADPROF_EXPORT CuResult cuMemUnmap(DevicePtr ptr, size_t size) {
  ADPROF_FORWARD(cuMemUnmap, kCudaErrorNotFound, cu_unmap, ptr, size);
}

// ---- the looked-up hooks ----------------------------------------------------------------------

namespace {

// Every name a lookup may ask for: the per-thread-default-stream twins (_ptsz) too.
#define ADPROF_HOOKED(name, body) hooked<decltype(&name), body, &name>(#name)

constexpr Hooked kAllocationHooks[] = {
    ADPROF_HOOKED(cudaMalloc, rt_alloc<device_space>),
    ADPROF_HOOKED(cudaMallocAsync, rt_alloc_async),
    ADPROF_HOOKED(cudaMallocAsync_ptsz, rt_alloc_async),
    ADPROF_HOOKED(cudaMallocFromPoolAsync, rt_alloc_from_pool),
    ADPROF_HOOKED(cudaMallocFromPoolAsync_ptsz, rt_alloc_from_pool),
    ADPROF_HOOKED(cudaMallocManaged, rt_alloc_flags<device_space>),
    ADPROF_HOOKED(cudaMallocPitch, rt_alloc_pitch),
    ADPROF_HOOKED(cudaFree, rt_free<device_space>),
    ADPROF_HOOKED(cudaFreeAsync, rt_free_async),
    ADPROF_HOOKED(cudaFreeAsync_ptsz, rt_free_async),
    ADPROF_HOOKED(cudaMallocHost, rt_alloc<pinned>),
    ADPROF_HOOKED(cudaHostAlloc, rt_alloc_flags<pinned>),
    ADPROF_HOOKED(cudaFreeHost, rt_free<pinned>),
    ADPROF_HOOKED(cuMemAlloc_v2, cu_alloc),
    ADPROF_HOOKED(cuMemAllocManaged, cu_alloc_flags),
    ADPROF_HOOKED(cuMemAllocPitch_v2, cu_alloc_pitch),
    ADPROF_HOOKED(cuMemAllocAsync, cu_alloc_async),
    ADPROF_HOOKED(cuMemAllocAsync_ptsz, cu_alloc_async),
    ADPROF_HOOKED(cuMemAllocFromPoolAsync, cu_alloc_from_pool),
    ADPROF_HOOKED(cuMemAllocFromPoolAsync_ptsz, cu_alloc_from_pool),
    ADPROF_HOOKED(cuMemFree_v2, cu_free),
    ADPROF_HOOKED(cuMemFreeAsync, cu_free_async),
    ADPROF_HOOKED(cuMemFreeAsync_ptsz, cu_free_async),
    ADPROF_HOOKED(cuMemAllocHost_v2, cu_alloc_host),
    ADPROF_HOOKED(cuMemHostAlloc, cu_host_alloc),
    ADPROF_HOOKED(cuMemFreeHost, cu_free_host),
    ADPROF_HOOKED(cuMemMap, cu_map),
    ADPROF_HOOKED(cuMemUnmap, cu_unmap),
};

#undef ADPROF_HOOKED

}  // namespace

void *adprof::preload::cuda::swap_allocation_hook(const char *name, void *real) {
  return swap_in(kAllocationHooks, std::size(kAllocationHooks), name, real);
}
