// Steps workload: a training loop's allocation pattern, step by step (tests of step windows,
// `adprof run --steps A:B`).
//
// usage: steps N [leak] [pause_us] [worker] [stall_step stall_ms]
//
// Parameters (4 MiB) are made once before step 0. Each step i marks itself (adprof_step(i)),
// makes activations and forward caches whose sizes vary with the step (so every step has a
// peak of its own), 2,000 temporaries of pseudo-random sizes, and frees them all at its end. With
// `leak`, each step keeps one forward cache of 256 KiB labelled "model.head" (a loss kept with its
// graph). pause_us (default 2000): a pause at each step's end, so that a run spans several flush
// ticks.
//
// With `worker`, what a training job does besides its steps: before step 0 it loads a dataset
// (16 MiB of scratch, freed, then 8 MiB kept to the end, role input, labelled "dataset", and
// 2 MiB of staging, freed at step 50): the run's peak is there, before any step; and at step 1
// it forks a worker that never marks a step (a DataLoader's): 40 batches of four 256 KiB
// blocks, three batches live at a time, then _exit. Prints "worker PID" (waited for at the end).
// The other spaces too: before step 0, an anonymous mapping of 1 MiB and one of 2 MiB, and a
// device block of 4 MiB (declared, at a made-up address); at step 50 the first mapping and
// the first half of the second are unmapped and the device block freed; at step 60 a mapping of
// 512 KiB and a device block of 8 MiB are made, kept to the end.
//
// With stall_step and stall_ms: right after marking that step, the program stalls (sleeps) that
// long, as a program descheduled on a loaded machine or blocked in a system call does.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#include "adprof/context.h"

