// Symbols read from a loaded library's own dynamic symbol table, without the dynamic linker's
// lookup functions: adprof defines dlsym and dlvsym itself (dlsym_trampoline.cpp) and must reach
// glibc's, and a failed dlsym would leave an error for the program's next dlerror().
#pragma once

// What dlsym's first call runs (adprof_resolve_dl and the lookup by library name), left
// uninstrumented in a sanitized build of the preload library (scripts/tsan-preload.sh): a
// sanitizer runtime calls dlsym while it starts, before instrumented code can run.
#define ADPROF_UNINSTRUMENTED __attribute__((no_sanitize("address", "thread", "undefined")))

namespace adprof::preload {

// `name` defined by the loaded object whose file is `library` (a base name: "libc.so.6"), in
// version `version` (null: its default version). Null if not found.
void *symbol_of_library(const char *library, const char *name, const char *version);

// `name` (its default version) defined by the loaded object that contains `address`.
void *symbol_of_object_at(const void *address, const char *name);

}  // namespace adprof::preload
