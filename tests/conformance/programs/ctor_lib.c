/* A C library for the conformance suite's dlopen program: its constructor allocates through
 * the C family and its destructor frees everything, so both run inside dlopen and dlclose. */
#include <stdlib.h>
#include <string.h>

enum { kBlocks = 64 };

static void *g_blocks[kBlocks];
static char *g_name;

__attribute__((constructor)) static void ctor_lib_start(void) {
  for (int i = 0; i < kBlocks; ++i) {
    size_t size = 16 + (size_t)i * 97;
    g_blocks[i] = i % 3 == 0 ? calloc(size, 1) : malloc(size);
    if (i % 4 == 0) g_blocks[i] = realloc(g_blocks[i], size * 2);
  }
  g_name = strdup("ctor_lib");
}

__attribute__((destructor)) static void ctor_lib_stop(void) {
  for (int i = 0; i < kBlocks; ++i) free(g_blocks[i]);
  free(g_name);
}

__attribute__((visibility("default"))) int ctor_lib_blocks(void) {
  int n = 0;
  for (int i = 0; i < kBlocks; ++i) n += g_blocks[i] != NULL;
  return n;
}
