// What-if analysis (whatif.h): two passes over a trace, reading the engine's tape through the
// AD protocol (adprof/ad_protocol.h, decoded by ad_events.h).
//
//   pass 1: follows every heap block as a sequence of logical storages (a malloc, or a take
//           from the engine's arena, starts one; a free, or a give back to the arena, ends it; a
//           storage is named by the index of the event that started it), and collects each
//           tape generation from the ad.tape.* events: nodes, saves and their
//           releases, backward rules (begin/end and what they allocated), gradient
//           contributions, adjoint sums and completions. At each generation's end, a planner
//           turns it, for every scenario (a set of policies switched on), into a Plan: which
//           storages are never allocated, which die earlier (at which event), which live
//           longer (held until some other storage dies), and which virtual storages appear.
//   pass 2: replays the events again; each scenario applies its plan to the same storages
//           and keeps its own host total, with an arena model (idle buffers per size) for
//           storages the recording gave back to an arena. The scenario's peak is the largest
//           predicted total.
#include "adprof/whatif.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "adprof/ad_events.h"
#include "adprof/replay.h"

namespace adprof {

namespace {

constexpr uint64_t kNone = ~0ULL;

// Policy masks of the AD protocol (bit 1 << adprof_ad_policy).
constexpr uint64_t kActivity = 1ULL << ADPROF_AD_POLICY_ACTIVITY_ANALYSIS,
                   kEarlyRelease = 1ULL << ADPROF_AD_POLICY_EARLY_RELEASE,
                   kInplace = 1ULL << ADPROF_AD_POLICY_INPLACE_ACCUMULATION,
                   kFused = 1ULL << ADPROF_AD_POLICY_FUSED_OPTIMIZER,
                   kCheckpoint = 1ULL << ADPROF_AD_POLICY_CHECKPOINTING,
                   kReuse = 1ULL << ADPROF_AD_POLICY_REUSABLE_TAPE,
                   kNativeIndices = 1ULL << ADPROF_AD_POLICY_NO_INDEX_WIDENING;
constexpr uint64_t kPredictable = kActivity | kEarlyRelease | kInplace | kFused | kNativeIndices;
constexpr uint64_t kDeferred = ADPROF_AD_CONTRIBUTION_DEFERRED;

using ad::Kind;

// ---------------- the recorded storages ----------------
struct Change {
  enum Type : uint8_t { kNoChange, kAcquire, kRelease, kIdleFree } type = kNoChange;
  uint64_t storage = 0;
  uint64_t size = 0;
  bool arena = false;  // acquire: taken from an arena; release: given back to one
  uint64_t addr = 0;
};

// Heap blocks as logical storages. A storage id is the index of the event that started it.
class Tracker {
 public:
  Change apply(const Event &e, uint64_t index) {
    Change c;
    using T = format::EventType;
    if (e.type == T::kAlloc && e.operand == ADPROF_SPACE_HEAP) {
      auto it = blocks_.find(e.addr);
      if (it != blocks_.end()) {  // a lost free: the old block is gone
        phys_ -= it->second.size;
        blocks_.erase(it);
      }
      blocks_[e.addr] = Block{index, e.a, false};
      phys_ += e.a;
      c = {Change::kAcquire, index, e.a, false, e.addr};
    } else if (e.type == T::kFree && e.operand == ADPROF_SPACE_HEAP) {
      auto it = blocks_.find(e.addr);
      if (it == blocks_.end()) return c;
      Block b = it->second;
      blocks_.erase(it);
      phys_ -= b.size;
      if (b.idle)
        c = {Change::kIdleFree, 0, b.size, true, e.addr};
      else
        c = {Change::kRelease, b.storage, b.size, false, e.addr};
    } else if (e.type == T::kRetag) {
      auto it = blocks_.find(e.addr);
      if (it == blocks_.end()) return c;
      Block &b = it->second;
      if (e.operand == ADPROF_ROLE_WORKSPACE && !b.idle) {  // given back to the arena
        b.idle = true;
        c = {Change::kRelease, b.storage, b.size, true, e.addr};
      } else if (e.operand != ADPROF_ROLE_WORKSPACE && b.idle) {  // taken from the arena
        b.idle = false;
        b.storage = index;
        c = {Change::kAcquire, index, b.size, true, e.addr};
      }
    }
    return c;
  }
  // The storage live at a block address (0: none).
  std::pair<uint64_t, uint64_t> storage_at(uint64_t addr) const {
    auto it = blocks_.find(addr);
    if (it == blocks_.end() || it->second.idle) return {0, 0};
    return {it->second.storage, it->second.size};
  }
  uint64_t phys() const { return phys_; }

