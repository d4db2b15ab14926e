// C++ operator new and delete, every replaceable form, on the same paths as malloc and free.
//
// They must be hooked here, not left to libstdc++ (whose forms call malloc and free): the
// interposer depends on Debian's libjemalloc.so.2, which exports every operator new/delete
// form itself. In a process whose executable does not link libstdc++ (Python, a C program that
// dlopens a C++ library) jemalloc comes before libstdc++ in the lookup order, so without these
// definitions every `new` binds to jemalloc and never reaches a hook. The preload library is
// first in the lookup order whatever the load order of the rest, so these win everywhere.
//
// Built with exceptions (CMakeLists.txt): a failed throwing `new` runs the new-handler loop and
// throws std::bad_alloc, as the standard requires; the nothrow forms return null instead.
#include <new>

#include "hook_paths.h"

using namespace adprof::preload;

namespace {

// The standard's allocation loop: retry after each call of the new-handler; none: bad_alloc.
template <typename Allocate>
void *allocate_or_throw(Allocate allocate) {
  for (;;) {
    if (void *p = allocate()) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

template <typename Allocate>
void *allocate_or_null(Allocate allocate) noexcept {
  try {
    return allocate_or_throw(allocate);
  } catch (...) {
    return nullptr;
  }
}

// An alignment of an aligned form is a power of two by the standard's precondition; one that
// is smaller than a pointer is raised to it, as memalign needs.
size_t usable_alignment(std::align_val_t alignment) {
  size_t a = static_cast<size_t>(alignment);
  return a < sizeof(void *) ? sizeof(void *) : a;
}

}  // namespace

#define ADPROF_EXPORT __attribute__((visibility("default")))

ADPROF_EXPORT void *operator new(size_t size) {
  return allocate_or_throw([size] { return malloc_path(size); });
}
ADPROF_EXPORT void *operator new[](size_t size) { return ::operator new(size); }
ADPROF_EXPORT void *operator new(size_t size, const std::nothrow_t &) noexcept {
  return allocate_or_null([size] { return malloc_path(size); });
}
ADPROF_EXPORT void *operator new[](size_t size, const std::nothrow_t &nt) noexcept {
  return ::operator new(size, nt);
}
ADPROF_EXPORT void *operator new(size_t size, std::align_val_t alignment) {
  const size_t a = usable_alignment(alignment);
  return allocate_or_throw([a, size] { return aligned_path(a, size); });
}
ADPROF_EXPORT void *operator new[](size_t size, std::align_val_t alignment) {
  return ::operator new(size, alignment);
}
ADPROF_EXPORT void *operator new(size_t size, std::align_val_t alignment,
                                 const std::nothrow_t &) noexcept {
  const size_t a = usable_alignment(alignment);
  return allocate_or_null([a, size] { return aligned_path(a, size); });
}
ADPROF_EXPORT void *operator new[](size_t size, std::align_val_t alignment,
                                   const std::nothrow_t &nt) noexcept {
  return ::operator new(size, alignment, nt);
}

ADPROF_EXPORT void operator delete(void *p) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete[](void *p) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete(void *p, size_t) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete[](void *p, size_t) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete(void *p, std::align_val_t) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete[](void *p, std::align_val_t) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  free_path(p);
}
ADPROF_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  free_path(p);
}
ADPROF_EXPORT void operator delete(void *p, size_t, std::align_val_t) noexcept { free_path(p); }
ADPROF_EXPORT void operator delete[](void *p, size_t, std::align_val_t) noexcept { free_path(p); }
