// Gradients freed, not zeroed (policy 7, docs/WHATIF.md): followed over the whole run, not per
// tape generation, since a program zeroes its gradients between backward sweeps.
#include "plan.h"

namespace adprof::whatif {

void FreeGradients::on(const GradEvent &e, Plan &p) {
  if (e.kind == ad::Kind::kGradZeroed) {
    Param &q = params_[e.param];
    ++zeroings;
    if (q.adopted) {  // the gradient that became the buffer is freed by this reset
      p.at[e.index].push_back({Action::kReleaseHold, q.adopted});
      q.adopted = 0;
    }
    p.at[e.index].push_back({Action::kKill, e.storage});
    if (counted_.insert(e.storage).second) {
      p.early_bytes += e.size;
      ++p.early_count;
    }
    q.zeroed = e.storage;
    q.awaiting = true;
  } else if (e.kind == ad::Kind::kGradArrived) {
    auto it = params_.find(e.param);
    if (it == params_.end() || !it->second.awaiting || e.storage == it->second.zeroed) return;
    Param &q = it->second;
    q.awaiting = false;     // the first gradient since the reset becomes the buffer (later ones
    q.adopted = e.storage;  // are added into it, as recorded)
    ++p.extra_holds[e.storage];
    ++p.virtual_count;
  } else if (e.kind == ad::Kind::kNone) {  // a zeroed buffer died: so does what replaced it
    for (auto &[param, q] : params_)
      if (q.zeroed == e.storage) {
        if (q.adopted) p.at[e.index].push_back({Action::kReleaseHold, q.adopted});
        q.adopted = 0;
        q.zeroed = 0;
        q.awaiting = false;
      }
  }
}

}  // namespace adprof::whatif