 private:
  struct Block {
    uint64_t storage;
    uint64_t size;
    bool idle;
  };
  std::unordered_map<uint64_t, Block> blocks_;
  uint64_t phys_ = 0;
};

// ---------------- pass 1: tape generations ----------------
struct Fact {
  uint64_t size = 0;
  uint64_t death = 0;        // event index of its recorded death (0: not before the tape's end)
  bool tape_killed = false;  // died because the tape released it (the tape was the last holder)
  int64_t rule = -1;         // allocated by this node's backward rule
  bool tensor = false;       // described (a tensor storage)
};
// A storage allocated inside a node's forward op scope (its output, or a workspace that died
// before the node was recorded: transient).
struct FwdAlloc {
  uint64_t storage = 0, size = 0;
  bool transient = false;
  bool tensor = false;  // described (a tensor storage), else the tape's own bookkeeping
};
struct Save {
  uint64_t storage = 0, slot = 0, users = kNone, release = 0;
};
struct Contribution {
  int64_t from = -1;
  uint64_t buffer = 0, source = 0, bytes = 0, mode = 0, index = 0;
};
struct NodeInfo {
  bool leaf = false, requires_grad = false, checkpoint = false, requested = false;
  uint64_t out = 0, bytes = 0;
  uint32_t op = 0;            // op name id
  uint64_t at = 0;            // event index of its ad.tape.node event
  std::vector<FwdAlloc> fwd;  // allocated by its forward (for the checkpointing what-if)
  std::vector<int64_t> in;
  std::vector<Save> saves;
  uint64_t rule_begin = 0, rule_end = 0;
  std::vector<uint64_t> rule_allocs, deliver_allocs;
  std::vector<Contribution> contributions;  // to this node
  uint64_t sum = 0, sum_index = 0;          // adjoint_sum (naive accumulation)
  uint64_t complete = 0, complete_index = 0;
};
struct Gen {
  uint64_t tape = 0, gen = 0, bits = 0;
  uint32_t thread = 0;
  bool backward = false, have_flags = false;
  uint64_t backward_bits = 0, flags = 0, backward_index = 0, end_index = 0;
  int64_t root = -1;
  std::vector<NodeInfo> nodes;
  std::unordered_map<uint64_t, Fact> facts;
  // Tensor storages made while the generation was in flight (for the arena model of a tape
  // recorded without reuse): before and after the backward sweep began.
  std::vector<uint64_t> window_forward, window_backward;
  NodeInfo &node(uint64_t id) {
    if (id >= nodes.size()) nodes.resize(std::min<uint64_t>(id + 1, 1ULL << 31));
    return nodes[std::min<uint64_t>(id, nodes.size() - 1)];
  }
  Fact &fact(uint64_t storage, uint64_t size) {
    Fact &f = facts[storage];
    if (!f.size) f.size = size;
    return f;
  }
};

// ---------------- plans ----------------
struct Action {
  enum Type : uint8_t { kKill, kReleaseHold, kBirth } type;
  uint64_t id;
  uint64_t size = 0;
  bool arena = false;
  bool probe = false;  // take the predicted total right after this action (a transient)
};
// What the checkpointing what-if did to the longest chain (of the generation with the longest).
struct ChainStats {
  uint64_t nodes = 0, layers = 0, ops_per_layer = 0, segments = 0, generations = 0;
  bool periodic = false;
  uint64_t dropped = 0, dropped_bytes = 0;  // outputs not kept by the forward
  uint64_t recomputed_bytes = 0;            // allocated again by the recomputation (all segments)
  std::vector<uint32_t> layer_ops;          // op name ids of one layer
};
struct Plan {
  std::unordered_set<uint64_t> suppress;                 // never allocated
  std::unordered_map<uint64_t, int> extra_holds;         // held beyond its own recorded life
  std::unordered_multimap<uint64_t, uint64_t> on_death;  // when key dies: release a hold of value
  std::map<uint64_t, std::vector<Action>> at;            // after event index: actions
  std::unordered_set<uint64_t> pooled;                   // storages the arena would hold
  uint64_t suppressed_bytes = 0, virtual_bytes = 0, early_bytes = 0, early_count = 0,
           suppressed_count = 0, virtual_count = 0;
  ChainStats chain;
};
uint64_t g_virtual_ids = 1ULL << 62;

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
  std::unordered_map<uint64_t, Live> live;
  std::unordered_map<uint64_t, uint64_t> idle;  // arena model: idle buffers per size
  std::unordered_set<uint64_t> triggered;
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
    if (!triggered.insert(id).second) return;
    auto [b, e] = plan.on_death.equal_range(id);
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

// The planner: one generation, one scenario.
struct Planner {
  Planner(Gen &gen, uint64_t f, Plan &plan) : g(gen), flip(f), p(plan) {}
  Gen &g;
  uint64_t flip;  // policies switched on that were off in this generation
  Plan &p;

  void suppress(uint64_t s) {
    if (!s || !p.suppress.insert(s).second) return;
    auto f = g.facts.find(s);
    if (f != g.facts.end()) {
      p.suppressed_bytes += f->second.size;
      ++p.suppressed_count;
    }
  }
  void kill_at(uint64_t index, uint64_t s) {
    p.at[index].push_back({Action::kKill, s});
    auto f = g.facts.find(s);
    if (f != g.facts.end() && !p.suppress.count(s)) {
      p.early_bytes += f->second.size;
      ++p.early_count;
    }
  }

  std::vector<char> active, useful;
  std::vector<uint64_t> active_inputs;  // bit j: input j active (predicted)

