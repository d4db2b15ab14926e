// A C++ library whose function allocates with `new`, loaded by a C program (cnew.c). In such a
// process libstdc++ is loaded after the interposer's own dependencies, so `new` binds to the
// first definition in the lookup order: it must be the interposer's (hooks/new_hooks.cpp).
#include <cstddef>

namespace {
char *volatile g_keep[64];
}

extern "C" __attribute__((visibility("default"))) void cxx_new_blocks(int count, size_t size) {
  for (int i = 0; i < count && i < 64; ++i) {
    g_keep[i] = new char[size];
    g_keep[i][0] = 1;
  }
}

extern "C" __attribute__((visibility("default"))) void cxx_delete_blocks(int count) {
  for (int i = 0; i < count && i < 64; ++i) delete[] g_keep[i];
}
