// Plans: what one scenario (a set of policies switched on) changes in the recorded storages of
// one tape generation, and the planners that make them, one per policy (docs/WHATIF.md).
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model.h"

namespace adprof::whatif {

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
  // A chain of layers (version 2): its labels (name ids) and the layers the schedule
  // checkpoints (the last segment is not).
  bool layered = false;
  bool blocks = false;  // schedule "blocks": every layer its own checkpointed segment
  uint32_t first_label = 0, last_label = 0, parent_label = 0;
  uint64_t checkpointed = 0;
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
// Storages the plans add (an out-of-place sum, a recomputed segment's buffers): ids above every
// recorded storage (those are event indices), handed out by one counter per analysis.
class VirtualIds {
 public:
  static constexpr uint64_t kFirst = 1ULL << 62;
  static bool is_virtual(uint64_t storage) { return storage >= kFirst; }
  uint64_t take() { return next_++; }

 private:
  uint64_t next_ = kFirst;
};

// The planner: one generation, one scenario. Each policy's model is one member, in its own file
// (plan_<policy>.cpp, checkpoint.cpp); run() applies those of `flip`.
struct Planner {
  Planner(Gen &gen, uint64_t f, Plan &plan, VirtualIds &virtual_ids)
      : g(gen), flip(f), p(plan), ids(virtual_ids) {}
  Gen &g;
  uint64_t flip;  // policies switched on that were off in this generation
  Plan &p;
  VirtualIds &ids;

  void run();

  // Shared by the planners.
  void suppress(uint64_t s);                 // s is never allocated
  void kill_at(uint64_t index, uint64_t s);  // s dies after event `index`
  bool fresh(uint64_t s, int64_t from) const;
  bool save_exists(size_t node, const Save &s) const;

  // plan_activity.cpp: what activity analysis computes (also read by the other planners).
  std::vector<char> active, useful;
  std::vector<uint64_t> active_inputs;  // bit j: input j active (predicted)
  void activity();
  void saves();              // plan_early_release.cpp
  void inplace();            // plan_inplace.cpp
  void fused();              // plan_fused.cpp
  void reuse();              // plan_reuse.cpp
  void checkpoint_chain();   // checkpoint.cpp
  void checkpoint_layers();  // checkpoint_layers.cpp: a generation with layers (version 2)

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
  bool find_run(Run &r) const;
};

// No index widening: the widened copies are never made.
void plan_no_index_widening(const std::vector<uint64_t> &widened, Plan &p);

// ---------------- parameters' gradients over the whole run (version 2) ----------------
// An event of ad.tape.grad_* or ad.tape.optimizer_*, or (kind kNone) the recorded death of a
// storage the collector was asked to watch (a gradient buffer the program zeroed).
struct GradEvent {
  ad::Kind kind = ad::Kind::kNone;
  uint64_t param = 0, storage = 0, size = 0, index = 0;
};

// Gradients freed, not zeroed (plan_free_gradients.cpp): a buffer the program zeroes dies at
// the zeroing; the next backward's first gradient for the parameter becomes its buffer and
// lives until the next zeroing (or until the recorded buffer dies).
class FreeGradients {
 public:
  void on(const GradEvent &e, Plan &p);
  uint64_t zeroings = 0;

 private:
  struct Param {
    uint64_t zeroed = 0;    // the recorded buffer last zeroed
    uint64_t adopted = 0;   // the gradient that became its buffer
    bool awaiting = false;  // zeroed, no gradient arrived since
  };
  std::unordered_map<uint64_t, Param> params_;
  std::unordered_set<uint64_t> counted_;
};

// The optimizer step fused into the backward, for gradients that live in parameters
// (plan_fused_steps.cpp): a parameter's gradient buffer dies when it is ready, after that
// parameter's step, whose transient is taken as the separate step's largest one. Since the
// buffer is gone, the first gradient the next backward delivers becomes it (lives until ready).
class FusedSteps {
 public:
  FusedSteps(VirtualIds &ids) : ids_(&ids) {}
  void on(const GradEvent &e, Plan &p);
  uint64_t ready = 0, steps = 0;

 private:
  VirtualIds *ids_;
  std::unordered_set<uint64_t> counted_;
  std::vector<uint64_t> pending_;                   // ready events since the last separate step
  std::unordered_map<uint64_t, uint64_t> adopted_;  // parameter -> its buffer (0: awaiting one)
};

}  // namespace adprof::whatif
