// The training loop the training samples (cnn, charlm) share: a step per batch, its loss
// printed as the mean of the last --log-every steps, and the time the steps took.
#pragma once
#include <adcore/adcore.h>

#include <cstdio>

#include "common.h"

namespace samples {

// What a training step computed: its batch, alive until the step ends (through backward), and
// its loss. Members are destroyed loss first, then the targets, then the inputs.
struct Step {
  adcore::Tensor inputs, targets;
  adcore::Tensor loss;
};

// Runs `steps` training steps and returns the first step's loss. Step s is marked for adprof
// (adprof_step), takes its buffers from the tape's arena (as value_and_grad does, so that a
// step reuses the previous step's buffers instead of allocating beside them), computes its
// batch and loss with make_step(s) and runs backward with `optimizer` (stepped in backward or
// after it, as the tape's policy says). adcore's peaks are counted from the first step on.
template <class MakeStep>
double train(adcore::Tape &tape, adcore::Optimizer &optimizer, int steps, int log_every, bool quiet,
             MakeStep &&make_step) {
  adcore::reset_alloc_stats();
  double first = 0, avg = 0;
  int avg_n = 0;
  const Clock::time_point t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    adprof_step(static_cast<uint64_t>(s));
    adcore::ArenaScope arena_scope(tape.arena());
    const Step computed = make_step(s);
    const double l = computed.loss.item();
    if (s == 0) first = l;
    avg += l;
    ++avg_n;
    tape.backward(computed.loss, &optimizer);
    if ((s + 1) % log_every == 0 || s + 1 == steps) {
      if (!quiet) std::printf("  step %d loss %.4f (mean of last %d)\n", s + 1, avg / avg_n, avg_n);
      avg = 0;
      avg_n = 0;
    }
  }
  const double train_s = seconds_since(t0);
  std::printf("train: %d steps in %.2f s (%.1f steps/s)\n", steps, train_s,
              train_s > 0 ? steps / train_s : 0.0);
  return first;
}

}  // namespace samples
