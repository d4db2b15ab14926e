// What the planners share (plan.h).
#include "plan.h"

namespace adprof::whatif {

uint64_t available_policies(const ad::EngineDescription &e) {
  if (!e.described()) return ~0ULL;
  uint64_t m = 0;
  for (int i = 0; i < ADPROF_AD_POLICY_COUNT; ++i)
    if (e.policy(i).described) m |= 1ULL << i;
  return m;
}

void plan_no_index_widening(const std::vector<uint64_t> &widened, Plan &p) {
  for (uint64_t id : widened)
    if (p.suppress.insert(id).second) ++p.suppressed_count;
}

void Planner::suppress(uint64_t s) {
  if (!s || !p.suppress.insert(s).second) return;
  auto f = g.facts.find(s);
  if (f != g.facts.end()) {
    p.suppressed_bytes += f->second.size;
    ++p.suppressed_count;
  }
}

void Planner::kill_at(uint64_t index, uint64_t s) {
  p.at[index].push_back({Action::kKill, s});
  auto f = g.facts.find(s);
  if (f != g.facts.end() && !p.suppress.count(s)) {
    p.early_bytes += f->second.size;
    ++p.early_count;
  }
}

bool Planner::fresh(uint64_t s, int64_t from) const {
  auto f = g.facts.find(s);
  return s && f != g.facts.end() && f->second.rule == from;
}

bool Planner::save_exists(size_t node, const Save &s) const {
  if (!(flip & kActivity)) return true;
  if (!active[node]) return false;
  return s.users == kNone || (s.users & active_inputs[node]) != 0;
}

void Planner::run() {
  reuse();
  activity();
  saves();
  inplace();
  fused();
}

}  // namespace adprof::whatif
