// The dlopen'd part of the call-stack evidence workload (sites.cpp): 20 x 1000 bytes.
#include <stdlib.h>

extern "C" __attribute__((visibility("default"), noinline)) void lib_allocate(int count,
                                                                              void **out) {
  for (int i = 0; i < count; ++i) out[i] = malloc(1000);  // SITE_LIB
}
