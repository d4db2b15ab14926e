// Pass 2 of the what-if analysis: every scenario replays the recording with its plan applied
// and keeps its own host total; its peak is the prediction (docs/WHATIF.md).
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "adprof/trace_reader.h"
#include "plan.h"

namespace adprof::whatif {

// A set of recorded storage ids, each with nonzero flags, asked about in rising order nearly
// always: a storage's id is the index of the event that acquired it, and the acquires come in
// that order (only the storages taken over at the start come in any). A cursor walks the sorted
// ids; an id below the last one asked is searched. (A hash set of the checkpointing scenario's
// ~900,000 storages on a 300-step training run missed the cache on nearly every acquire.)
class IdsInOrder {
 public:
  struct Entry {
    uint64_t id;
    uint8_t flags;
  };
  // The entries of an id that comes several times are merged (their flags or'ed).
  void assign(std::vector<Entry> entries) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry &a, const Entry &b) { return a.id < b.id; });
    entries_.clear();
    for (const Entry &e : entries)
      if (!entries_.empty() && entries_.back().id == e.id)
        entries_.back().flags |= e.flags;
      else
        entries_.push_back(e);
    cursor_ = 0;
    last_ = 0;
  }
  bool empty() const { return entries_.empty(); }
  // The flags of `id` (0: not in the set).
  uint8_t find(uint64_t id) {
    if (id < last_) {  // out of order
      auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                                 [](const Entry &e, uint64_t v) { return e.id < v; });
      return it != entries_.end() && it->id == id ? it->flags : 0;
    }
    last_ = id;
    while (cursor_ < entries_.size() && entries_[cursor_].id < id) ++cursor_;
    return cursor_ < entries_.size() && entries_[cursor_].id == id ? entries_[cursor_].flags : 0;
  }

 private:
  std::vector<Entry> entries_;  // by id, each id once
  size_t cursor_ = 0;
  uint64_t last_ = 0;
};

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
  // The storages this scenario follows one by one: those its plan names (flag kFollowed) and
  // those of the arena model (taken from or given to the pool). Every other storage lives as it
  // did in the recording, from its acquire to its release: it is only its bytes in `phys`.
  // (Every scenario followed every storage before: on a long training run that was most of the
  // report's time, each scenario's map of a hundred thousand storages missing the cache.)
  // `watched` also holds the storages whose death the plan waits for (flag kAwaited).
  static constexpr uint8_t kFollowed = 1, kAwaited = 2;
  IdsInOrder watched;
  // What an acquire tells the tracker to report back at the storage's release (acquire()):
  // the release must be seen (kSeen: the storage is followed, in the arena model, or awaited),
  // and whether it is followed.
  static constexpr unsigned kSeen = 1, kFollowedMark = 2, kMarkBits = 2;
  absl::flat_hash_map<uint64_t, Live> live;
  absl::flat_hash_map<uint64_t, uint64_t> idle;  // arena model: idle buffers per size
  absl::flat_hash_set<uint64_t> triggered;
  int64_t phys = 0;
  uint64_t peak = 0;
  std::map<uint64_t, std::vector<Action>>::iterator next_action;  // in plan.at

  // `watched` from the plan: what it suppresses, holds longer, pools, or acts on, and the
  // deaths it waits for.
  void follow_the_plan() {
    std::vector<IdsInOrder::Entry> w;
    for (uint64_t id : plan.suppress) w.push_back({id, kFollowed});
    for (uint64_t id : plan.pooled) w.push_back({id, kFollowed});
    for (const auto &[id, holds] : plan.extra_holds) w.push_back({id, kFollowed});
    for (const auto &[dies, released] : plan.on_death) {
      w.push_back({released, kFollowed});
      w.push_back({dies, kAwaited});
    }
    for (const auto &[index, actions] : plan.at)  // a birth's storage is the plan's own
      for (const Action &a : actions)
        if (a.type != Action::kBirth) w.push_back({a.id, kFollowed});
    watched.assign(std::move(w));
    next_action = plan.at.begin();
  }
  // A storage of the recording acquired (`arena`: taken from the arena; `gave_back`: the
  // recording gives it back to one later): followed, or only its bytes counted. Returns what
  // its release must report back (kSeen, kFollowedMark; 0: only its bytes go).
  unsigned acquire(uint64_t id, uint64_t size, bool arena, bool gave_back) {
    const uint8_t flags = watched.find(id);
    const bool followed = flags & kFollowed;
    const unsigned marks = (followed ? kSeen | kFollowedMark : 0) | (flags & kAwaited ? kSeen : 0);
    const bool to_pool = gave_back || (followed && plan.pooled.count(id));  // pooled: followed
    if (!arena && !to_pool && !followed) {
      phys += static_cast<int64_t>(size);
      return marks;
    }
    if (plan.suppress.count(id)) return marks | kSeen;
    auto x = plan.extra_holds.find(id);
    const int holds = 1 + (x != plan.extra_holds.end() ? x->second : 0);
    alloc(id, size, arena || to_pool, to_pool, holds);
    return marks | kSeen;
  }
  // The recording releases a storage it acquired; `marks`: what its acquire returned. A
  // storage not seen (neither followed, pooled nor awaited: nothing of it is in `live` or
  // waited for) only takes its bytes away; a followed one loses a hold.
  void release(uint64_t id, uint64_t size, unsigned marks) {
    if (!(marks & kSeen)) {
      phys -= static_cast<int64_t>(size);
      return;
    }
    trigger(id);
    if (live.contains(id))
      release_hold(id);
    else if (!(marks & kFollowedMark))
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
