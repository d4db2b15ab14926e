// The AD protocol as the analysis reads it (ad_events.h).
#include "adprof/ad_events.h"

#include "adprof/replay.h"

namespace adprof::ad {

namespace {

struct Named {
  const char *name;
  Kind kind;
};
constexpr Named kProtocolNames[] = {
    {ADPROF_AD_ENGINE, Kind::kEngine},
    {ADPROF_AD_POLICY, Kind::kPolicy},
    {ADPROF_AD_TAPE_BEGIN, Kind::kTapeBegin},
    {ADPROF_AD_TAPE_LEAF, Kind::kLeaf},
    {ADPROF_AD_TAPE_NODE, Kind::kNode},
    {ADPROF_AD_TAPE_SAVE, Kind::kSave},
    {ADPROF_AD_TAPE_RELEASE, Kind::kRelease},
    {ADPROF_AD_TAPE_CHECKPOINT, Kind::kCheckpoint},
    {ADPROF_AD_TAPE_BACKWARD_BEGIN, Kind::kBackwardBegin},
    {ADPROF_AD_TAPE_REQUESTED, Kind::kRequested},
    {ADPROF_AD_TAPE_BACKWARD_NODE, Kind::kBackwardNode},
    {ADPROF_AD_TAPE_CONTRIBUTION, Kind::kContribution},
    {ADPROF_AD_TAPE_ADJOINT_SUM, Kind::kAdjointSum},
    {ADPROF_AD_TAPE_ADJOINT_COMPLETE, Kind::kAdjointComplete},
    {ADPROF_AD_TAPE_OPTIMIZER_STEP, Kind::kOptimizerStep},
    {ADPROF_AD_TAPE_END, Kind::kTapeEnd},
    {ADPROF_AD_TAPE_SAVE_STORAGE, Kind::kSaveStorage},
    {ADPROF_AD_TAPE_RELEASE_STORAGE, Kind::kReleaseStorage},
    {ADPROF_AD_TAPE_LAYER_BEGIN, Kind::kLayerBegin},
    {ADPROF_AD_TAPE_LAYER_END, Kind::kLayerEnd},
    {ADPROF_AD_TAPE_LAYER_BACKWARD, Kind::kLayerBackward},
    {ADPROF_AD_TAPE_GRAD_ARRIVED, Kind::kGradArrived},
    {ADPROF_AD_TAPE_GRAD_READY, Kind::kGradReady},
    {ADPROF_AD_TAPE_GRAD_ZEROED, Kind::kGradZeroed},
    {ADPROF_AD_TAPE_OPTIMIZER_BEGIN, Kind::kOptimizerBegin},
    {ADPROF_AD_TAPE_OPTIMIZER_END, Kind::kOptimizerEnd},
    {ADPROF_AD_DEVICE_OOM, Kind::kDeviceOom},
    {ADPROF_AD_ARENA_LAYOUT, Kind::kArenaLayout},
    {ADPROF_AD_ARENA_SLICE, Kind::kArenaSlice},
    {ADPROF_AD_ARENA_CALL, Kind::kArenaCall},
    {ADPROF_AD_ARENA_CALL_END, Kind::kArenaCallEnd},
    {ADPROF_AD_ARENA_WHATIF, Kind::kArenaWhatIf},
    {ADPROF_AD_RESULT_IN_ARGUMENT, Kind::kResultInArgument},
    {ADPROF_AD_LABEL_INDEX_WIDENED, Kind::kLabelIndexWidened},
    {ADPROF_AD_LABEL_ARENA_IDLE, Kind::kLabelArenaIdle},
};

constexpr std::array<PolicyName, ADPROF_AD_POLICY_COUNT> kPolicyNames = {{
    {ADPROF_AD_POLICY_ACTIVITY_ANALYSIS, "activity_analysis", "activity analysis"},
    {ADPROF_AD_POLICY_EARLY_RELEASE, "early_release", "early release"},
    {ADPROF_AD_POLICY_INPLACE_ACCUMULATION, "inplace_accumulation", "in-place accumulation"},
    {ADPROF_AD_POLICY_FUSED_OPTIMIZER, "fused_optimizer", "fused optimizer"},
    {ADPROF_AD_POLICY_CHECKPOINTING, "checkpointing", "checkpointing"},
    {ADPROF_AD_POLICY_REUSABLE_TAPE, "reusable_tape", "reusable tape"},
    {ADPROF_AD_POLICY_NO_INDEX_WIDENING, "no_index_widening", "no index widening"},
    {ADPROF_AD_POLICY_FREE_GRADIENTS, "free_gradients", "gradients freed, not zeroed", 2},
    {ADPROF_AD_POLICY_DONATED_ARGUMENTS, "donated_arguments", "donated arguments", 6},
}};

constexpr const char *kPlaceholders[] = {"{first}",     "{last}",           "{parent}",
                                         "{count}",     "{segments}",       "{checkpointed}",
                                         "{container}", "{container_path}", "{root}"};

}  // namespace

NameMeaning meaning_of(std::string_view name) {
  if (name.starts_with("ad."))
    for (const Named &n : kProtocolNames)
      if (name == n.name) return {n.kind, false};
  return legacy::meaning_of(name);
}

bool is_arena_idle_label(std::string_view label) {
  return meaning_of(label).kind == Kind::kLabelArenaIdle;
}

const std::array<PolicyName, ADPROF_AD_POLICY_COUNT> &policy_names() { return kPolicyNames; }

int policy_id(std::string_view n) {
  for (const PolicyName &p : kPolicyNames)
    if (n == p.name || n == p.title) return p.id;
  return -1;
}

std::string EngineDescription::fix(int id, const std::string &generic) const {
  if (id < 0 || id >= ADPROF_AD_POLICY_COUNT) return generic;
  const EnginePolicy &p = policy(id);
  if (!p.described || p.switch_on.empty() || has_placeholder(p.switch_on)) return generic;
  return name + ": " + p.switch_on;
}

std::string fill_wording(const std::string &words,
                         const std::vector<std::pair<std::string, std::string>> &values) {
  std::string out;
  for (size_t i = 0; i < words.size();) {
    bool done = false;
    if (words[i] == '{')
      for (const auto &[key, text] : values)
        if (words.compare(i + 1, key.size(), key) == 0 && i + 1 + key.size() < words.size() &&
            words[i + 1 + key.size()] == '}') {
          out += text;
          i += key.size() + 2;
          done = true;
          break;
        }
    if (!done) out += words[i++];
  }
  return out;
}

bool has_placeholder(const std::string &words) {
  for (const char *p : kPlaceholders)
    if (words.find(p) != std::string::npos) return true;
  return false;
}

NameMeaning Decoder::meaning(uint64_t id) {
  if (id >= by_id_.size()) {
    by_id_.resize(id + 1);
    resolved_.resize(id + 1, 0);
  }
  if (!resolved_[id]) {
    const std::string &n = replay_.name(static_cast<uint32_t>(id));
    if (!n.empty()) {  // a name not seen yet stays unresolved
      by_id_[id] = meaning_of(n);
      resolved_[id] = 1;
    }
  }
  return by_id_[id];
}

Decoder::Annotation Decoder::annotation(const Event &e) {
  const NameMeaning m = meaning(e.a);
  Annotation a{m.kind, e.values()};
  if (m.kind == Kind::kNone) return a;
  if (m.legacy) {
    legacy_ = true;
    // The one change of layout: a legacy leaf was a node of op "leaf":
    // {node, op, address, bytes, 0, requires_grad} -> {node, address, bytes, requires_grad}.
    const auto v = a.values;
    if (m.kind == Kind::kNode && v.size() >= 2 &&
        legacy::is_leaf_op(replay_.name(static_cast<uint32_t>(v[1])))) {
      scratch_ = {v[0], v.size() > 2 ? v[2] : 0, v.size() > 3 ? v[3] : 0, v.size() > 5 ? v[5] : 0};
      a = {Kind::kLeaf, std::span<const uint64_t>(scratch_.data(), 4)};
    }
  }
  if (m.kind == Kind::kEngine || m.kind == Kind::kPolicy) describe(m.kind, a.values);
  return a;
}

Kind Decoder::label(const Event &e) {
  const NameMeaning m = meaning(e.a);
  if (m.legacy && m.kind != Kind::kNone) legacy_ = true;
  return m.kind == Kind::kLabelIndexWidened || m.kind == Kind::kLabelArenaIdle ? m.kind
                                                                               : Kind::kNone;
}

void Decoder::describe(Kind kind, std::span<const uint64_t> v) {
  auto text = [&](size_t i) {
    return i < v.size() ? replay_.name(static_cast<uint32_t>(v[i])) : std::string();
  };
  if (kind == Kind::kEngine) {
    if (v.empty()) return;
    engine_.protocol = static_cast<uint32_t>(v[0]);
    engine_.name = text(1);
    engine_.version = text(2);
    return;
  }
  if (v.size() < 2 || v[0] >= ADPROF_AD_POLICY_COUNT) return;  // a policy of a later protocol
  EnginePolicy &p = engine_.policies[static_cast<size_t>(v[0])];
  p.described = true;
  p.on = v[1] != 0;
  p.switch_on = text(2);
  p.switch_off = text(3);
  // (the fifth value is the policy's own: ad_protocol.h)
  const uint64_t fifth = v.size() > 4 ? v[4] : 0;
  p.schedule = v[0] == ADPROF_AD_POLICY_CHECKPOINTING ? fifth : 0;
  p.index_copies = v[0] == ADPROF_AD_POLICY_NO_INDEX_WIDENING ? fifth : 0;
}

EngineDescription Decoder::engine() const {
  if (engine_.described() || !legacy_) return engine_;
  return legacy::engine();
}

}  // namespace adprof::ad
