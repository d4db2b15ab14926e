// Tests that run an instrumented program under libadprof_preload.so cannot run in sanitizer
// builds: ASan and TSan own malloc, and their runtime must come first among the loaded
// libraries, before the preload. Such tests skip there (the release build runs them); the
// sanitizer builds still cover the code they drive through the other tests.
#pragma once

#include <gtest/gtest.h>

#include "sanitized_build.h"

#ifdef ADPROF_SANITIZED_BUILD
#define ADPROF_SKIP_IF_SANITIZED()                                                         \
  GTEST_SKIP() << "runs a sanitized program under the adprof interposer, which ASan/TSan " \
                  "forbid (they own malloc); covered by the release build"
#else
#define ADPROF_SKIP_IF_SANITIZED() (void)0
#endif
