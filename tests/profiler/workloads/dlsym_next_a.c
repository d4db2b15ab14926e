/* dlsym(RTLD_NEXT, ...) and dlvsym from a library (dlsym_next.c): glibc resolves RTLD_NEXT after
 * its caller's object, so each answer tells which object asked. Prints, for each lookup, the
 * object of the result (its file's base name) and what calling it gives. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int wl_next_probe(void) { return 1; }

static const char *object_of(void *f) {
  Dl_info info;
  if (!f) return "null";
  if (!dladdr(f, &info) || !info.dli_fname) return "?";
  const char *slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

EXPORT void next_report(void) {
  void *f = dlsym(RTLD_NEXT, "wl_next_probe");
  printf("next wl_next_probe %s %d\n", object_of(f), f ? ((int (*)(void))f)() : -1);
  f = dlsym(RTLD_DEFAULT, "wl_next_probe");
  printf("default wl_next_probe %s %d\n", object_of(f), f ? ((int (*)(void))f)() : -1);
  printf("next malloc %s\n", object_of(dlsym(RTLD_NEXT, "malloc")));
  printf("next dlsym %s\n", object_of(dlsym(RTLD_NEXT, "dlsym")));
  printf("vnext malloc %s\n", object_of(dlvsym(RTLD_NEXT, "malloc", "GLIBC_2.2.5")));
  f = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  unsigned long long p = 1;
  printf("next cuMemAlloc_v2 %s %d\n", object_of(f),
         f ? ((int (*)(unsigned long long *, unsigned long))f)(&p, 16) : -1);
  f = dlsym(RTLD_NEXT, "wl_no_such_symbol");
  const char *e = dlerror();
  printf("next missing %s error %s\n", object_of(f), e ? e : "none");
  /* next_b has no version information: glibc takes its definition for any version asked. */
  f = dlvsym(RTLD_NEXT, "cuMemAlloc_v2", "NO_SUCH_VERSION");
  e = dlerror();
  printf("vnext unversioned %s error %s\n", object_of(f), e ? e : "none");
}

/* Lookups made from this library, for cuda_lookups.c's run_absent (loaded RTLD_LOCAL there).
 * Not tail calls: glibc takes the caller from the return address, which a jump to dlsym would
 * leave in the program. */
static void *volatile g_found;
EXPORT void *wl_default_lookup(const char *name) {
  g_found = dlsym(RTLD_DEFAULT, name);
  return g_found;
}
EXPORT void *wl_next_lookup(const char *name) {
  g_found = dlsym(RTLD_NEXT, name);
  return g_found;
}
