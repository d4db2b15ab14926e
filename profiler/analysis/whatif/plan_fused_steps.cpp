// The optimizer step fused into the backward (policy 3) for gradients that live in parameters
// (version 2, docs/WHATIF.md): each parameter is stepped as soon as its gradient buffer is
// ready, and the buffer is freed there instead of living until a separate optimizer step.
#include "plan.h"

namespace adprof::whatif {

void FusedSteps::on(const GradEvent &e, Plan &p) {
  if (e.kind == ad::Kind::kOptimizerEnd) {
    ++steps;
    // The step runs per parameter where its gradient became ready (one parameter at a time,
    // so its transient is at most the separate step's largest), before the gradient is freed.
    if (e.size)
      for (uint64_t index : pending_) {
        const uint64_t v = ids_->take();
        std::vector<Action> &at = p.at[index];
        at.insert(at.begin(), {{Action::kBirth, v, e.size, false, true}, {Action::kKill, v}});
      }
    pending_.clear();
    return;
  }
  if (e.kind == ad::Kind::kGradArrived) {
    auto [it, fresh] = adopted_.try_emplace(e.param, 0);
    if (it->second) return;  // added into the buffer, as recorded
    it->second = e.storage;
    ++p.extra_holds[e.storage];
    return;
  }
  if (e.kind != ad::Kind::kGradReady) return;
  ++ready;
  pending_.push_back(e.index);
  auto it = adopted_.find(e.param);
  if (it != adopted_.end() && it->second) {
    p.at[e.index].push_back({Action::kReleaseHold, it->second});
    it->second = 0;
  }
  p.at[e.index].push_back({Action::kKill, e.storage});
  if (counted_.insert(e.storage).second) {
    p.early_bytes += e.size;
    ++p.early_count;
  }
}

}  // namespace adprof::whatif
