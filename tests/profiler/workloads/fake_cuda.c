/* Loads the fake CUDA plugin (argv[1]) as adcore loads its CUDA plugin, RTLD_LOCAL, and runs its
 * device work; prints "rc N": the CUDA calls' combined status (0: every one succeeded). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  int (*run)(void) = (int (*)(void))dlsym(plugin, "run_device_work");
  if (!run) return 2;
  printf("rc %d\n", run());
  return 0;
}
