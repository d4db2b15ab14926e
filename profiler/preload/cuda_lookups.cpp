// CUDA entry points a program looks up itself, answered with adprof's hooks (cuda_hooks.h):
//   - dlsym/dlvsym on a library's handle: XLA (JAX, TensorFlow) reaches the driver and the
//     runtime through stubs that dlopen libcuda.so.1 / libcudart.so and dlsym each entry point;
//     dlsym(handle, name) searches that library's scope, never the preload's definitions. The
//     trampolines (dlsym_trampoline.cpp) send a name starting with "cu" with a real handle here;
//   - cuGetProcAddress / cuGetProcAddress_v2: how the CUDA runtime (11.3+) fetches every driver
//     function, a statically linked runtime (cuBLAS's, ...) included;
//   - cudaGetDriverEntryPoint / cudaGetDriverEntryPointByVersion: PyTorch's c10 DriverAPI, NCCL.
// Each calls the real lookup, then swaps the function it found for the hook of that entry point
// whose target is that function: the program gets the same behaviour, through adprof.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda_hooks.h"
#include "elf_symbols.h"

using namespace adprof::preload;
using namespace adprof::preload::cuda;

// glibc's dlsym and dlvsym, for the trampolines (set once, by adprof_resolve_dl).
extern "C" {
__attribute__((visibility("hidden"))) void *adprof_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void *adprof_real_dlvsym = nullptr;

// Finds them in libc's own symbol table: a lookup by name would find adprof's definitions first.
// glibc 2.34 moved them into libc (both versions, one function); before, libdl had them.
ADPROF_UNINSTRUMENTED static void *glibc_function(const char *name) {
  void *f = symbol_of_library("libc.so.6", name, "GLIBC_2.34");
  if (!f) f = symbol_of_library("libc.so.6", name, "GLIBC_2.2.5");
  if (!f) f = symbol_of_library("libdl.so.2", name, "GLIBC_2.2.5");
  return f;
}

ADPROF_UNINSTRUMENTED __attribute__((visibility("hidden"))) void adprof_resolve_dl(void) {
  void *s = glibc_function("dlsym"), *v = glibc_function("dlvsym");
  if (!s || !v) {
    // Without them no dlsym can be answered; nothing sensible can go on.
    static const char msg[] = "adprof: glibc's dlsym and dlvsym not found in libc.so.6\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  __atomic_store_n(&adprof_real_dlsym, s, __ATOMIC_RELEASE);
  __atomic_store_n(&adprof_real_dlvsym, v, __ATOMIC_RELEASE);
}
}

namespace {

using Dlsym = void *(*)(void *, const char *);
using Dlvsym = void *(*)(void *, const char *, const char *);

template <typename F>
F real_dl(void *const &slot) {
  void *f = __atomic_load_n(&slot, __ATOMIC_ACQUIRE);
  if (!f) {
    adprof_resolve_dl();
    f = __atomic_load_n(&slot, __ATOMIC_ACQUIRE);
  }
  return reinterpret_cast<F>(f);
}

// ---- cuGetProcAddress and cudaGetDriverEntryPoint ----------------------------------------------

using EntryPoint = CudaError (*)(const char *, void **, unsigned long long, int *);
using EntryPointByVersion = CudaError (*)(const char *, void **, unsigned, unsigned long long,
                                          int *);

// `Status`: cuGetProcAddress_v2's last argument, passed on.
template <typename... Status>
CuResult proc_address(CuResult (*real)(const char *, void **, int, uint64_t, Status...),
                      const void *, const char *symbol, void **fn, int version, uint64_t flags,
                      Status... status) {
  const CuResult rc = real(symbol, fn, version, flags, status...);
  if (rc == 0 && symbol && fn && *fn) *fn = substitute(symbol, *fn, version);
  return rc;
}

// cudaGetDriverEntryPoint gives the ABI of the runtime's own CUDA version: asked of the runtime
// that defines `real` (cudaRuntimeGetVersion initializes nothing).
int runtime_version(const void *real) {
  using Version = CudaError (*)(int *);
  auto f = reinterpret_cast<Version>(symbol_of_object_at(real, "cudaRuntimeGetVersion"));
  int version = -1;
  if (!f || f(&version) != 0) return -1;
  return version;
}

CudaError entry_point(EntryPoint real, const void *, const char *symbol, void **fn,
                      unsigned long long flags, int *status) {
  const CudaError rc = real(symbol, fn, flags, status);
  if (rc == 0 && symbol && fn && *fn) {
    // Without the runtime's version the ABI is unknown: the function stays unhooked.
    const int version = runtime_version(reinterpret_cast<const void *>(real));
    if (version >= 0) *fn = substitute(symbol, *fn, version);
  }
  return rc;
}

CudaError entry_point_by_version(EntryPointByVersion real, const void *, const char *symbol,
                                 void **fn, unsigned version, unsigned long long flags,
                                 int *status) {
  const CudaError rc = real(symbol, fn, version, flags, status);
  if (rc == 0 && symbol && fn && *fn) *fn = substitute(symbol, *fn, static_cast<int>(version));
  return rc;
}

}  // namespace

// Exported under the names a program or library imports (a program linking libcuda directly).
// Every argument is passed on as received: cudaGetDriverEntryPoint's fourth (CUDA 12) reaches an
// older runtime as the unused register it would have been without adprof.
#define ADPROF_LOOKUP_HOOKS(X)                                                                  \
  X(CuResult, cuGetProcAddress, proc_address,                                                   \
    (const char *symbol, void **fn, int version, uint64_t flags), (symbol, fn, version, flags)) \
  X(CuResult, cuGetProcAddress_v2, proc_address,                                                \
    (const char *symbol, void **fn, int version, uint64_t flags, int *status),                  \
    (symbol, fn, version, flags, status))                                                       \
  X(CudaError, cudaGetDriverEntryPoint, entry_point,                                            \
    (const char *symbol, void **fn, unsigned long long flags, int *status),                     \
    (symbol, fn, flags, status))                                                                \
  X(CudaError, cudaGetDriverEntryPointByVersion, entry_point_by_version,                        \
    (const char *symbol, void **fn, unsigned version, unsigned long long flags, int *status),   \
    (symbol, fn, version, flags, status))

ADPROF_LOOKUP_HOOKS(ADPROF_DEFINE_HOOK)

namespace {

constexpr Hooked kLookupHooks[] = {ADPROF_LOOKUP_HOOKS(ADPROF_HOOK_ROW)};

// Driver names whose ABI changed, as cuGetProcAddress names them (without the suffix): from
// `since` on, the symbol is `abi`; before, the name itself (an older ABI adprof does not hook:
// cuMemAlloc's 32-bit one before CUDA 3.2, cuGetProcAddress's without a status before 12.0).
struct Versioned {
  const char *name;
  const char *abi;
  int since;
};
constexpr Versioned kVersioned[] = {
    {"cuMemAlloc", "cuMemAlloc_v2", 3020},
    {"cuMemFree", "cuMemFree_v2", 3020},
    {"cuMemAllocHost", "cuMemAllocHost_v2", 3020},
    {"cuMemAllocPitch", "cuMemAllocPitch_v2", 3020},
    {"cuGetProcAddress", "cuGetProcAddress_v2", 12000},
};

}  // namespace

void *adprof::preload::cuda::substitute(const char *name, void *real, int cuda_version) {
  if (!real || !name || name[0] != 'c' || name[1] != 'u') return real;
  const char *abi = name;
  if (cuda_version >= 0)
    for (const Versioned &v : kVersioned)
      if (std::strcmp(name, v.name) == 0) {
        abi = cuda_version >= v.since ? v.abi : v.name;
        break;
      }
  void *f = swap_in(kLookupHooks, std::size(kLookupHooks), abi, real);
  return f != real ? f : swap_allocation_hook(abi, real);
}

namespace {

// The link map (a dlopen handle) of the object holding `address`, or null. _dl_find_object
// (glibc 2.35) searches a sorted table of the loaded objects; dladdr1 also finds the nearest
// symbol, scanning the object's symbol table (28 us a lookup in libc: bench/profiler).
link_map *object_at(const void *address) {
  if (!address) return nullptr;
#if __GLIBC_PREREQ(2, 35)
  dl_find_object found;
  return _dl_find_object(const_cast<void *>(address), &found) == 0 ? found.dlfo_link_map : nullptr;
#else
  Dl_info info{};
  link_map *map = nullptr;
  return dladdr1(address, &info, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP) ? map : nullptr;
#endif
}

// libadprof_preload.so's link map.
link_map *own_object() {
  static link_map *const own = object_at(reinterpret_cast<const void *>(&own_object));
  return own;
}

// Whether `f` is defined in libadprof_preload.so (one of its exported hooks).
bool is_adprofs(const void *f) { return own_object() && object_at(f) == own_object(); }

}  // namespace

// A lookup of `name` in a scope holding adprof's library found adprof's hook: whether that is the
// only definition, the answer without adprof being NULL. The global scope after adprof is what
// dlsym(RTLD_NEXT) from here searches; a caller loaded with a scope of its own (RTLD_LOCAL) also
// searches its dependencies (`caller`: an address in the caller's object, or null). When the
// hook is the only one, the failing lookup last made here has set glibc's error: from a library
// caller, a lookup in its own scope, whose message names it as glibc's would; from the program,
// the one after adprof (the message names libadprof_preload.so where glibc's names the program).
static bool only_adprofs(Dlsym real, const char *name, void *found, const void *caller) {
  if (!is_adprofs(found) || real(RTLD_NEXT, name)) return false;
  link_map *map = object_at(caller);
  if (map && map->l_name && map->l_name[0] && !is_adprofs(caller)) return !real(map, name);
  return true;
}

// dlsym(RTLD_DEFAULT or RTLD_NEXT, name) (dlsym_trampoline.cpp): 1 when the lookup from
// `caller` would find only adprof's hook (dlsym then returns NULL); else 0, and glibc's dlsym
// answers from the caller as without adprof. RTLD_NEXT from a library never finds adprof's
// library (it comes before every library), and only_adprofs then says 0 or what glibc says: no
// definition after adprof, none in the caller's own scope.
extern "C" int adprof_dlsym_scope_is_only_adprofs(void *, const char *name, const void *caller) {
  const auto real = real_dl<Dlsym>(adprof_real_dlsym);
  return only_adprofs(real, name, real(RTLD_DEFAULT, name), caller) ? 1 : 0;
}

extern "C" void *adprof_dlsym_cuda(void *handle, const char *name) {
  // With an explicit handle glibc's dlsym uses its caller only to tell LD_AUDIT modules: the
  // lookup itself is the same from here. The program's own handle (dlopen(NULL)) searches the
  // global scope, adprof's library first: its hook alone is no answer (only_adprofs).
  const auto real = real_dl<Dlsym>(adprof_real_dlsym);
  void *f = real(handle, name);
  if (handle != own_object() && only_adprofs(real, name, f, nullptr)) return nullptr;
  return substitute(name, f, -1);
}

extern "C" void *adprof_dlvsym_cuda(void *handle, const char *name, const char *version) {
  void *f = real_dl<Dlvsym>(adprof_real_dlvsym)(handle, name, version);
  return substitute(name, f, -1);
}
