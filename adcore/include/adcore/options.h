// The memory policies of adcore: one options struct, every switch on by default.
// Turning all of them off (Options::naive()) reproduces the naive engine. Results do not depend
// on the switches (same values within floating-point tolerance).
#pragma once
#include <cstdint>

namespace adcore {

struct Options {
  // 1. No adjoint and no saved cache for values that do not lead to a requested gradient.
  bool activity_analysis = true;
  // 2. A forward cache is released at its last backward use (else: at the end of backward).
  bool early_release = true;
  // 3. Gradient contributions are added into the adjoint as they arrive (else: each is
  //    materialised as an accumulation buffer and all are summed when the adjoint is needed).
  bool inplace_accumulation = true;
  // 4. A parameter is updated by the optimizer (and its gradient freed) as soon as its adjoint
  //    is complete, inside backward (else: gradients kept, optimizer step afterwards).
  bool fused_optimizer = true;
  // 5. Segments marked with adcore::checkpoint drop their caches and recompute in backward.
  bool checkpointing = true;
  // 6. A Tape reuses its node objects and hands buffers back from its arena, so the second and
  //    later evaluations of the same gradient make zero heap allocations.
  bool reuse_tape = true;
  // 7. gather/scatter read i32 indices natively (else: an i64 copy of the index array is made).
  bool native_i32_indices = true;

  // Not a policy: hash every op output (adprof_content_hash) for the profiler's duplicate
  // detection. Off by default (costs a pass over each output).
  bool hash_contents = false;

  static Options naive() {
    Options o;
    o.activity_analysis = o.early_release = o.inplace_accumulation = o.fused_optimizer =
        o.checkpointing = o.reuse_tape = o.native_i32_indices = false;
    return o;
  }
  // Bit i set when switch i (in the order above, from 0) is on.
  uint64_t bits() const {
    return (activity_analysis ? 1u : 0u) | (early_release ? 2u : 0u) |
           (inplace_accumulation ? 4u : 0u) | (fused_optimizer ? 8u : 0u) |
           (checkpointing ? 16u : 0u) | (reuse_tape ? 32u : 0u) | (native_i32_indices ? 64u : 0u) |
           (hash_contents ? 128u : 0u);
  }
};

}  // namespace adcore
