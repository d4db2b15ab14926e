// Early release: a forward cache dies at its last predicted release, right after the
// rule of the last node that reads it (docs/WHATIF.md).
#include <algorithm>

#include "plan.h"

namespace adprof::whatif {

// Forward caches: a storage the tape killed dies at its last predicted release.
void Planner::saves() {
  if (!(flip & (kActivity | kEarlyRelease))) return;
  std::unordered_map<uint64_t, uint64_t> death;  // storage -> predicted death (0: none yet)
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeInfo &nd = g.nodes[i];
    for (const Save &s : nd.saves) {
      if (!s.storage) continue;
      seen.insert(s.storage);
      if (!save_exists(i, s)) continue;
      uint64_t r = s.release ? s.release : g.end_index;
      if ((flip & kEarlyRelease) && nd.rule_end) r = std::min(r, nd.rule_end);
      uint64_t &d = death[s.storage];
      d = std::max(d, r);
    }
  }
  for (uint64_t s : seen) {
    auto f = g.facts.find(s);
    if (f == g.facts.end() || !f->second.tape_killed || !f->second.death) continue;
    uint64_t d = death.count(s) ? death[s] : (g.backward ? g.backward_index : 0);
    if (d && d < f->second.death) kill_at(d, s);
  }
}

}  // namespace adprof::whatif