  void activity() {
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
  bool fresh(uint64_t s, int64_t from) const {
    auto f = g.facts.find(s);
    return s && f != g.facts.end() && f->second.rule == from;
  }
  bool save_exists(size_t node, const Save &s) const {
    if (!(flip & kActivity)) return true;
    if (!active[node]) return false;
    return s.users == kNone || (s.users & active_inputs[node]) != 0;
  }

  // Forward caches: a storage the tape killed dies at its last predicted release.
  void saves() {
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

  void inplace() {
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
      if (s >= g_virtual_ids) return true;
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
      const uint64_t sz = now >= g_virtual_ids ? vsize[now] : size_of(now);
      const bool unique = holders[now] == 1 && death_before(now, k.index) &&
                          (al == alias.end() || death_before(al->second, k.index)) && sz == k.bytes;
      if (unique) continue;
      const uint64_t v = g_virtual_ids++;
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

  void fused() {
    if (!(flip & kFused) || !g.backward) return;
    if (g.have_flags && (!(g.flags & ADPROF_AD_BACKWARD_TO_LEAF_GRADS) ||
                         !(g.flags & ADPROF_AD_BACKWARD_OPTIMIZER)))
      return;  // no optimizer given
    for (NodeInfo &nd : g.nodes) {
      if (!nd.leaf || !nd.requires_grad || !nd.complete) continue;
      kill_at(nd.complete_index, nd.complete);
      for (uint64_t s : nd.deliver_allocs) suppress(s);
    }
  }

  // A reusable tape: storages made inside value_and_grad or a backward sweep go back to the
  // tape's arena (kept idle, by size) instead of to the allocator.
  void reuse() {
    if (!(flip & kReuse)) return;
    if (g.have_flags && (g.flags & ADPROF_AD_BACKWARD_IN_CALL))
      p.pooled.insert(g.window_forward.begin(), g.window_forward.end());
    p.pooled.insert(g.window_backward.begin(), g.window_backward.end());
  }

  // ---- checkpointing: the longest chain in sqrt(n) segments ----
  // A chain: nodes each consuming the previous node's output, that output used by no other
  // node, any other input a leaf or inactive. Its layers: the shortest period of its op names
  // that covers the most nodes (a stack of identical layers; at least 2 repeats), else one node
  // per layer.
  struct Run {
    std::vector<size_t> nodes;  // the checkpointed nodes, in order
    size_t period = 1, layers = 0;
    bool periodic = false;  // layers found as repeats (else one node per layer)
    int64_t input = -1;     // the node whose output feeds the first one
  };
  static constexpr size_t kMaxLayerOps = 256;

  bool find_run(Run &r) const {
    const size_t n = g.nodes.size();
    std::vector<uint32_t> consumers(n, 0), len(n, 0);
    std::vector<int64_t> pred(n, -1);
    for (const NodeInfo &nd : g.nodes)
      for (int64_t in : nd.in)
        if (in >= 0 && static_cast<size_t>(in) < n) ++consumers[static_cast<size_t>(in)];
    size_t end = 0;
    uint32_t best = 0;
    for (size_t i = 0; i < n; ++i) {
      const NodeInfo &nd = g.nodes[i];
      if (nd.leaf || nd.checkpoint || !nd.at) continue;
      int64_t prev = -1;
      bool ok = true;
      for (int64_t in : nd.in) {
        if (in < 0) continue;
        if (static_cast<size_t>(in) >= i) {
          ok = false;
          break;
        }
        if (g.nodes[static_cast<size_t>(in)].leaf) continue;
        if (prev >= 0 && prev != in) {
          ok = false;
          break;
        }
        prev = in;
      }
      if (!ok) continue;
      len[i] = 1;
      if (prev >= 0 && len[static_cast<size_t>(prev)] &&
          consumers[static_cast<size_t>(prev)] == 1) {
        pred[i] = prev;
        len[i] = len[static_cast<size_t>(prev)] + 1;
      }
      if (len[i] > best) {
        best = len[i];
        end = i;
      }
    }
    if (best < 2) return false;
    std::vector<size_t> c(best);
    {
      int64_t i = static_cast<int64_t>(end);
      for (size_t k = best; k-- > 0; i = pred[static_cast<size_t>(i)])
        c[k] = static_cast<size_t>(i);
    }
    const size_t m = c.size();
    auto op = [&](size_t k) { return g.nodes[c[k]].op; };
    size_t bp = 1, bstart = 0, bcount = 0, bcov = 0;
    for (size_t p = 1; p <= std::min(m / 2, kMaxLayerOps); ++p) {
      size_t i = 0;
      while (i + p < m) {
        if (op(i) != op(i + p)) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j + p < m && op(j) == op(j + p)) ++j;
        const size_t count = (j - i + p) / p;
        if (count >= 2 && count * p > bcov) {
          bcov = count * p;
          bp = p;
          bstart = i;
          bcount = count;
        }
        i = j;
      }
    }
    r.periodic = bcount >= 2;
    if (bcount < 2) {  // no repeated layer: every node is a layer
      bp = 1;
      bstart = 0;
      bcount = m;
    }
    r.period = bp;
    r.layers = bcount;
    r.nodes.assign(c.begin() + static_cast<std::ptrdiff_t>(bstart),
                   c.begin() + static_cast<std::ptrdiff_t>(bstart + bp * bcount));
    // The segment input: the chain's previous node, else (all inputs leaves) a requested one,
    // else the first active one; other inputs are captured by the segment.
    r.input = pred[r.nodes[0]];
    for (int64_t in : g.nodes[r.nodes[0]].in)
      if (in >= 0 && (r.input < 0 || (g.nodes[static_cast<size_t>(in)].requested &&
                                      !g.nodes[static_cast<size_t>(r.input)].requested)))
        r.input = in;
    return r.layers >= 2;
  }

  // Models a sequential checkpoint over the run (the engine's checkpoint segments, as the
  // ad.tape.checkpoint event describes them): the forward keeps only each segment's input; in
  // backward, just before a segment's rules, the segment is recomputed on a nested tape (its
  // forward allocations again, in the outer tape's arena), those caches die as the rules release
  // them (the segment's output and the incoming gradient live until the segment's backward is
  // over), the input's gradient is delivered as a copy, then the segment's input is released.
  void checkpoint_chain() {
    Run r;
    if (!find_run(r)) return;
    const size_t n = g.nodes.size(), per = r.period, L = r.layers;
    size_t S = static_cast<size_t>(std::lround(std::sqrt(static_cast<double>(L))));
    S = std::max<size_t>(1, std::min(S, L));
    const bool arena = ((g.backward_bits | g.bits) & kReuse) != 0;
    const bool early = ((g.backward ? g.backward_bits : g.bits) & kEarlyRelease) != 0;
    // The nested tape returns the input's gradient as a requested one, through owned(): a copy,
    // unless the recording shows a requested leaf's gradient delivered without one.
    bool deliver_copy = true;
    for (const NodeInfo &nd : g.nodes)
      if (nd.leaf && nd.requested && nd.complete && nd.deliver_allocs.empty()) deliver_copy = false;
    std::vector<char> in_run(n, 0);
    for (size_t j : r.nodes) in_run[j] = 1;
    std::vector<int64_t> last_consumer(n, -1);
    for (size_t i = 0; i < n; ++i)
      for (int64_t in : g.nodes[i].in)
        if (in >= 0 && static_cast<size_t>(in) < n)
          last_consumer[static_cast<size_t>(in)] =
              std::max(last_consumer[static_cast<size_t>(in)], static_cast<int64_t>(i));
    auto fact_of = [&](uint64_t s) -> const Fact * {
      auto f = s ? g.facts.find(s) : g.facts.end();
      return f != g.facts.end() ? &f->second : nullptr;
    };
    // The latest release of a save of s by a node outside the run.
    auto outside_release = [&](uint64_t s) {
      uint64_t d = 0;
      for (size_t i = 0; i < n; ++i) {
        if (in_run[i]) continue;
        for (const Save &sv : g.nodes[i].saves)
          if (sv.storage == s) d = std::max(d, sv.release ? sv.release : g.end_index);
      }
      return d;
    };
    auto at_of = [&](size_t q) { return g.nodes[r.nodes[q]].at; };
    ChainStats st;
    st.nodes = r.nodes.size();
    st.layers = L;
    st.ops_per_layer = per;
    st.segments = S;
    st.generations = 1;
    st.periodic = r.periodic;
    for (size_t k = 0; k < (r.periodic ? per : std::min<size_t>(r.nodes.size(), 8)); ++k)
      st.layer_ops.push_back(g.nodes[r.nodes[k]].op);
    auto kill_early = [&](uint64_t s, uint64_t idx, std::vector<Action> *list) {
      const Fact *f = fact_of(s);
      if (!f || !f->tape_killed || !idx || (f->death && idx >= f->death)) return false;
      if (list)
        list->push_back({Action::kKill, s});
      else
        p.at[idx].push_back({Action::kKill, s});
      return true;
    };

    // Segments, as positions in r.nodes: [b, e).
    struct Seg {
      size_t b, e;
      uint64_t done = 0, grad_bytes = 0;  // its backward is over; its input's gradient
    };
    std::vector<Seg> segs;
    for (size_t k = 0; k < S; ++k)
      segs.push_back({k * L / S * per, (k + 1 < S ? (k + 1) * L / S : L) * per});
    for (Seg &sg : segs) {
      const size_t b = r.nodes[sg.b];
      const int64_t in = sg.b ? static_cast<int64_t>(r.nodes[sg.b - 1]) : r.input;
      if (in >= 0)
        for (const Contribution &c : g.nodes[static_cast<size_t>(in)].contributions)
          if (c.from == static_cast<int64_t>(b)) {
            sg.done = c.index;
            sg.grad_bytes = c.bytes;
          }
      if (!sg.done) sg.done = g.nodes[b].rule_end;
    }

    // Forward: nothing inside a segment is kept. An output the tape held dies where the layer
    // code drops it: a layer's input at the end of that layer, any other value after its last
    // consumer. Segment outputs: the next segment's input (released after that segment's
    // backward, below), or the run's output (dropped after its consumers, or kept by their saves).
    std::unordered_map<uint64_t, uint64_t> drop;  // storage -> predicted death
    std::unordered_set<uint64_t> boundary;
    for (size_t k = 0; k + 1 < segs.size(); ++k)
      boundary.insert(g.nodes[r.nodes[segs[k].e - 1]].out);
    for (size_t k = 0; k < segs.size(); ++k)
      for (size_t q = segs[k].b; q < segs[k].e; ++q) {
        const size_t j = r.nodes[q];
        const uint64_t s = g.nodes[j].out;
        if (!s || boundary.count(s)) continue;
        uint64_t idx;
        if (q + 1 == r.nodes.size()) {
          idx = last_consumer[j] >= 0 ? g.nodes[static_cast<size_t>(last_consumer[j])].at
                                      : g.nodes[j].at;
          idx = std::max(idx, outside_release(s));
        } else if ((q + 1) % per == 0) {
          idx = at_of(q + per);  // a layer's input: dropped when the layer has run
        } else {
          idx = last_consumer[j] >= 0 ? g.nodes[static_cast<size_t>(last_consumer[j])].at : 0;
        }
        uint64_t &d = drop[s];
        d = std::max(d, idx);
      }
    for (const auto &[s, idx] : drop)
      if (kill_early(s, idx, nullptr)) {
        ++st.dropped;
        st.dropped_bytes += g.facts[s].size;
      }
    // The plain tape's bookkeeping for the run's nodes (node objects, saved tensor headers, what
    // a reusable tape keeps of them), allocated by their forward or kept from their rules: the
    // checkpointed tape records one node per segment instead, and the nested tapes' own
    // bookkeeping dies with them.
    for (size_t j : r.nodes) {
      const NodeInfo &nd = g.nodes[j];
      for (const FwdAlloc &a : nd.fwd)
        if (!a.tensor && !a.transient) suppress(a.storage);
      for (uint64_t s : nd.rule_allocs) {
        const Fact *f = fact_of(s);
        if (f && !f->tensor && (!f->death || f->death > nd.rule_end)) suppress(s);
      }
    }

    // Backward: per segment, recompute, then release at `done`.
    for (size_t k = 0; k < segs.size(); ++k) {
      const Seg &sg = segs[k];
      const NodeInfo &last = g.nodes[r.nodes[sg.e - 1]];
      const NodeInfo &first = g.nodes[r.nodes[sg.b]];
      if (!last.rule_begin || !first.rule_end || !sg.done) continue;
      std::vector<Action> &rec = p.at[last.rule_begin];
      std::vector<Action> at_done;
      std::vector<std::vector<uint64_t>> after(sg.e - sg.b);
      for (size_t q = sg.b; q < sg.e; ++q) {
        const NodeInfo &nd = g.nodes[r.nodes[q]];
        std::vector<uint64_t> transient;
        for (const FwdAlloc &a : nd.fwd) {
          if (!a.tensor && !a.transient) continue;  // bookkeeping of the plain tape (below)
          const uint64_t v = g_virtual_ids++;
          rec.push_back({Action::kBirth, v, a.size, arena, true});
          st.recomputed_bytes += a.size;
          if (a.transient) {
            transient.push_back(v);
            continue;
          }
          if (q + 1 == sg.e && a.storage == nd.out) {  // the segment's output: until the end
            at_done.push_back({Action::kKill, v});
            continue;
          }
          const Fact *f = fact_of(a.storage);
          if (f && f->tape_killed) {  // a cache: released by its rule (or at the end)
            if (f->death && f->death < sg.done)
              p.at[f->death].push_back({Action::kKill, v});
            else
              at_done.push_back({Action::kKill, v});
            continue;
          }
          // Not kept: dies where it died in the recorded forward (after the same node).
          const uint64_t d = f ? f->death : 0;
          if (!d) {
            at_done.push_back({Action::kKill, v});
            continue;
          }
          size_t k2 = q;
          while (k2 + 1 < sg.e && at_of(k2 + 1) <= d) ++k2;
          after[k2 - sg.b].push_back(v);
        }
        for (uint64_t v : transient) rec.push_back({Action::kKill, v});
        for (uint64_t v : after[q - sg.b]) rec.push_back({Action::kKill, v});
      }
      std::vector<Action> &end = p.at[sg.done];
      if (deliver_copy && sg.grad_bytes) {  // the nested tape delivers the input's gradient
        const uint64_t v = g_virtual_ids++;
        end.push_back({Action::kBirth, v, sg.grad_bytes, arena, true});
        end.push_back({Action::kKill, v});
      }
      end.insert(end.end(), at_done.begin(), at_done.end());
      // The gradient the segment was seeded with lives until its backward is over.
      uint64_t seed = last.sum;
      if (!seed)
        for (const Contribution &c : last.contributions)
          if (c.index < last.rule_begin) seed = c.buffer;
      const Fact *sf = fact_of(seed);
      if (sf && sf->death && sf->death < sg.done) {
        ++p.extra_holds[seed];
        end.push_back({Action::kReleaseHold, seed});
      }
      // The segment's input, kept by the checkpoint node, is released after its backward.
      if (!early) continue;
      if (k > 0) {
        kill_early(g.nodes[r.nodes[sg.b - 1]].out, sg.done, &end);
      } else if (r.input >= 0 && !g.nodes[static_cast<size_t>(r.input)].leaf) {
        const uint64_t s = g.nodes[static_cast<size_t>(r.input)].out;
        const uint64_t d = std::max(sg.done, outside_release(s));
        kill_early(s, d, d == sg.done ? &end : nullptr);
      }
    }
    ChainStats &pc = p.chain;
    const uint64_t gens = pc.generations + 1;
    if (st.nodes > pc.nodes) pc = st;
    pc.generations = gens;
  }

  void run() {
    reuse();
    activity();
    saves();
    inplace();
    fused();
  }
};

// The policies a prediction may switch on: those the engine described, or all of them when it
// did not describe itself.
uint64_t available_policies(const ad::EngineDescription &e) {
  if (!e.described()) return ~0ULL;
  uint64_t m = 0;
  for (int i = 0; i < ADPROF_AD_POLICY_COUNT; ++i)
    if (e.policy(i).described) m |= 1ULL << i;
  return m;
}

struct ThreadState {
  std::vector<Gen *> tapes;  // generations begun and not ended
  struct Rule {
    Gen *gen;
    uint64_t node;
    size_t depth;
  };
  std::vector<Rule> rules;
  Gen *deliver_gen = nullptr;
  uint64_t deliver_node = 0;
  uint64_t pending_release_addr = 0;          // the last annotation was a release of this address
  bool forward = false;                       // in the forward phase
  std::vector<uint64_t> since_forward;        // storages described since the forward phase began
  std::vector<std::vector<FwdAlloc>> scopes;  // per open op scope: storages acquired in it
};

std::string mib(double bytes) {
  char b[48];
  const double a = std::fabs(bytes);
  if (a >= 1024.0 * 1024 * 1024)
    std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024)
    std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024));
  else if (a >= 1024.0)
    std::snprintf(b, sizeof b, "%.1f KiB", bytes / 1024.0);
  else
    std::snprintf(b, sizeof b, "%.0f B", bytes);
  return b;
}

}  // namespace

