/* The library after next_a in the lookup order (its dependency): a second definition of
 * wl_next_probe, and a cuMemAlloc_v2 of its own, for dlsym(RTLD_NEXT) from next_a (dlsym_next.c).
 */
#define EXPORT __attribute__((visibility("default")))
EXPORT int wl_next_probe(void) { return 2; }
EXPORT int cuMemAlloc_v2(unsigned long long *out, unsigned long size) {
  (void)size;
  *out = 0;
  return 77;
}
