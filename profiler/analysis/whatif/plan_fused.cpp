// Fused optimizer: a parameter gradient dies at its adjoint's completion (docs/WHATIF.md).
#include "plan.h"

namespace adprof::whatif {

void Planner::fused() {
  if (!(flip & kFused) || !g.backward) return;
  if (g.have_flags &&
      (!(g.flags & ADPROF_AD_BACKWARD_TO_LEAF_GRADS) || !(g.flags & ADPROF_AD_BACKWARD_OPTIMIZER)))
    return;  // no optimizer given
  for (NodeInfo &nd : g.nodes) {
    if (!nd.leaf || !nd.requires_grad || !nd.complete) continue;
    kill_at(nd.complete_index, nd.complete);
    for (uint64_t s : nd.deliver_allocs) suppress(s);
  }
}

}  // namespace adprof::whatif
