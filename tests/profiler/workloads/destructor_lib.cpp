// A library that keeps blocks until the process exits and frees them in its destructors, as
// libraries that `import torch` loads do (libtasn1, gnutls, libgfortran...): half through a
// static object's destructor (run by __cxa_finalize from the library's fini), half through an
// ELF destructor. glibc's _dl_fini runs them after the interposer's own destructor.
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kMaxBlocks = 64;

struct Held {
  void *blocks[kMaxBlocks] = {};
  int count = 0;
  ~Held() {
    for (int i = 0; i < count; ++i) free(blocks[i]);
  }
};

Held g_by_static_object;
Held *g_by_destructor = nullptr;

__attribute__((destructor)) void free_the_rest() {
  if (!g_by_destructor) return;
  for (int i = 0; i < g_by_destructor->count; ++i) free(g_by_destructor->blocks[i]);
  free(g_by_destructor);
}

void fill(Held &held, int count, size_t size) {
  for (int i = 0; i < count && held.count < kMaxBlocks; ++i) {
    void *p = malloc(size);
    memset(p, i, size);
    held.blocks[held.count++] = p;
  }
}

}  // namespace

// `2 * count` blocks of `size`, freed when the library is finalised (one more, holding half).
extern "C" __attribute__((visibility("default"))) void keep_until_exit(int count, size_t size) {
  fill(g_by_static_object, count, size);
  if (!g_by_destructor) g_by_destructor = static_cast<Held *>(calloc(1, sizeof(Held)));
  fill(*g_by_destructor, count, size);
}
