// Pass 2 of the what-if analysis: every scenario replays the recording with its plan applied
// and keeps its own host total; its peak is the prediction (docs/WHATIF.md).
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <cstdint>
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
  // Every scenario follows every live storage of the replay: the flat maps' probes are a
  // third of the node maps' time on a trace of a program that allocates every object.
  absl::flat_hash_map<uint64_t, Live> live;
  absl::flat_hash_map<uint64_t, uint64_t> idle;  // arena model: idle buffers per size
  absl::flat_hash_set<uint64_t> triggered;
  int64_t phys = 0;
  uint64_t peak = 0;

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
void simulate(TraceReader &reader, std::vector<Scenario> &scenarios,
              const std::unordered_set<uint64_t> &gave, uint64_t start, Replay &replay);

}  // namespace adprof::whatif
