// In-place accumulation: contributions added into one adjoint as they arrive; an
// out-of-place add (a virtual storage) where the adjoint is shared (docs/WHATIF.md).
#include <algorithm>

#include "plan.h"

namespace adprof::whatif {

void Planner::inplace() {
  if (!(flip & kInplace)) return;
  std::unordered_map<uint64_t, int> holders;       // storage -> targets holding it as adjoint
  std::unordered_map<uint64_t, uint64_t> alias;    // predicted adjoint -> recorded adjoint
  std::unordered_map<uint64_t, uint64_t> adjoint;  // recorded adjoint -> predicted adjoint
  const bool arena = ((g.backward_bits | g.bits) & kReuse) || (flip & kReuse);
  // Targets in the order their adjoints complete: the reverse sweep goes from high ids down,
  // and a target's sum happens before its own rule, so contributions are walked in index
  // order over all targets at once.
  struct Item {
    uint64_t index;
    size_t target;
    int kind;  // 0 contribution, 1 sum
    const Contribution *c;
  };
  std::vector<Item> items;
  for (size_t t = 0; t < g.nodes.size(); ++t) {
    if ((flip & kActivity) && !useful[t]) continue;
    const NodeInfo &nd = g.nodes[t];
    bool naive = false;
    for (const Contribution &c : nd.contributions)
      if (c.mode == kDeferred) naive = true;
    if (!naive) continue;
    for (const Contribution &c : nd.contributions) items.push_back({c.index, t, 0, &c});
    items.push_back({nd.sum_index ? nd.sum_index : g.end_index, t, 1, nullptr});
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item &a, const Item &b) { return a.index < b.index; });
  std::unordered_map<size_t, uint64_t> cur;
  auto death_before = [&](uint64_t s, uint64_t index) {
    if (VirtualIds::is_virtual(s)) return true;  // made by this plan: no recorded death
    auto f = g.facts.find(s);
    return f != g.facts.end() && f->second.death && f->second.death <= index;
  };
  auto size_of = [&](uint64_t s) -> uint64_t {
    auto f = g.facts.find(s);
    return f != g.facts.end() ? f->second.size : 0;
  };
  std::unordered_map<uint64_t, uint64_t> vsize;
  for (const Item &it : items) {
    NodeInfo &nd = g.nodes[it.target];
    if (it.kind == 1) {
      auto c = cur.find(it.target);
      if (c == cur.end()) continue;
      if (nd.sum) {
        suppress(nd.sum);
        p.on_death.emplace(nd.sum, c->second);
        adjoint[nd.sum] = c->second;
        alias[c->second] = nd.sum;
      } else {
        p.at[g.end_index].push_back({Action::kReleaseHold, c->second});
      }
      continue;
    }
    const Contribution &k = *it.c;
    if (k.mode != kDeferred) continue;
    uint64_t src = k.source ? k.source : k.buffer;
    if (k.source) suppress(k.buffer);
    auto a = adjoint.find(src);
    if (a != adjoint.end()) src = a->second;
    auto c = cur.find(it.target);
    if (c == cur.end()) {
      cur[it.target] = src;
      ++holders[src];
      ++p.extra_holds[src];
      continue;
    }
    const uint64_t now = c->second;
    auto al = alias.find(now);
    const uint64_t sz = VirtualIds::is_virtual(now) ? vsize[now] : size_of(now);
    const bool unique = holders[now] == 1 && death_before(now, k.index) &&
                        (al == alias.end() || death_before(al->second, k.index)) && sz == k.bytes;
    if (unique) continue;
    const uint64_t v = ids.take();
    vsize[v] = k.bytes;
    p.at[k.index].push_back({Action::kBirth, v, k.bytes, arena});
    ++p.extra_holds[v];
    p.virtual_bytes += k.bytes;
    ++p.virtual_count;
    --holders[now];
    p.at[k.index].push_back({Action::kReleaseHold, now});
    cur[it.target] = v;
    holders[v] = 1;
  }
}

}  // namespace adprof::whatif
