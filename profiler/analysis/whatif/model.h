// The what-if analysis's model of a recording (docs/WHATIF.md): heap blocks as logical
// storages, and the tape generations read from the AD protocol's events, with what each node's
// forward and backward rule allocated, saved, released and contributed.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adprof/ad_events.h"
#include "adprof/replay.h"
#include "adprof/trace_reader.h"
#include "tracker.h"

namespace adprof::whatif {

constexpr uint64_t kNone = ~0ULL;

// Policy masks of the AD protocol (bit 1 << adprof_ad_policy).
constexpr uint64_t kActivity = 1ULL << ADPROF_AD_POLICY_ACTIVITY_ANALYSIS,
                   kEarlyRelease = 1ULL << ADPROF_AD_POLICY_EARLY_RELEASE,
                   kInplace = 1ULL << ADPROF_AD_POLICY_INPLACE_ACCUMULATION,
                   kFused = 1ULL << ADPROF_AD_POLICY_FUSED_OPTIMIZER,
                   kCheckpoint = 1ULL << ADPROF_AD_POLICY_CHECKPOINTING,
                   kReuse = 1ULL << ADPROF_AD_POLICY_REUSABLE_TAPE,
                   kNativeIndices = 1ULL << ADPROF_AD_POLICY_NO_INDEX_WIDENING,
                   kFreeGradients = 1ULL << ADPROF_AD_POLICY_FREE_GRADIENTS,
                   kDonated = 1ULL << ADPROF_AD_POLICY_DONATED_ARGUMENTS;
constexpr uint64_t kPredictable =
    kActivity | kEarlyRelease | kInplace | kFused | kNativeIndices | kFreeGradients | kDonated;
constexpr uint64_t kDeferred = ADPROF_AD_CONTRIBUTION_DEFERRED;

// The policies a prediction may switch on: those the engine described, or all of them when it
// did not describe itself.
uint64_t available_policies(const ad::EngineDescription &e);

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
// The storages acquired in an open op scope, in order, each found by its id in constant time:
// an op scope may acquire and release hundreds of thousands (a data loader, a whole step).
class ScopeStorages {
 public:
  void add(uint64_t storage, uint64_t size) {
    at_.emplace(storage, allocs_.size());
    allocs_.push_back({storage, size});
  }
  // The storage's entry (storage ids are unique), or null when the scope did not acquire it.
  FwdAlloc *find(uint64_t storage) {
    auto it = at_.find(storage);
    return it == at_.end() ? nullptr : &allocs_[it->second];
  }
  // What the scope acquired so far, which it then forgets.
  std::vector<FwdAlloc> take() {
    at_.clear();
    return std::exchange(allocs_, {});
  }

 private:
  std::vector<FwdAlloc> allocs_;
  absl::flat_hash_map<uint64_t, size_t> at_;  // storage -> index in allocs_
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
// A layer of the forward (version 2: ad.tape.layer_*): event indices and storages.
struct Layer {
  uint32_t label = 0;
  uint64_t parent = kNone;
  uint64_t begin = 0, end = 0, backward = 0;
  uint64_t in = 0, out = 0;
  // An item of a container: its label is "<container>.<item>" (a decimal index); `container`
  // tells containers apart (a hash of the prefix; 0: the label is not an item).
  uint64_t container = 0, item = 0;
};
// "<container>.<item>" (item a decimal index of at most 9 digits): the container's hash (never
// 0) and the item; 0 and 0 for any other label.
void container_item(std::string_view label, uint64_t &container, uint64_t &item);

struct Birth {
  uint64_t storage = 0, size = 0, index = 0;
};
struct Gen {
  uint64_t tape = 0, gen = 0, bits = 0;
  uint32_t thread = 0;
  bool backward = false, have_flags = false;
  uint64_t backward_bits = 0, flags = 0, backward_index = 0, end_index = 0;
  int64_t root = -1;
  uint64_t checkpoint_schedule = 0;  // the engine's (ad_protocol.h, "Schedule") when planned
  std::vector<NodeInfo> nodes;
  std::unordered_map<uint64_t, Fact> facts;
  // Tensor storages made while the generation was in flight (for the arena model of a tape
  // recorded without reuse): before and after the backward sweep began.
  std::vector<uint64_t> window_forward, window_backward;
  // Version 2, a generation with layers: its layers; every storage its forward acquired on its
  // thread once the first layer began (in order) and the recorded death of each (0: none in the
  // generation); saves not tied to a node (ad.tape.save_storage): storage -> its latest
  // release (0: none).
  std::vector<Layer> layers;
  std::vector<Birth> births;
  std::unordered_map<uint64_t, uint64_t> born;
  std::unordered_map<uint64_t, uint64_t> loose_saves;
  Layer &layer(uint64_t id) {
    if (id >= layers.size()) layers.resize(std::min<uint64_t>(id + 1, 1ULL << 20));
    return layers[std::min<uint64_t>(id, layers.size() - 1)];
  }
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
  uint64_t pending_release_addr = 0;    // the last annotation was a release of this address
  bool forward = false;                 // in the forward phase
  std::vector<uint64_t> since_forward;  // storages described since the forward phase began
  std::vector<ScopeStorages> scopes;    // per open op scope: storages acquired in it
};

}  // namespace adprof::whatif
