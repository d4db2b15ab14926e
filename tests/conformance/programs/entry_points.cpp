// Every allocation entry point, each a known number of times (the conformance suite checks
// the counter's count of each, then compares it with adprof's as for the other programs).
// Prints nothing: stdio's buffer would be one more malloc.
#include <malloc.h>
#include <stdlib.h>

#include <new>

namespace {

struct alignas(128) Wide {
  char bytes[300];
};

void *volatile g_sink;  // keeps the compiler from eliding the pairs

}  // namespace

int main() {
  using std::align_val_t;
  const std::nothrow_t &nt = std::nothrow;
  void *p = malloc(10);  // malloc 1
  free(p);
  p = calloc(3, 10);  // calloc 1
  free(p);
  p = realloc(nullptr, 20);         // realloc(NULL, n) 1
  p = realloc(p, 4000);             // realloc to a new size 1
  p = realloc(p, 0);                // realloc(p, 0) 1: glibc and jemalloc free p and return NULL
  free(p);                          // NULL: not a free
  p = reallocarray(nullptr, 4, 8);  // realloc(NULL, n) 2
  p = reallocarray(p, 8, 8);        // realloc to a new size 2
  free(p);
  if (posix_memalign(&p, 64, 100) != 0) return 1;  // posix_memalign 1
  free(p);
  p = aligned_alloc(256, 512);  // aligned_alloc 1
  free(p);
  p = memalign(128, 100);  // memalign 1
  free(p);
  p = valloc(100);  // valloc 1
  free(p);
  p = pvalloc(100);  // pvalloc 1
  free(p);
  // operator new and delete: four unaligned forms (on malloc in libstdc++ and in the counter)
  // and four aligned ones (on aligned_alloc), each with a delete form
  g_sink = p = ::operator new(100);
  ::operator delete(p);
  g_sink = p = ::operator new[](100);
  ::operator delete[](p, size_t{100});
  g_sink = p = ::operator new(100, nt);
  ::operator delete(p, nt);
  g_sink = p = ::operator new[](100, nt);
  ::operator delete[](p, nt);
  g_sink = p = ::operator new (300, align_val_t{128});
  ::operator delete (p, size_t{300}, align_val_t{128});
  g_sink = p = ::operator new[](300, align_val_t{128});
  ::operator delete[](p, align_val_t{128});
  g_sink = p = ::operator new (300, align_val_t{128}, nt);
  ::operator delete (p, align_val_t{128}, nt);
  g_sink = p = new Wide[2];
  delete[] static_cast<Wide *>(p);
  return 0;
}
