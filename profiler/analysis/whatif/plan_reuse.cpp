// Reusable tape: storages of a call go back to the tape's arena (docs/WHATIF.md).
#include "plan.h"

namespace adprof::whatif {

// A reusable tape: storages made inside value_and_grad or a backward sweep go back to the
// tape's arena (kept idle, by size) instead of to the allocator.
void Planner::reuse() {
  if (!(flip & kReuse)) return;
  if (g.have_flags && (g.flags & ADPROF_AD_BACKWARD_IN_CALL))
    p.pooled.insert(g.window_forward.begin(), g.window_forward.end());
  p.pooled.insert(g.window_backward.begin(), g.window_backward.end());
}

}  // namespace adprof::whatif
