// What the CUDA hooks share (cuda_hooks.cpp: the allocation hooks; cuda_lookups.cpp: the lookups
// that return hooks, cuGetProcAddress and cudaGetDriverEntryPoint, and dlsym's slow path;
// dlsym_trampoline.cpp: dlsym and dlvsym themselves).
//
// A hooked entry point is reached two ways:
//   - by its name: the program's import bound to adprof's exported definition, which finds its
//     real target itself (`Real`, cuda_hooks.cpp);
//   - through a lookup the program makes itself (dlsym on a dlopen'ed libcuda, cuGetProcAddress,
//     cudaGetDriverEntryPoint): the function the lookup found is swapped for one of the entry
//     point's looked-up hooks (`LookedUp`), whose target is that function. Each entry point has
//     kLookupSlots of them, each with its own target, so that two real functions of one ABI
//     (cuMemAllocAsync and its per-thread-stream twin cuMemAllocAsync_ptsz, or two drivers) each
//     keep theirs. A lookup that finds every slot taken by other functions returns the real
//     function unchanged: unrecorded, never wrong.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#define ADPROF_EXPORT extern "C" __attribute__((visibility("default")))
#define ADPROF_CALLER __builtin_return_address(0)

namespace adprof::preload::cuda {

// The ABI's plain types: no CUDA header is needed.
using CudaError = int;                   // cudaError_t; 0 is cudaSuccess
using CuResult = int;                    // CUresult; 0 is CUDA_SUCCESS
using Stream = void *;                   // cudaStream_t, CUstream
using MemPool = void *;                  // cudaMemPool_t, CUmemoryPool
using DevicePtr = unsigned long long;    // CUdeviceptr
constexpr int kCudaErrorNotFound = 500;  // what we return if the real function is missing

// The real entry point for a call from `caller`: the next definition after this library (a
// runtime the program links, or one loaded RTLD_GLOBAL), else the one the calling library binds
// to in its own dependencies. A runtime that came with a dlopen'ed library (adcore's CUDA
// plugin, PyTorch's CUDA extension) is loaded RTLD_LOCAL: RTLD_NEXT does not see it, but the
// caller's own scope does, and the caller's imports were bound to this library only because a
// preload comes first. Slow path (dlopen), once per entry point; a cudaMalloc is slow anyway.
inline void *resolve(const char *name, const void *caller, const void *hook) {
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

// An exported hook's body: its real target (missing: the error a missing symbol gives), then
// `body` (real, caller, arguments).
#define ADPROF_FORWARD(name, error, body, ...)   \
  static Real<decltype(&name)> real(#name);      \
  const auto f = real.get(ADPROF_CALLER, &name); \
  if (!f) return error;                          \
  return body(f, ADPROF_CALLER, __VA_ARGS__)

// Each hooked entry point is stated once, in a file's list LIST(X) that calls
// X(result, name, body, (parameters), (arguments)) per entry point (the last two usually from a
// signature macro); the list is expanded twice, by ADPROF_DEFINE_HOOK (the exported definition,
// whose missing target gives kCudaErrorNotFound) and by ADPROF_HOOK_ROW (its row in the table a
// lookup searches, `hooked` below).
#define ADPROF_DEFINE_HOOK(result, name, body, ...) \
  ADPROF_DEFINE_HOOK_(result, name, body, __VA_ARGS__)
#define ADPROF_DEFINE_HOOK_(result, name, body, parameters, arguments)                \
  ADPROF_EXPORT result name parameters {                                              \
    ADPROF_FORWARD(name, kCudaErrorNotFound, body, ADPROF_UNPARENTHESIZED arguments); \
  }
#define ADPROF_UNPARENTHESIZED(...) __VA_ARGS__
#define ADPROF_HOOK_ROW(result, name, body, ...) hooked<decltype(&name), body, &name>(#name),

constexpr int kLookupSlots = 4;

// The looked-up hooks of one entry point of type Fn, each calling Body(its target, its caller,
// the arguments). `Exported`: adprof's definition of the entry point's name.
template <typename Fn, auto Body, Fn Exported>
class LookedUp;
template <typename R, typename... A, R (*Body)(R (*)(A...), const void *, A...),
          R (*Exported)(A...)>
class LookedUp<R (*)(A...), Body, Exported> {
 public:
  using Fn = R (*)(A...);
  // The hook whose target is `real`: the slot that already holds it, else a free one; null when
  // every slot holds another function. The target is stored before the hook is handed out.
  static void *claim(void *real) {
    const Fn want = reinterpret_cast<Fn>(real);
    for (int i = 0; i < kLookupSlots; ++i) {
      Fn seen = nullptr;
      if (targets_[i].compare_exchange_strong(seen, want, std::memory_order_acq_rel) ||
          seen == want)
        return reinterpret_cast<void *>(hooks_[i]);
    }
    return nullptr;
  }
  // `f` is adprof's already (its exported definition, found where a lookup's scope includes the
  // preload library, or one of these hooks): nothing to swap.
  static bool is_ours(const void *f) {
    if (f == reinterpret_cast<const void *>(Exported)) return true;
    for (Fn h : hooks_)
      if (reinterpret_cast<const void *>(h) == f) return true;
    return false;
  }

 private:
  template <int S>
  static R hook(A... a) {
    return Body(targets_[S].load(std::memory_order_acquire), __builtin_return_address(0), a...);
  }
  static inline std::atomic<Fn> targets_[kLookupSlots];
  static constexpr Fn hooks_[kLookupSlots] = {&hook<0>, &hook<1>, &hook<2>, &hook<3>};
  static_assert(kLookupSlots == 4, "hooks_ lists one hook per slot");
};

// One hooked name, in a table a lookup searches (plain function pointers: the tables are
// constant-initialized, ready before any constructor runs).
struct Hooked {
  const char *name;
  void *(*claim)(void *real);
  bool (*is_ours)(const void *f);
};

// What a body of an entry point of type Fn is: R (*)(Fn real, const void *caller, A... arguments).
// Named as a parameter's type, a body template (one generic over the arguments after the size, say)
// gives the instance for Fn.
template <typename Fn>
struct BodyOf;
template <typename R, typename... A>
struct BodyOf<R (*)(A...)> {
  using type = R (*)(R (*)(A...), const void *, A...);
};

template <typename Fn, typename BodyOf<Fn>::type Body, Fn Exported>
constexpr Hooked hooked(const char *name) {
  return {name, &LookedUp<Fn, Body, Exported>::claim, &LookedUp<Fn, Body, Exported>::is_ours};
}

// `real` swapped for the hook of `name` in `table` (n entries), or `real` itself when `name` is
// not there, `real` is adprof's, or every slot holds another function.
inline void *swap_in(const Hooked *table, size_t n, const char *name, void *real) {
  for (size_t i = 0; i < n; ++i) {
    if (std::strcmp(table[i].name, name) != 0) continue;
    if (table[i].is_ours(real)) return real;
    void *hook = table[i].claim(real);
    return hook ? hook : real;
  }
  return real;
}

// The allocation hooks' swap (cuda_hooks.cpp), for their exact symbol names.
void *swap_allocation_hook(const char *name, void *real);

// `real` (the function a lookup found for `name`) or the hook that calls it, for every entry
// point adprof hooks (cuda_lookups.cpp). `cuda_version` >= 0: a cuGetProcAddress-style name
// without its ABI suffix ("cuMemAlloc"), whose ABI the version picks (cuMemAlloc_v2 from 3020
// on); -1: the exact symbol name (dlsym's).
void *substitute(const char *name, void *real, int cuda_version);

// The thread's depth of nested calls through adprof's CUDA hooks: the runtime's cudaMalloc
// calls the driver's cuMemAlloc_v2 through a pointer the runtime looked up, which is adprof's
// hook too. Only the outermost call records, so a block is recorded once, in the space and
// context of the call the program made.
extern thread_local int t_call_depth;
class NestedCall {
 public:
  NestedCall() { ++t_call_depth; }
  ~NestedCall() { --t_call_depth; }
  NestedCall(const NestedCall &) = delete;
  NestedCall &operator=(const NestedCall &) = delete;
  bool outermost() const { return t_call_depth == 1; }
};

}  // namespace adprof::preload::cuda

// dlsym's and dlvsym's slow path, for the trampolines (dlsym_trampoline.cpp): a name starting with
// "cu" and a handle other than RTLD_DEFAULT and RTLD_NEXT, whose lookup does not depend on the
// caller (cuda_lookups.cpp).
extern "C" void *adprof_dlsym_cuda(void *handle, const char *name);
extern "C" void *adprof_dlvsym_cuda(void *handle, const char *name, const char *version);