WhatIf predict_policies(const std::string &trace_path) {
  TraceReader reader(trace_path);
  WhatIf w = predict_policies(reader);
  w.trace = trace_path;
  return w;
}

WhatIf predict_policies(TraceReader &reader) {
  WhatIf w;
  // ---- pass 1 ----
  Replay replay;
  Tracker tracker;
  std::vector<ThreadState> threads;
  ad::Decoder decoder(replay);
  std::unordered_set<uint64_t> gave;       // storages the recording gave back to an arena
  std::vector<uint64_t> widened;           // storages labelled ad.index_widened
  std::vector<std::unique_ptr<Gen>> open;  // generations in flight
  uint64_t widened_bytes = 0;

  // Scenarios: 0 the recording as is; then one per predictable policy; then all of them.
  std::vector<Scenario> sc;
  sc.emplace_back();
  const auto &policies = ad::policy_names();
  std::vector<int> policy_scenario(policies.size(), -1);
  for (size_t i = 0; i < policies.size(); ++i) {
    const uint64_t bit = 1ULL << policies[i].id;
    if (!(bit & kPredictable)) continue;
    policy_scenario[i] = static_cast<int>(sc.size());
    sc.emplace_back();
    sc.back().flip = bit;
  }
  const int all_scenario = static_cast<int>(sc.size());
  sc.emplace_back();
  sc.back().flip = kPredictable | kReuse;
  // Checkpointing: a program change (the longest chain checkpointed in sqrt(n) segments), so
  // a scenario of its own, planned for every generation whatever its policy bits.
  const int chain_scenario = static_cast<int>(sc.size());
  sc.emplace_back();
  sc.back().chain = true;
  for (size_t i = 0; i < policies.size(); ++i)
    if ((1ULL << policies[i].id) == kCheckpoint) policy_scenario[i] = chain_scenario;
  bool checkpoint_nodes = false;  // the recording has checkpoint segments

  auto thread_state = [&](uint32_t t) -> ThreadState & {
    if (t >= threads.size()) threads.resize(t + 1);
    return threads[t];
  };
  bool first_bits = true;
  uint64_t index = 0;
  Event e;
  while (reader.next(e)) {
    ++index;
    const bool changed = replay.apply(e);
    if (changed) w.measured_peak = std::max(w.measured_peak, replay.host_live());
    ThreadState &ts = thread_state(e.thread);
    const Change c = tracker.apply(e, index);
    if (c.type == Change::kAcquire) {
      ts.pending_release_addr = 0;
      if (!ts.scopes.empty()) ts.scopes.back().push_back({c.storage, c.size, false});
      if (!ts.rules.empty()) {
        ThreadState::Rule &r = ts.rules.back();
        r.gen->fact(c.storage, c.size).rule = static_cast<int64_t>(r.node);
        r.gen->node(r.node).rule_allocs.push_back(c.storage);
      } else if (ts.deliver_gen) {
        ts.deliver_gen->fact(c.storage, c.size);
        ts.deliver_gen->node(ts.deliver_node).deliver_allocs.push_back(c.storage);
      }
    } else if (c.type == Change::kRelease) {
      if (c.arena) gave.insert(c.storage);
      if (!ts.scopes.empty())
        for (FwdAlloc &a : ts.scopes.back())
          if (a.storage == c.storage) a.transient = true;
      const bool killed = ts.pending_release_addr == c.addr;
      for (auto &g : open) {
        auto f = g->facts.find(c.storage);
        if (f == g->facts.end()) continue;
        f->second.death = index;
        f->second.tape_killed = killed;
      }
    }
    using T = format::EventType;
    if (e.type == T::kOpBegin) {
      ts.scopes.emplace_back();
      continue;
    }
    if (e.type == T::kOpEnd) {
      if (!ts.scopes.empty()) ts.scopes.pop_back();
      const size_t depth = replay.op_stack(e.thread).size();
      while (!ts.rules.empty() && ts.rules.back().depth > depth) {
        ts.rules.back().gen->node(ts.rules.back().node).rule_end = index;
        ts.rules.pop_back();
      }
      continue;
    }
    if (e.type == T::kPhase) {
      const bool fwd = e.operand == ADPROF_PHASE_FORWARD;
      if (fwd && !ts.forward) ts.since_forward.clear();
      ts.forward = fwd;
      if (e.operand == ADPROF_PHASE_OTHER) ts.since_forward.clear();
      continue;
    }
    if (e.type == T::kDescribe) {
      const uint64_t s = tracker.storage_at(e.addr).first;
      if (s) {
        if (!ts.scopes.empty())
          for (FwdAlloc &a : ts.scopes.back())
            if (a.storage == s) a.tensor = true;
        for (auto &gp : open) {
          auto f = gp->facts.find(s);
          if (f != gp->facts.end()) f->second.tensor = true;
        }
        if (!ts.tapes.empty()) {
          Gen &g = *ts.tapes.back();
          (g.backward ? g.window_backward : g.window_forward).push_back(s);
        } else if (ts.forward) {
          ts.since_forward.push_back(s);
        }
      }
      continue;
    }
    if (e.type == T::kLabel) {
      if (decoder.label(e) == Kind::kLabelIndexWidened) {
        auto [s, size] = tracker.storage_at(e.addr);
        if (s) {
          widened.push_back(s);
          widened_bytes += size;
        }
      }
      continue;
    }
    if (e.type != T::kAnnotate) continue;
    const ad::Decoder::Annotation an = decoder.annotation(e);
    const Kind k = an.kind;
    if (k == Kind::kNone) continue;
    const auto v = an.values;
    auto val = [&](size_t i) { return i < v.size() ? v[i] : kNone; };
    ts.deliver_gen = nullptr;
    ts.pending_release_addr = 0;
    if (k == Kind::kTapeBegin) {
      auto g = std::make_unique<Gen>();
      g->tape = val(0);
      g->gen = val(1);
      g->bits = val(2) == kNone ? 0 : val(2);
      g->thread = e.thread;
      w.ad_tape = true;
      ++w.tapes;
      if (first_bits) {
        w.recorded_bits_and = g->bits;
        first_bits = false;
      }
      w.recorded_bits_and &= g->bits;
      w.recorded_bits_or |= g->bits;
      g->window_forward = std::move(ts.since_forward);
      ts.since_forward.clear();
      ts.tapes.push_back(g.get());
      open.push_back(std::move(g));
      continue;
    }
    if (ts.tapes.empty()) continue;
    Gen &g = *ts.tapes.back();
    switch (k) {
      case Kind::kLeaf: {
        if (v.size() < 3) break;
        NodeInfo &nd = g.node(v[0]);
        auto [s, size] = tracker.storage_at(v[1]);
        nd.out = s;
        nd.bytes = v[2];
        nd.at = index;
        if (s) g.fact(s, size);
        nd.leaf = true;
        nd.requires_grad = val(3) == 1;
        break;
      }
      case Kind::kNode: {
        if (v.size() < 5) break;
        NodeInfo &nd = g.node(v[0]);
        auto [s, size] = tracker.storage_at(v[2]);
        nd.out = s;
        nd.bytes = v[3];
        nd.op = static_cast<uint32_t>(v[1]);
        nd.at = index;
        if (s) g.fact(s, size);
        {
          nd.in.clear();
          for (size_t i = 5; i < v.size() && i < 5 + v[4]; ++i)
            nd.in.push_back(v[i] == kNone ? -1 : static_cast<int64_t>(v[i]));
          if (!ts.scopes.empty()) {  // what its forward allocated (its op scope is open)
            nd.fwd = std::move(ts.scopes.back());
            ts.scopes.back().clear();
            for (const FwdAlloc &a : nd.fwd)
              if (!a.transient) g.fact(a.storage, a.size);
          }
        }
        break;
      }
      case Kind::kSave: {
        if (v.size() < 4) break;
        auto [s, size] = tracker.storage_at(v[1]);
        if (s) g.fact(s, size);
        g.node(v[0]).saves.push_back({s, v[3], val(4), 0});
        break;
      }
      case Kind::kRelease: {
        if (v.size() < 2) break;
        auto [s, size] = tracker.storage_at(v[1]);
        for (Save &sv : g.node(v[0]).saves)
          if (sv.storage == s && !sv.release) {
            sv.release = index;
            break;
          }
        ts.pending_release_addr = v[1];
        break;
      }
      case Kind::kCheckpoint:
        if (!v.empty()) g.node(v[0]).checkpoint = true;
        checkpoint_nodes = true;
        break;
      case Kind::kBackwardBegin:
        g.backward = true;
        g.backward_index = index;
        g.root = v.empty() ? -1 : static_cast<int64_t>(v[0]);
        g.backward_bits = val(2) == kNone ? g.bits : val(2);
        if (v.size() >= 4) {
          g.have_flags = true;
          g.flags = v[3];
        }
        break;
      case Kind::kRequested:
        for (uint64_t id : v) g.node(id).requested = true;
        break;
      case Kind::kBackwardNode:
        if (!v.empty()) {
          g.node(v[0]).rule_begin = index;
          ts.rules.push_back({&g, v[0], replay.op_stack(e.thread).size()});
        }
        break;
      case Kind::kContribution: {
        if (v.size() < 5) break;
        auto [b, bsize] = tracker.storage_at(v[2]);
        uint64_t src = 0;
        if (v.size() >= 6) {
          auto [s, ssize] = tracker.storage_at(v[5]);
          src = s;
          if (s) g.fact(s, ssize);
        }
        if (b) g.fact(b, bsize);
        g.node(v[0]).contributions.push_back(
            {static_cast<int64_t>(v[1]), b, src, v[3], v[4], index});
        break;
      }
      case Kind::kAdjointComplete: {
        if (v.size() < 2) break;
        auto [s, size] = tracker.storage_at(v[1]);
        NodeInfo &nd = g.node(v[0]);
        nd.complete = s;
        nd.complete_index = index;
        if (s) g.fact(s, size);
        ts.deliver_gen = &g;
        ts.deliver_node = v[0];
        break;
      }
      case Kind::kAdjointSum: {
        if (v.size() < 2) break;
        auto [s, size] = tracker.storage_at(v[1]);
        NodeInfo &nd = g.node(v[0]);
        nd.sum = s;
        nd.sum_index = index;
        if (s) g.fact(s, size);
        break;
      }
      case Kind::kTapeEnd: {
        // The generation is complete: plan it for every scenario, then forget it.
        Gen *gp = nullptr;
        for (size_t i = ts.tapes.size(); i-- > 0;)
          if (ts.tapes[i]->tape == val(0)) {
            gp = ts.tapes[i];
            ts.tapes.erase(ts.tapes.begin() + static_cast<std::ptrdiff_t>(i));
            break;
          }
        if (!gp) break;
        gp->end_index = index;
        for (auto it = ts.rules.begin(); it != ts.rules.end();)
          it = it->gen == gp ? ts.rules.erase(it) : it + 1;
        const uint64_t available = available_policies(decoder.engine());
        for (Scenario &s : sc) {
          if (s.chain) {
            if (available & kCheckpoint) Planner(*gp, 0, s.plan).checkpoint_chain();
            continue;
          }
          const uint64_t flip = s.flip & ~gp->bits & available;
          if (!flip) continue;
          Planner(*gp, flip, s.plan).run();
        }
        for (auto it = open.begin(); it != open.end(); ++it)
          if (it->get() == gp) {
            open.erase(it);
            break;
          }
        break;
      }
      default:
        break;
    }
  }
  // Generations never ended (a cut trace): plan what was seen.
  const ad::EngineDescription engine = decoder.engine();
  const uint64_t available = available_policies(engine);
  for (auto &g : open) {
    g->end_index = index;
    for (Scenario &s : sc) {
      const uint64_t flip = s.flip & ~g->bits & available;
      if (s.chain && (available & kCheckpoint))
        Planner(*g, 0, s.plan).checkpoint_chain();
      else if (flip)
        Planner(*g, flip, s.plan).run();
    }
  }
  open.clear();
  for (Scenario &s : sc)
    if (s.flip & kNativeIndices)
      for (uint64_t id : widened) {
        if (s.plan.suppress.insert(id).second) {
          ++s.plan.suppressed_count;
        }
      }

  // ---- pass 2 ----
  reader.rewind();
  Replay replay2;
  Tracker tracker2;
  index = 0;
  while (reader.next(e)) {
    ++index;
    replay2.apply(e);
    const Change c = tracker2.apply(e, index);
    for (Scenario &s : sc) {
      if (c.type == Change::kAcquire) {
        if (!s.plan.suppress.count(c.storage)) {
          auto x = s.plan.extra_holds.find(c.storage);
          const int holds = 1 + (x != s.plan.extra_holds.end() ? x->second : 0);
          const bool to_pool = gave.count(c.storage) > 0 || s.plan.pooled.count(c.storage) > 0;
          s.alloc(c.storage, c.size, c.arena || to_pool, to_pool, holds);
        }
      } else if (c.type == Change::kRelease) {
        s.trigger(c.storage);
        s.release_hold(c.storage);
      } else if (c.type == Change::kIdleFree) {
        auto it = s.idle.find(c.size);
        if (it != s.idle.end() && it->second > 0) {
          --it->second;
          s.phys -= static_cast<int64_t>(c.size);
        }
      }
      auto a = s.plan.at.find(index);
      auto total_now = [&] {
        return static_cast<int64_t>(replay2.host_live()) - static_cast<int64_t>(tracker2.phys()) +
               s.phys;
      };
      if (a != s.plan.at.end()) {
        for (const Action &act : a->second) {
          if (act.type == Action::kKill) {
            s.kill(act.id);
          } else if (act.type == Action::kReleaseHold) {
            s.release_hold(act.id);
          } else {
            auto x = s.plan.extra_holds.find(act.id);
            s.alloc(act.id, act.size, act.arena, act.arena,
                    x != s.plan.extra_holds.end() ? x->second : 1);
          }
          if (act.probe && total_now() > 0)
            s.peak = std::max(s.peak, static_cast<uint64_t>(total_now()));
        }
        s.plan.at.erase(a);
      }
      const int64_t total = total_now();
      if (total > 0) s.peak = std::max(s.peak, static_cast<uint64_t>(total));
    }
  }

  // ---- results ----
  w.replayed_peak = sc[0].peak;
  const uint64_t measured = w.measured_peak;
  auto fill = [&](PolicyPrediction &p, const Scenario &s) {
    p.measured_peak = measured;
    p.predicted_peak = s.peak;
    // The model's own error on the recording (replayed vs measured) is taken out.
    const int64_t offset = static_cast<int64_t>(measured) - static_cast<int64_t>(w.replayed_peak);
    p.predicted_peak =
        static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(s.peak) + offset));
    p.saving = static_cast<int64_t>(measured) - static_cast<int64_t>(p.predicted_peak);
    p.saving_fraction =
        measured ? static_cast<double>(p.saving) / static_cast<double>(measured) : 0;
  };
  w.engine = engine;
  const std::string no_tape = "no AD tape in this trace (no " ADPROF_AD_TAPE_BEGIN " events)";
  for (size_t i = 0; i < policies.size(); ++i) {
    const ad::PolicyName &d = policies[i];
    const ad::EnginePolicy &ep = engine.policy(d.id);
    PolicyPrediction p;
    p.name = d.name;
    p.title = d.title;
    p.switch_on = ep.switch_on;
    p.switch_off = ep.switch_off;
    p.id = d.id;
    const uint64_t bit = 1ULL << d.id;
    p.recorded_on = w.ad_tape && (w.recorded_bits_and & bit);
    p.recorded_mixed = w.ad_tape && !p.recorded_on && (w.recorded_bits_or & bit);
    p.measured_peak = measured;
    if (!w.ad_tape) {
      p.reason = no_tape;
    } else if (!(available & bit)) {
      p.reason = "the engine (" + engine.name + ") does not describe this policy";
    } else if (bit == kCheckpoint && checkpoint_nodes) {
      p.reason = "already on in the recording (it has checkpoint segments)";
    } else if (p.recorded_on && bit != kCheckpoint) {
      p.reason = "already on in the recording";
    } else if (bit == kCheckpoint &&
               !sc[static_cast<size_t>(chain_scenario)].plan.chain.generations) {
      p.reason =
          "no chain of at least 2 layers in the tape (nodes each consuming the previous one's "
          "output alone)";
    } else if (policy_scenario[i] < 0) {
      p.reason =
          "not predictable from this trace: the reusable tape changes how often memory "
          "is allocated, not what is live (peak within an arena's idle buffers)";
    } else {
      const Scenario &s = sc[static_cast<size_t>(policy_scenario[i])];
      p.applicable = true;
      fill(p, s);
      const Plan &pl = s.plan;
      char line[512];
      switch (d.id) {
        case ADPROF_AD_POLICY_ACTIVITY_ANALYSIS:
          std::snprintf(line, sizeof line,
                        "%llu buffers (%s) for values that lead to no requested gradient are "
                        "never allocated; %llu caches (%s) die at the end of forward",
                        static_cast<unsigned long long>(pl.suppressed_count),
                        mib(static_cast<double>(pl.suppressed_bytes)).c_str(),
                        static_cast<unsigned long long>(pl.early_count),
                        mib(static_cast<double>(pl.early_bytes)).c_str());
          break;
        case ADPROF_AD_POLICY_EARLY_RELEASE:
          std::snprintf(line, sizeof line,
                        "%llu forward caches (%s) freed right after their node's backward rule "
                        "instead of at the end of the sweep",
                        static_cast<unsigned long long>(pl.early_count),
                        mib(static_cast<double>(pl.early_bytes)).c_str());
          break;
        case ADPROF_AD_POLICY_INPLACE_ACCUMULATION:
          std::snprintf(line, sizeof line,
                        "%llu accumulation copies and sums (%s) not made; %llu out-of-place "
                        "adds (%s) where an adjoint is shared",
                        static_cast<unsigned long long>(pl.suppressed_count),
                        mib(static_cast<double>(pl.suppressed_bytes)).c_str(),
                        static_cast<unsigned long long>(pl.virtual_count),
                        mib(static_cast<double>(pl.virtual_bytes)).c_str());
          break;
        case ADPROF_AD_POLICY_FUSED_OPTIMIZER:
          std::snprintf(line, sizeof line,
                        "%llu parameter gradients (%s) freed at their adjoint's completion "
                        "instead of living until the optimizer step",
                        static_cast<unsigned long long>(pl.early_count),
                        mib(static_cast<double>(pl.early_bytes)).c_str());
          break;
        case ADPROF_AD_POLICY_CHECKPOINTING: {
          const ChainStats &c = pl.chain;
          CheckpointChain &out = p.chain;
          out.nodes = c.nodes;
          out.layers = c.layers;
          out.ops_per_layer = c.ops_per_layer;
          out.segments = c.segments;
          out.generations = c.generations;
          out.dropped_bytes = c.dropped_bytes;
          out.recomputed_bytes = c.recomputed_bytes;
          std::string ops;
          for (uint32_t id : c.layer_ops) {
            if (c.periodic) out.layer.push_back(replay.op_kind(id));
            ops += (ops.empty() ? "" : ", ") + replay.op_kind(id);
          }
          if (!c.periodic && c.nodes > c.layer_ops.size()) ops += ", ...";
          if (ops.size() > 60) ops = ops.substr(0, 57) + "...";
          char layers[128];
          if (c.periodic)
            std::snprintf(layers, sizeof layers, "%llu layers of %llu ops (%s)",
                          static_cast<unsigned long long>(c.layers),
                          static_cast<unsigned long long>(c.ops_per_layer), ops.c_str());
          else
            std::snprintf(layers, sizeof layers, "%llu nodes (%s), one layer each",
                          static_cast<unsigned long long>(c.nodes), ops.c_str());
          std::snprintf(line, sizeof line,
                        "the longest chain, %s, checkpointed in %llu segments: "
                        "the forward drops %llu cached outputs (%s), backward recomputes each "
                        "segment (%s allocated again)",
                        layers, static_cast<unsigned long long>(c.segments),
                        static_cast<unsigned long long>(c.dropped),
                        mib(static_cast<double>(c.dropped_bytes)).c_str(),
                        mib(static_cast<double>(c.recomputed_bytes)).c_str());
          if (c.generations > 1)
            std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                          " (in each of %llu tape generations)",
                          static_cast<unsigned long long>(c.generations));
          break;
        }
        default:
          std::snprintf(line, sizeof line,
                        "%llu widened i64 copies of i32 index arrays (%s) not made",
                        static_cast<unsigned long long>(widened.size()),
                        mib(static_cast<double>(widened_bytes)).c_str());
          break;
      }
      p.explanation = line;
    }
    w.policies.push_back(std::move(p));
  }
  w.all.name = "all";
  w.all.title = "all policies on";
  w.all.measured_peak = measured;
  if (!w.ad_tape) {
    w.all.reason = no_tape;
  } else if ((w.recorded_bits_and & kPredictable & available) == (kPredictable & available)) {
    w.all.reason = "every predictable policy is already on";
  } else {
    w.all.applicable = true;
    fill(w.all, sc[static_cast<size_t>(all_scenario)]);
    std::string on;
    for (const PolicyPrediction &p : w.policies)
      if (p.applicable) on += (on.empty() ? "" : ", ") + p.title;
    w.all.explanation = "switched on together: " + on;
    if (!(w.recorded_bits_and & kReuse) && (available & kReuse))
      w.all.explanation += ", and the reusable tape's arena (idle buffers kept by size)";
    w.all.explanation +=
        "; checkpointing not included (the program must mark its segments: see its own row)";
  }
  if (!w.ad_tape) w.reason = no_tape;
  return w;
}

