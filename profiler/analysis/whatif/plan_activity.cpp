// Activity analysis: buffers for values that lead to no requested gradient are never
// allocated (docs/WHATIF.md).
#include "plan.h"

namespace adprof::whatif {

void Planner::activity() {
  const size_t n = g.nodes.size();
  active.assign(n, 0);
  useful.assign(n, 0);
  active_inputs.assign(n, 0);
  const bool in_call = g.have_flags && (g.flags & ADPROF_AD_BACKWARD_IN_CALL);
  const bool to_leaf = g.have_flags ? (g.flags & ADPROF_AD_BACKWARD_TO_LEAF_GRADS) != 0 : false;
  for (size_t i = 0; i < n; ++i) {
    NodeInfo &nd = g.nodes[i];
    if (nd.leaf) {
      active[i] = in_call ? nd.requested : (nd.requires_grad || nd.requested);
      useful[i] = nd.requested || (to_leaf && nd.requires_grad);
      continue;
    }
    bool a = false, u = nd.requested;
    for (size_t j = 0; j < nd.in.size(); ++j) {
      int64_t in = nd.in[j];
      if (in < 0 || static_cast<size_t>(in) >= n) continue;
      if (active[static_cast<size_t>(in)]) {
        a = true;
        if (j < 64) active_inputs[i] |= 1ULL << j;
      }
      if (useful[static_cast<size_t>(in)]) u = true;
    }
    active[i] = a;
    useful[i] = u && a;
  }
  if (!(flip & kActivity)) return;
  for (size_t t = 0; t < n; ++t) {
    NodeInfo &nd = g.nodes[t];
    if (useful[t]) continue;
    if (!nd.leaf && nd.rule_begin)
      for (uint64_t s : nd.rule_allocs) suppress(s);
    for (const Contribution &c : nd.contributions) {
      if (c.mode >= ADPROF_AD_CONTRIBUTION_OUT_OF_PLACE || fresh(c.buffer, c.from))
        suppress(c.buffer);
      if (fresh(c.source, c.from)) suppress(c.source);
    }
    suppress(nd.sum);
    for (uint64_t s : nd.deliver_allocs) suppress(s);
  }
}

}  // namespace adprof::whatif
