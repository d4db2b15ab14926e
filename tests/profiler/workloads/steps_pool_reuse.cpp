// Steps whose batch another thread frees, at addresses a pool reuses (tests of step windows:
// step_window_threads_test.cpp). The blocks are a pool's, declared with adprof_track_alloc as
// host heap blocks at addresses of a reserved range: each mode makes one address be reused in
// an exact order, which malloc does not promise.
//
// usage: steps_pool_reuse N own | replaced
//
// Step i marks itself (adprof_step(i)); its batch is 1 MiB at address A, freed by a second
// thread as a DataLoader worker's feeder frees its batch. Each step's peak is 1 MiB above what
// the process holds between steps, and nothing outlives its step.
//
// own: the main thread first allocates and frees a temporary of its own at A, then the batch
// there. The freeing thread frees the batch, sleeps past a flush tick and records once more,
// so that its buffer, with the free, reaches the writer before the main thread's, with the
// temporary and the batch (handed over at the next step's first event).
//
// replaced: the freeing thread frees the batch, says so at once and stays blocked for 800 ms,
// its buffer unread. Meanwhile the main thread allocates and frees 1 MiB elsewhere (the step's
// peak), then a block at A again (the pool reuses it) and frees it, and records an event every
// 50 ms for 600 ms: the writer reads the reuse of A before the free that made it possible.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "adprof/context.h"

namespace {

constexpr size_t kBatchBytes = 1 << 20;

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_changed = PTHREAD_COND_INITIALIZER;
char *g_pool = nullptr;  // the range the pool's addresses come from (never touched)
bool g_handed = false, g_freed = false, g_done = false;
bool g_replaced = false;  // the mode

void sleep_ms(long ms) {
  timespec t{ms / 1000, ms % 1000 * 1'000'000};
  nanosleep(&t, nullptr);
}

void *batch_address() { return g_pool; }
void *elsewhere_address() { return g_pool + 4 * kBatchBytes; }

void say_freed() {
  g_freed = true;
  pthread_cond_broadcast(&g_changed);
}

void *free_batches(void *) {
  pthread_mutex_lock(&g_mutex);
  for (;;) {
    while (!g_handed && !g_done) pthread_cond_wait(&g_changed, &g_mutex);
    if (g_done) break;
    adprof_track_free(batch_address(), ADPROF_SPACE_HEAP, 0);
    g_handed = false;
    if (g_replaced) say_freed();
    pthread_mutex_unlock(&g_mutex);
    sleep_ms(g_replaced ? 800 : 250);  // past a flush tick
    free(malloc(32));                  // this thread's next event: its buffer handed over
    pthread_mutex_lock(&g_mutex);
    if (!g_replaced) say_freed();
  }
  pthread_mutex_unlock(&g_mutex);
  return nullptr;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[2], "own") != 0 && strcmp(argv[2], "replaced") != 0)) {
    fprintf(stderr, "usage: steps_pool_reuse N own | replaced\n");
    return 2;
  }
  g_replaced = strcmp(argv[2], "replaced") == 0;
  void *range = mmap(nullptr, 8 * kBatchBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (range == MAP_FAILED) return 1;
  g_pool = static_cast<char *>(range);
  const long steps = atol(argv[1]);
  pthread_t freer;
  if (pthread_create(&freer, nullptr, free_batches, nullptr) != 0) return 1;
  for (long i = 0; i < steps; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    if (!g_replaced) {  // a temporary at the batch's address, before it
      adprof_track_alloc(batch_address(), kBatchBytes, ADPROF_SPACE_HEAP, 0);
      adprof_track_free(batch_address(), ADPROF_SPACE_HEAP, 0);
    }
    adprof_track_alloc(batch_address(), kBatchBytes, ADPROF_SPACE_HEAP, 0);
    pthread_mutex_lock(&g_mutex);
    g_handed = true;
    g_freed = false;
    pthread_cond_broadcast(&g_changed);
    while (!g_freed) pthread_cond_wait(&g_changed, &g_mutex);
    pthread_mutex_unlock(&g_mutex);
    if (g_replaced) {
      adprof_track_alloc(elsewhere_address(), kBatchBytes, ADPROF_SPACE_HEAP, 0);
      adprof_track_free(elsewhere_address(), ADPROF_SPACE_HEAP, 0);
      adprof_track_alloc(batch_address(), kBatchBytes / 2, ADPROF_SPACE_HEAP, 0);
      adprof_track_free(batch_address(), ADPROF_SPACE_HEAP, 0);
      for (int t = 0; t < 12; ++t) {  // read on past the other thread's free
        sleep_ms(50);
        free(malloc(32));
      }
    }
  }
  pthread_mutex_lock(&g_mutex);
  g_done = true;
  pthread_cond_broadcast(&g_changed);
  pthread_mutex_unlock(&g_mutex);
  pthread_join(freer, nullptr);
  munmap(range, 8 * kBatchBytes);
  printf("%ld steps\n", steps);
  return 0;
}
