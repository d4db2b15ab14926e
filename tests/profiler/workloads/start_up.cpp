// Foreign memory made at start-up and by the steps (report_test.cpp): 1 MiB before the first
// step (what an import leaves), then two steps, each making 128 KiB of foreign memory outside
// any op (a data loader's buffer) and an op's 64 KiB activation. Everything is live at the peak
// (the last allocation), then freed.
// `start_up pool`: each step also starts a thread named "lib_pool" that makes 96 KiB of foreign
// memory outside any op (a library's worker: XLA's, a BLAS pool's), kept to the end as well.
#include <pthread.h>
#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>

#include "adprof/context.h"

namespace {

constexpr size_t kPool = 96 << 10;

// Named before its first allocation: the recorder takes a thread's name at its first event.
void *pool_worker(void *) {
  prctl(PR_SET_NAME, "lib_pool", 0, 0, 0);
  char *p = static_cast<char *>(malloc(kPool));
  memset(p, 3, kPool);
  return p;
}

}  // namespace

int main(int argc, char **argv) {
  const bool pool = argc > 1 && strcmp(argv[1], "pool") == 0;
  constexpr size_t kStartUp = 1 << 20, kLoader = 128 << 10, kActivation = 64 << 10;
  char *start_up = static_cast<char *>(malloc(kStartUp));
  memset(start_up, 1, kStartUp);
  const uint32_t matmul = adprof_name("matmul");
  char *made[6] = {};
  for (int step = 0; step < 2; ++step) {
    adprof_step(static_cast<uint64_t>(step));
    made[3 * step] = static_cast<char *>(malloc(kLoader));
    adprof_op_begin(matmul, static_cast<uint64_t>(step));
    adprof_set_role(ADPROF_ROLE_ACTIVATION);
    made[3 * step + 1] = static_cast<char *>(malloc(kActivation));
    adprof_set_role(ADPROF_ROLE_FOREIGN);
    adprof_op_end();
    pthread_t worker;
    void *result = nullptr;
    if (pool && pthread_create(&worker, nullptr, pool_worker, nullptr) == 0 &&
        pthread_join(worker, &result) == 0)
      made[3 * step + 2] = static_cast<char *>(result);
  }
  for (char *p : made)
    if (p) memset(p, 2, 1);
  for (char *p : made) free(p);
  free(start_up);
  return 0;
}
