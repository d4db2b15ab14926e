// The benchmark's workload: N malloc/free pairs (default 5,000,000: about 10 million events)
// in "training steps" with forward/backward/optimizer phases, op scopes and roles, so the
// trace has the shape of an AD program. A ring of live buffers makes live memory rise and fall.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "adprof/context.h"

int main(int argc, char **argv) {
  const uint64_t pairs = argc > 1 ? strtoull(argv[1], nullptr, 10) : 5000000;
  const uint64_t steps = 20;
  const uint32_t ops[] = {adprof_name("matmul"), adprof_name("add"), adprof_name("relu"),
                          adprof_name("cast"), adprof_name("sum")};
  std::vector<void *> ring(4096, nullptr);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  const uint64_t per_step = pairs / steps;
  uint64_t done = 0;
  for (uint64_t step = 0; step < steps; ++step) {
    adprof_step(step);
    for (int phase = ADPROF_PHASE_FORWARD; phase <= ADPROF_PHASE_OPTIMIZER; ++phase) {
      adprof::PhaseScope ps(static_cast<adprof_phase>(phase));
      uint64_t n = phase == ADPROF_PHASE_OPTIMIZER ? per_step / 8 : per_step * 7 / 16;
      adprof::RoleScope rs(phase == ADPROF_PHASE_FORWARD    ? ADPROF_ROLE_ACTIVATION
                           : phase == ADPROF_PHASE_BACKWARD ? ADPROF_ROLE_ADJOINT
                                                            : ADPROF_ROLE_OPTIMIZER_STATE);
      for (uint64_t i = 0; i < n && done < pairs; ++i, ++done) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        // One op scope per 64 pairs: the trace is the pairs' 2N events plus a few markers.
        if (done % 64 == 0) {
          if (done) adprof_op_end();
          adprof_op_begin(ops[rng % 5], done / 64);
        }
        size_t slot = (rng >> 8) % ring.size();
        free(ring[slot]);  // the free of an earlier pair (ring starts empty: free(nullptr))
        ring[slot] = malloc(64 + (rng >> 20) % 8192);
      }
    }
  }
  adprof_op_end();
  for (void *p : ring) free(p);
  return 0;
}
