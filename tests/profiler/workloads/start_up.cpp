// Foreign memory made at start-up and by the steps (report_test.cpp): 1 MiB before the first
// step (what an import leaves), then two steps, each making 128 KiB of foreign memory outside
// any op (a data loader's buffer) and an op's 64 KiB activation. Everything is live at the peak
// (the last allocation), then freed.
#include <cstdlib>
#include <cstring>

#include "adprof/context.h"

int main() {
  constexpr size_t kStartUp = 1 << 20, kLoader = 128 << 10, kActivation = 64 << 10;
  char *start_up = static_cast<char *>(malloc(kStartUp));
  memset(start_up, 1, kStartUp);
  const uint32_t matmul = adprof_name("matmul");
  char *made[4];
  for (int step = 0; step < 2; ++step) {
    adprof_step(static_cast<uint64_t>(step));
    made[2 * step] = static_cast<char *>(malloc(kLoader));
    adprof_op_begin(matmul, static_cast<uint64_t>(step));
    adprof_set_role(ADPROF_ROLE_ACTIVATION);
    made[2 * step + 1] = static_cast<char *>(malloc(kActivation));
    adprof_set_role(ADPROF_ROLE_FOREIGN);
    adprof_op_end();
  }
  for (char *p : made) memset(p, 2, 1);
  for (char *p : made) free(p);
  free(start_up);
  return 0;
}
