/* A C program (no libstdc++ in its own dependencies) that dlopens a C++ library and has it
 * allocate COUNT blocks of SIZE bytes with new[], then delete[] them.
 * Usage: profiler_wl_cnew LIBRARY COUNT SIZE */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  void *lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 3;
  }
  void (*make)(int, size_t) = (void (*)(int, size_t))dlsym(lib, "cxx_new_blocks");
  void (*drop)(int) = (void (*)(int))dlsym(lib, "cxx_delete_blocks");
  if (!make || !drop) return 4;
  int count = atoi(argv[2]);
  make(count, (size_t)strtoull(argv[3], NULL, 10));
  drop(count);
  dlclose(lib);
  return 0;
}