namespace {

constexpr size_t kKiB = 1024;

void *touch(void *p, size_t n) {
  memset(p, 1, n);
  return p;
}

// The worker's life (never a step mark): batches made and dropped, three live at a time.
[[noreturn]] void work_as_worker() {
  constexpr int kBatches = 40, kBlocks = 4, kLive = 3;
  void *batches[kLive][kBlocks] = {};
  for (int i = 0; i < kBatches; ++i) {
    void **batch = batches[i % kLive];
    for (int j = 0; j < kBlocks; ++j) {
      free(batch[j]);
      batch[j] = touch(malloc(256 * kKiB), 256 * kKiB);
    }
  }
  for (auto &batch : batches)
    for (void *p : batch) free(p);
  _exit(0);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: steps N [leak] [pause_us]\n");
    return 2;
  }
  const long steps = atol(argv[1]);
  const bool leak = argc > 2 && strcmp(argv[2], "leak") == 0;
  const long pause_us = argc > 3 ? atol(argv[3]) : 2000;
  const bool with_worker = argc > 4 && strcmp(argv[4], "worker") == 0;
  const long stall_step = argc > 6 ? atol(argv[5]) : -1, stall_ms = argc > 6 ? atol(argv[6]) : 0;
  const uint32_t forward = adprof_name("forward"), layer = adprof_name("model.layer"),
                 head = adprof_name("model.head"), weights = adprof_name("model.weight");
  adprof_set_role(ADPROF_ROLE_PARAMETER);
  void *parameters = touch(malloc(4096 * kKiB), 4096 * kKiB);
  adprof_label(parameters, weights);
  void *dataset = nullptr, *staging = nullptr;
  if (with_worker) {
    adprof_set_role(ADPROF_ROLE_INPUT);
    void *scratch = touch(malloc(16384 * kKiB), 16384 * kKiB);
    dataset = touch(malloc(8192 * kKiB), 8192 * kKiB);
    adprof_label(dataset, adprof_name("dataset"));
    staging = touch(malloc(2048 * kKiB), 2048 * kKiB);
    free(scratch);
  }
  constexpr size_t kMiB = 1024 * kKiB;
  auto map = [](size_t n) {
    void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : touch(p, n);
  };
  // Made-up device addresses: the program only declares them (no device here).
  const void *device_early = reinterpret_cast<void *>(uintptr_t{0x7e0000000000}),
             *device_late = reinterpret_cast<void *>(uintptr_t{0x7e0100000000});
  void *mapped_early = nullptr, *mapped_halved = nullptr, *mapped_late = nullptr;
  if (with_worker) {
    mapped_early = map(kMiB);
    mapped_halved = map(2 * kMiB);
    if (!mapped_early || !mapped_halved) return 1;
    adprof_track_alloc(device_early, 4 * kMiB, ADPROF_SPACE_DEVICE_BLOCK, 0);
  }
  adprof_set_role(ADPROF_ROLE_FOREIGN);
  pid_t worker = -1;
  uint64_t random_state = 1;
  std::vector<void *> kept;
  kept.reserve(static_cast<size_t>(steps));
  for (long i = 0; i < steps; ++i) {
    adprof_step(static_cast<uint64_t>(i));
    if (i == stall_step) {
      timespec t{stall_ms / 1000, stall_ms % 1000 * 1000000};
      nanosleep(&t, nullptr);
    }
    if (with_worker && i == 1) {
      fflush(nullptr);
      worker = fork();
      if (worker == 0) work_as_worker();
    }
    if (i == 50) {
      free(staging);
      staging = nullptr;
      if (with_worker) {
        munmap(mapped_early, kMiB);
        munmap(mapped_halved, kMiB);
        adprof_track_free(device_early, ADPROF_SPACE_DEVICE_BLOCK, 0);
      }
    }
    if (i == 60 && with_worker) {
      if (!(mapped_late = map(kMiB / 2))) return 1;
      adprof_track_alloc(device_late, 8 * kMiB, ADPROF_SPACE_DEVICE_BLOCK, 0);
    }
    adprof_op_begin(forward, static_cast<uint64_t>(i) + 1);
    adprof_set_phase(ADPROF_PHASE_FORWARD);
    std::vector<void *> step_blocks;
    for (int j = 0; j < 8; ++j) {
      adprof_set_role(ADPROF_ROLE_ACTIVATION);
      step_blocks.push_back(touch(malloc((64 + 16 * ((i + j) % 5)) * kKiB), 64 * kKiB));
      adprof_set_role(ADPROF_ROLE_FORWARD_CACHE);
      void *cache = touch(malloc((128 + 32 * ((i * 3 + j) % 7)) * kKiB), 64 * kKiB);
      adprof_label(cache, layer);
      step_blocks.push_back(cache);
    }
    adprof_set_role(ADPROF_ROLE_FOREIGN);
    // Sizes from a pseudo-random sequence: a real step's pattern is not one zstd folds into a
    // few bytes, and the trace's size then says what a window saves.
    for (int j = 0; j < 2000; ++j) {
      random_state = random_state * 6364136223846793005ull + 1442695040888963407ull;
      free(touch(malloc(16 + (random_state >> 33) % 4096), 16));
    }
    if (leak) {
      adprof_set_role(ADPROF_ROLE_FORWARD_CACHE);
      void *loss = touch(malloc(256 * kKiB), 256 * kKiB);
      adprof_label(loss, head);
      kept.push_back(loss);
      adprof_set_role(ADPROF_ROLE_FOREIGN);
    }
    adprof_set_phase(ADPROF_PHASE_OTHER);
    adprof_op_end();
    for (void *p : step_blocks) free(p);
    if (pause_us > 0) {
      timespec t{0, pause_us * 1000};
      nanosleep(&t, nullptr);
    }
  }
  for (void *p : kept) free(p);
  free(parameters);
  free(dataset);
  if (with_worker) {
    munmap(static_cast<char *>(mapped_halved) + kMiB, kMiB);
    munmap(mapped_late, kMiB / 2);
    adprof_track_free(device_late, ADPROF_SPACE_DEVICE_BLOCK, 0);
  }
  if (worker > 0) {
    int status = 0;
    if (waitpid(worker, &status, 0) != worker || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return 1;
    printf("worker %d\n", static_cast<int>(worker));
  }
  printf("%ld steps\n", steps);
  return 0;
}
