// Steps whose blocks another thread frees (tests of step windows: step_window_threads_test.cpp),
// as a DataLoader worker's batch is freed by its queue's feeder thread.
//
// usage: steps_freed_elsewhere N [late | idle | stay MARKER]
//
// Step i marks itself (adprof_step(i)) and allocates 1 MiB on the main thread, in blocks of a
// size class of its own (1 KiB to 8 KiB: no step's blocks where an earlier step's were), then
// hands them to the freeing thread and waits. That thread frees them, sleeps past a
// flush tick (100 ms) and allocates once more, so that its buffer, which holds the frees, reaches
// the writer before the main thread's, which holds the allocations (handed over at its next
// event, the next step's). Each step's peak is then 1 MiB above what the process holds between
// steps, and nothing outlives its step.
//
// With `late`, the freeing thread's buffer reaches the writer after the main thread's instead:
// it frees the step's blocks, says so at once and hands its buffer over 200 ms later; the main
// thread then allocates and frees a second 1 MiB (blocks of 14 KiB, a class of their own), sleeps
// 120 ms and goes on. The second MiB is allocated after the first was freed: each step's peak is
// still 1 MiB above what the process holds between steps, but the writer reads the second MiB's
// allocations before the first's frees.
//
// With `idle`, as `late`, but the freeing thread then stays blocked for 800 ms (its buffer, with
// the frees, unread all that time), and the main thread, once it has marked the next step,
// records an event every 50 ms for 600 ms: the writer reads the main thread's events 0.7 s past
// the frees, and 0.6 s past the next step's start, before the frees themselves.
//
// With `stay`, step 0 also allocates 4 MiB kept to the end, and after the last step the program
// writes its pid to MARKER and sleeps for a minute (to be killed).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adprof/context.h"

namespace {

constexpr size_t kStepBytes = 1 << 20;
// Sizes of distinct size classes of jemalloc (and of glibc's bins).
constexpr size_t kSizes[] = {1024, 1280, 1536, 1792, 2048, 2560, 3072,
                             3584, 4096, 5120, 6144, 7168, 8192};
constexpr int kBlocks = kStepBytes / 1024;

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_changed = PTHREAD_COND_INITIALIZER;
void *g_blocks[kBlocks];  // the step's, null after the last
bool g_handed = false, g_freed = false, g_done = false;
bool g_late = false;  // the freeing thread hands its buffer over after the main thread
bool g_idle = false;  // ... and only 800 ms after its frees

void sleep_ms(long ms) {
  timespec t{ms / 1000, ms % 1000 * 1'000'000};
  nanosleep(&t, nullptr);
}

void *free_elsewhere(void *) {
  pthread_mutex_lock(&g_mutex);
  for (;;) {
    while (!g_handed && !g_done) pthread_cond_wait(&g_changed, &g_mutex);
    if (g_done) break;
    for (void *&p : g_blocks)
      if (p) {
        free(p);
        p = nullptr;
      }
    g_handed = false;
    if (g_late) {
      g_freed = true;
      pthread_cond_broadcast(&g_changed);
    }
    pthread_mutex_unlock(&g_mutex);
    sleep_ms(g_idle ? 800 : g_late ? 200 : 250);  // past a flush tick
    free(malloc(32));  // this thread's next event: its buffer, with the frees, handed over
    pthread_mutex_lock(&g_mutex);
    if (!g_late) {
      g_freed = true;
      pthread_cond_broadcast(&g_changed);
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return nullptr;
}

}  // namespace

int main(int argc, char **argv) {
  const bool stay = argc > 3 && strcmp(argv[2], "stay") == 0;
  g_idle = argc > 2 && strcmp(argv[2], "idle") == 0;
  if (argc < 2 || (argc > 2 && strcmp(argv[2], "late") != 0 && !g_idle && !stay)) {
    fprintf(stderr, "usage: steps_freed_elsewhere N [late | idle | stay MARKER]\n");
    return 2;
  }
  g_late = argc > 2 && !stay;
  void *kept = nullptr;
  const long steps = atol(argv[1]);
  pthread_t freer;
  if (pthread_create(&freer, nullptr, free_elsewhere, nullptr) != 0) return 1;
  for (long i = 0; i < steps; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    for (int t = 0; g_idle && t < 12; ++t) {  // read on past the other thread's frees
      sleep_ms(50);
      free(malloc(32));
    }
    if (stay && i == 0) kept = memset(malloc(4 << 20), 3, 4 << 20);
    const size_t size = kSizes[i % (sizeof kSizes / sizeof kSizes[0])];
    void *blocks[kBlocks] = {};
    for (size_t b = 0; b < kStepBytes / size; ++b) blocks[b] = memset(malloc(size), 1, size);
    pthread_mutex_lock(&g_mutex);
    memcpy(g_blocks, blocks, sizeof blocks);
    g_handed = true;
    g_freed = false;
    pthread_cond_broadcast(&g_changed);
    while (!g_freed) pthread_cond_wait(&g_changed, &g_mutex);
    pthread_mutex_unlock(&g_mutex);
    if (g_late) {
      constexpr size_t kSecondSize = 14336;
      for (size_t b = 0; b < kStepBytes / kSecondSize; ++b)
        blocks[b] = memset(malloc(kSecondSize), 2, kSecondSize);
      for (size_t b = 0; b < kStepBytes / kSecondSize; ++b) free(blocks[b]);
      sleep_ms(120);  // its buffer handed over at the next step's first event, before the other's
    }
  }
  if (stay) {
    FILE *marker = fopen(argv[3], "w");
    if (!marker) return 1;
    fprintf(marker, "%d", static_cast<int>(getpid()));
    fclose(marker);
    sleep_ms(60'000);
  }
  free(kept);
  pthread_mutex_lock(&g_mutex);
  g_done = true;
  pthread_cond_broadcast(&g_changed);
  pthread_mutex_unlock(&g_mutex);
  pthread_join(freer, nullptr);
  printf("%ld steps\n", steps);
  return 0;
}