const PolicyPrediction *find_policy(const WhatIf &w, const std::string &n) {
  for (const PolicyPrediction &p : w.policies)
    if (p.name == n || p.title == n || (!p.switch_off.empty() && p.switch_off == n)) return &p;
  if (n == "all") return &w.all;
  return nullptr;
}

namespace {
nlohmann::json policy_json(const PolicyPrediction &p) {
  nlohmann::json j;
  j["name"] = p.name;
  j["title"] = p.title;
  if (!p.switch_on.empty()) j["switch_on"] = p.switch_on;
  if (!p.switch_off.empty()) j["switch_off"] = p.switch_off;
  if (p.id >= 0) {
    j["id"] = p.id;
    j["recorded"] = p.recorded_on ? "on" : p.recorded_mixed ? "mixed" : "off";
  }
  j["applicable"] = p.applicable;
  j["measured_peak"] = p.measured_peak;
  if (p.applicable) {
    j["predicted_peak"] = p.predicted_peak;
    j["saving"] = p.saving;
    j["saving_fraction"] = p.saving_fraction;
    j["explanation"] = p.explanation;
    if (p.chain.generations) {
      const CheckpointChain &c = p.chain;
      j["chain"] = {{"nodes", c.nodes},
                    {"layers", c.layers},
                    {"ops_per_layer", c.ops_per_layer},
                    {"layer", c.layer},
                    {"segments", c.segments},
                    {"generations", c.generations},
                    {"dropped_bytes", c.dropped_bytes},
                    {"recomputed_bytes", c.recomputed_bytes}};
    }
  } else {
    j["reason"] = p.reason;
  }
  return j;
}
}  // namespace

