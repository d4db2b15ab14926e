// Pass 2 of the what-if analysis: every scenario replays the recording with its plan applied
// and keeps its own host total; its peak is the prediction (docs/WHATIF.md).
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_set>
#include <vector>

#include "adprof/trace_reader.h"
#include "plan.h"

namespace adprof::whatif {

struct Scenario {
  uint64_t flip = 0;   // policy bits switched on
  bool chain = false;  // the checkpointing what-if: the longest chain through a sqrt(n) schedule
  Plan plan;
  // pass 2
  struct Live {
    uint64_t size;
    bool from_pool, to_pool;
    int holds;
  };
  // The storages this scenario follows one by one: those its plan names (`followed`) and those
  // of the arena model (taken from or given to the pool). Every other storage lives as it did
  // in the recording, from its acquire to its release: it is only its bytes in `phys`. (Every
  // scenario followed every storage before: on a long training run that was most of the
  // report's time, each scenario's map of a hundred thousand storages missing the cache.)
  absl::flat_hash_map<uint64_t, Live> live;
  absl::flat_hash_set<uint64_t> followed;
  absl::flat_hash_map<uint64_t, uint64_t> idle;  // arena model: idle buffers per size
  absl::flat_hash_set<uint64_t> triggered;
  int64_t phys = 0;
  uint64_t peak = 0;
  std::map<uint64_t, std::vector<Action>>::iterator next_action;  // in plan.at

  // `followed` from the plan: what it suppresses, holds longer, pools, or acts on.
  void follow_the_plan() {
    followed.clear();
    followed.insert(plan.suppress.begin(), plan.suppress.end());
    followed.insert(plan.pooled.begin(), plan.pooled.end());
    for (const auto &[id, holds] : plan.extra_holds) followed.insert(id);
    for (const auto &[dies, released] : plan.on_death) followed.insert(released);
    for (const auto &[index, actions] : plan.at)
      for (const Action &a : actions)
        if (a.type != Action::kBirth) followed.insert(a.id);  // a birth's is the plan's own
    next_action = plan.at.begin();
  }
  // A storage of the recording acquired (`arena`: taken from the arena; `to_pool`: given back
  // to one later): followed, or only its bytes counted.
  void acquire(uint64_t id, uint64_t size, bool arena, bool to_pool) {
    if (!arena && !to_pool && !followed.contains(id)) {
      phys += static_cast<int64_t>(size);
      return;
    }
    if (plan.suppress.count(id)) return;
    auto x = plan.extra_holds.find(id);
    const int holds = 1 + (x != plan.extra_holds.end() ? x->second : 0);
    alloc(id, size, arena || to_pool, to_pool, holds);
  }
  // The recording releases a storage it acquired: a followed one loses a hold, another's bytes
  // go.
  void release(uint64_t id, uint64_t size) {
    if (live.contains(id))
      release_hold(id);
    else if (!followed.contains(id))
      phys -= static_cast<int64_t>(size);
  }
  void alloc(uint64_t id, uint64_t size, bool from_pool, bool to_pool, int holds) {
    if (holds <= 0) return;
    auto it = from_pool ? idle.find(size) : idle.end();
    if (it != idle.end() && it->second > 0)
      --it->second;
    else
      phys += static_cast<int64_t>(size);
    live[id] = Live{size, from_pool, to_pool, holds};
  }
  void die(uint64_t id) {
    auto it = live.find(id);
    if (it == live.end()) return;
    Live l = it->second;
    live.erase(it);
    if (l.to_pool)
      ++idle[l.size];
    else
      phys -= static_cast<int64_t>(l.size);
    trigger(id);
  }
  void trigger(uint64_t id) {
    // Only a death something waits for is remembered (every storage's would grow the set by
    // each allocation of the trace).
    auto [b, e] = plan.on_death.equal_range(id);
    if (b == e || !triggered.insert(id).second) return;
    std::vector<uint64_t> targets;
    for (auto it = b; it != e; ++it) targets.push_back(it->second);
    for (uint64_t t : targets) release_hold(t);
  }
  void release_hold(uint64_t id) {
    auto it = live.find(id);
    if (it == live.end()) return;
    if (--it->second.holds <= 0) die(id);
  }
  void kill(uint64_t id) {
    if (live.count(id))
      die(id);
    else
      trigger(id);
  }
};

// Reads the trace again from its start and runs every scenario over it. `gave`: storages the
// recording gave back to an arena; `start`: the event at which pass 1 began following storages
// (0: never), where this pass takes over the replay's live blocks the same way.
// `progress`, when given, is told the fraction of the trace read now and then.
void simulate(TraceReader &reader, std::vector<Scenario> &scenarios,
              const std::unordered_set<uint64_t> &gave, uint64_t start, Replay &replay,
              const std::function<void(double)> &progress = {});

}  // namespace adprof::whatif
