// An environment variable's value, or `fallback` when it is unset or empty: how a test lets a
// run elsewhere (the GPU bundle, scripts/gpu-check.sh) point it at files the build tree has not.
#pragma once

#include <stdlib.h>

namespace adprof_test {

inline const char *env_or(const char *name, const char *fallback) {
  const char *v = getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace adprof_test