nlohmann::json to_json(const WhatIf &w) {
  nlohmann::json j;
  j["trace"] = w.trace;
  j["ad_tape"] = w.ad_tape;
  if (w.engine.described()) j["engine"] = {{"name", w.engine.name}, {"version", w.engine.version}};
  if (!w.reason.empty()) j["reason"] = w.reason;
  j["measured_peak"] = w.measured_peak;
  j["replayed_peak"] = w.replayed_peak;
  j["tapes"] = w.tapes;
  j["recorded_policy_bits"] = w.recorded_bits_and;
  nlohmann::json ps = nlohmann::json::array();
  for (const PolicyPrediction &p : w.policies) ps.push_back(policy_json(p));
  j["policies"] = ps;
  j["all"] = policy_json(w.all);
  return j;
}

std::string render_text(const WhatIf &w) {
  std::string out;
  char line[512];
  out += "adprof whatif: " + w.trace + "\n";
  out += "Measured peak: " + mib(static_cast<double>(w.measured_peak)) + " of host memory\n";
  if (!w.ad_tape) {
    out += "No prediction: " + w.reason + ".\n";
    return out;
  }
  if (w.engine.described()) out += "Engine: " + w.engine.name + " " + w.engine.version + "\n";
  std::snprintf(line, sizeof line, "Tape generations: %llu\n\n",
                static_cast<unsigned long long>(w.tapes));
  out += line;
  std::snprintf(line, sizeof line, "  %-24s %-27s %-9s %14s %24s\n", "policy", "switch off with",
                "recorded", "predicted peak", "saving");
  out += line;
  auto row = [&](const PolicyPrediction &p) {
    std::string rec = p.id < 0 ? "" : p.recorded_on ? "on" : p.recorded_mixed ? "mixed" : "off";
    if (p.applicable) {
      char saving[64];
      std::snprintf(saving, sizeof saving, "%s (%.1f%%)",
                    mib(static_cast<double>(p.saving)).c_str(), 100.0 * p.saving_fraction);
      std::snprintf(line, sizeof line, "  %-24s %-27s %-9s %14s %24s\n", p.title.c_str(),
                    p.switch_off.c_str(), rec.c_str(),
                    mib(static_cast<double>(p.predicted_peak)).c_str(), saving);
      out += line;
      out += "      " + p.explanation + "\n";
    } else {
      std::snprintf(line, sizeof line, "  %-24s %-27s %-9s %14s %24s\n", p.title.c_str(),
                    p.switch_off.c_str(), rec.c_str(), "-", "-");
      out += line;
      out += "      " + p.reason + "\n";
    }
  };
  for (const PolicyPrediction &p : w.policies) row(p);
  row(w.all);
  return out;
}

}  // namespace adprof
