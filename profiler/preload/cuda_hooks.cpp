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
// the outermost records. Each entry point is stated once, with its body and its signature, in
// ADPROF_ALLOCATION_HOOKS (the end of this file), which makes both ways.
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
// `Extra`: the arguments after the size (flags, pool, stream), passed on as they came.
// Runtime: the device is cudaGetDevice's.

template <typename... Extra>
CudaError rt_alloc(CudaError (*real)(void **, size_t, Extra...), const void *caller, void **out,
                   size_t size, Extra... extra) {
  NestedCall call;
  const CudaError rc = real(out, size, extra...);
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

template <typename... Extra>
CudaError rt_free(CudaError (*real)(void *, Extra...), const void *caller, void *p,
                  Extra... extra) {
  NestedCall call;
  note_free(call, p, device_space(), [real, caller] { return runtime_device(real, caller); });
  return real(p, extra...);
}

// Driver: the device is the current context's.

template <typename... Extra>
CuResult cu_alloc(CuResult (*real)(DevicePtr *, size_t, Extra...), const void *, DevicePtr *out,
                  size_t size, Extra... extra) {
  NestedCall call;
  const CuResult rc = real(out, size, extra...);
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

template <typename... Extra>
CuResult cu_free(CuResult (*real)(DevicePtr, Extra...), const void *, DevicePtr p, Extra... extra) {
  NestedCall call;
  note_free(call, as_ptr(p), device_space(), [real] { return driver_device(real); });
  return real(p, extra...);
}

// Pinned host memory, the runtime's and the driver's alike (CudaError and CuResult are both int):
// no device.

template <typename... Extra>
int pinned_alloc(int (*real)(void **, size_t, Extra...), const void *, void **out, size_t size,
                 Extra... extra) {
  NestedCall call;
  const int rc = real(out, size, extra...);
  if (rc == 0 && out) note_alloc(call, *out, size, ADPROF_SPACE_HOST_PINNED, [] { return 0u; });
  return rc;
}

int pinned_free(int (*real)(void *), const void *, void *p) {
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

// ---- the hooks, each stated once ---------------------------------------------------------------
// The signatures the entry points share, as ADPROF_DEFINE_HOOK takes them: `P` is the address
// type, void * for the runtime and pinned host memory, DevicePtr for the driver's device memory.
#define ADPROF_ALLOC(P) (P * out, size_t size), (out, size)
#define ADPROF_ALLOC_FLAGS(P) (P * out, size_t size, unsigned flags), (out, size, flags)
#define ADPROF_ALLOC_ASYNC(P) (P * out, size_t size, Stream stream), (out, size, stream)
#define ADPROF_ALLOC_FROM_POOL(P) \
  (P * out, size_t size, MemPool pool, Stream stream), (out, size, pool, stream)
#define ADPROF_FREE(P) (P p), (p)
#define ADPROF_FREE_ASYNC(P) (P p, Stream stream), (p, stream)

// Every hooked allocation entry point, the per-thread-default-stream twins (_ptsz) too: its
// result type, name, body and signature.
#define ADPROF_ALLOCATION_HOOKS(X)                                                         \
  X(CudaError, cudaMalloc, rt_alloc, ADPROF_ALLOC(void *))                                 \
  X(CudaError, cudaMallocAsync, rt_alloc, ADPROF_ALLOC_ASYNC(void *))                      \
  X(CudaError, cudaMallocAsync_ptsz, rt_alloc, ADPROF_ALLOC_ASYNC(void *))                 \
  X(CudaError, cudaMallocFromPoolAsync, rt_alloc, ADPROF_ALLOC_FROM_POOL(void *))          \
  X(CudaError, cudaMallocFromPoolAsync_ptsz, rt_alloc, ADPROF_ALLOC_FROM_POOL(void *))     \
  X(CudaError, cudaMallocManaged, rt_alloc, ADPROF_ALLOC_FLAGS(void *))                    \
  X(CudaError, cudaMallocPitch, rt_alloc_pitch,                                            \
    (void **out, size_t *pitch, size_t width, size_t height), (out, pitch, width, height)) \
  X(CudaError, cudaFree, rt_free, ADPROF_FREE(void *))                                     \
  X(CudaError, cudaFreeAsync, rt_free, ADPROF_FREE_ASYNC(void *))                          \
  X(CudaError, cudaFreeAsync_ptsz, rt_free, ADPROF_FREE_ASYNC(void *))                     \
  X(CudaError, cudaMallocHost, pinned_alloc, ADPROF_ALLOC(void *))                         \
  X(CudaError, cudaHostAlloc, pinned_alloc, ADPROF_ALLOC_FLAGS(void *))                    \
  X(CudaError, cudaFreeHost, pinned_free, ADPROF_FREE(void *))                             \
  X(CuResult, cuMemAlloc_v2, cu_alloc, ADPROF_ALLOC(DevicePtr))                            \
  X(CuResult, cuMemAllocManaged, cu_alloc, ADPROF_ALLOC_FLAGS(DevicePtr))                  \
  X(CuResult, cuMemAllocPitch_v2, cu_alloc_pitch,                                          \
    (DevicePtr * out, size_t * pitch, size_t width, size_t height, unsigned element_size), \
    (out, pitch, width, height, element_size))                                             \
  X(CuResult, cuMemAllocAsync, cu_alloc, ADPROF_ALLOC_ASYNC(DevicePtr))                    \
  X(CuResult, cuMemAllocAsync_ptsz, cu_alloc, ADPROF_ALLOC_ASYNC(DevicePtr))               \
  X(CuResult, cuMemAllocFromPoolAsync, cu_alloc, ADPROF_ALLOC_FROM_POOL(DevicePtr))        \
  X(CuResult, cuMemAllocFromPoolAsync_ptsz, cu_alloc, ADPROF_ALLOC_FROM_POOL(DevicePtr))   \
  X(CuResult, cuMemFree_v2, cu_free, ADPROF_FREE(DevicePtr))                               \
  X(CuResult, cuMemFreeAsync, cu_free, ADPROF_FREE_ASYNC(DevicePtr))                       \
  X(CuResult, cuMemFreeAsync_ptsz, cu_free, ADPROF_FREE_ASYNC(DevicePtr))                  \
  X(CuResult, cuMemAllocHost_v2, pinned_alloc, ADPROF_ALLOC(void *))                       \
  X(CuResult, cuMemHostAlloc, pinned_alloc, ADPROF_ALLOC_FLAGS(void *))                    \
  X(CuResult, cuMemFreeHost, pinned_free, ADPROF_FREE(void *))                             \
  X(CuResult, cuMemMap, cu_map,                                                            \
    (DevicePtr ptr, size_t size, size_t offset, unsigned long long handle,                 \
     unsigned long long flags),                                                            \
    (ptr, size, offset, handle, flags))                                                    \
  X(CuResult, cuMemUnmap, cu_unmap, (DevicePtr ptr, size_t size), (ptr, size))

// The exported definitions: each finds its real target, then runs its body.
ADPROF_ALLOCATION_HOOKS(ADPROF_DEFINE_HOOK)

namespace {
// The looked-up hooks.
constexpr Hooked kAllocationHooks[] = {ADPROF_ALLOCATION_HOOKS(ADPROF_HOOK_ROW)};
}  // namespace

void *adprof::preload::cuda::swap_allocation_hook(const char *name, void *real) {
  return swap_in(kAllocationHooks, std::size(kAllocationHooks), name, real);
}
