/* The conformance suite's dlopen program, in C (no libstdc++ of its own, as Python): loads and
 * unloads two libraries three times; ctor_lib allocates in its constructor and frees in its
 * destructor, new_lib (C++) allocates 20 MiB with new[] and frees it. Usage:
 * dlopen_host CTOR_LIB NEW_LIB. Prints what each round saw. */
#include <dlfcn.h>
#include <stdio.h>

static void *symbol(void *lib, const char *name) {
  void *s = dlsym(lib, name);
  if (!s) fprintf(stderr, "dlopen_host: %s\n", dlerror());
  return s;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: dlopen_host CTOR_LIB NEW_LIB\n");
    return 2;
  }
  for (int round = 0; round < 3; ++round) {
    void *ctor_lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    void *new_lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!ctor_lib || !new_lib) {
      fprintf(stderr, "dlopen_host: %s\n", dlerror());
      return 1;
    }
    int (*blocks)(void) = (int (*)(void))symbol(ctor_lib, "ctor_lib_blocks");
    int (*megabytes)(void) = (int (*)(void))symbol(new_lib, "new_lib_megabytes");
    void (*release)(void) = (void (*)(void))symbol(new_lib, "new_lib_release");
    int (*entries)(void) = (int (*)(void))symbol(new_lib, "new_lib_entries");
    if (!blocks || !megabytes || !release || !entries) return 1;
    printf("round %d: ctor_lib holds %d blocks, new_lib %d entries, %d MiB with new[]\n", round,
           blocks(), entries(), megabytes());
    release();
    dlclose(new_lib);
    dlclose(ctor_lib);
  }
  return 0;
}
