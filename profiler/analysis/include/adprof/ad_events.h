// The AD protocol as the analysis reads it (profiler/include/adprof/ad_protocol.h): which
// annotation or label an event is, its values in the protocol's layout, and the engine's
// description of itself. This is the only way the analysis learns about an engine; it never
// compares against an engine's own names. Traces written before the protocol (one engine's own
// names, formats 1-3) are read through one legacy table (ad/legacy_names.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adprof/ad_protocol.h"
#include "adprof/trace_reader.h"

namespace adprof {

class Replay;

namespace ad {

enum class Kind : uint8_t {
  kNone,
  kEngine,
  kPolicy,
  kTapeBegin,
  kLeaf,
  kNode,
  kSave,
  kRelease,
  kCheckpoint,
  kBackwardBegin,
  kRequested,
  kBackwardNode,
  kContribution,
  kAdjointSum,
  kAdjointComplete,
  kOptimizerStep,
  kTapeEnd,
  kSaveStorage,  // version 2
  kReleaseStorage,
  kLayerBegin,
  kLayerEnd,
  kLayerBackward,
  kGradArrived,
  kGradReady,
  kGradZeroed,
  kOptimizerBegin,
  kOptimizerEnd,
  kDeviceOom,
  kArenaLayout,  // version 4 (the arena slicer reads these by name itself)
  kArenaSlice,
  kArenaCall,
  kArenaCallEnd,
  kArenaWhatIf,  // version 6
  kResultInArgument,
  kLabelIndexWidened,  // labels (adprof_label), not annotations
  kLabelArenaIdle,
};

// What a name means to the protocol. `legacy`: a name of a trace written before it.
struct NameMeaning {
  Kind kind = Kind::kNone;
  bool legacy = false;
};
NameMeaning meaning_of(std::string_view name);  // protocol names, then the legacy table
bool is_arena_idle_label(std::string_view label);

// The shared list of policies (ad_protocol.h's ids): a stable name and a title for each.
struct PolicyName {
  adprof_ad_policy id;
  const char *name;    // "inplace_accumulation"
  const char *title;   // "in-place accumulation"
  uint32_t since = 1;  // the protocol version that added it
};
const std::array<PolicyName, ADPROF_AD_POLICY_COUNT> &policy_names();
// By stable name or title; -1 if unknown.
int policy_id(std::string_view name_or_title);

// A policy as the engine described it.
struct EnginePolicy {
  bool described = false;  // the engine has this policy
  bool on = false;
  std::string switch_on;   // how its users switch it on (a finding's fix quotes it)
  std::string switch_off;  // how they switch it off
  uint64_t schedule = 0;   // checkpointing: what the wording does (ad_protocol.h, "Schedule")
  // no_index_widening: which integer copies the wording removes (ad_protocol.h, "Index copies")
  uint64_t index_copies = 0;
};

// The engine's description of itself (ad.engine, ad.policy).
struct EngineDescription {
  std::string name;  // empty: no engine described itself
  std::string version;
  uint32_t protocol = 0;  // 0: a legacy trace (description implied by its names)
  std::array<EnginePolicy, ADPROF_AD_POLICY_COUNT> policies;

  bool described() const { return !name.empty(); }
  const EnginePolicy &policy(int id) const { return policies[static_cast<size_t>(id)]; }
  // The fix wording for switching `id` on: "<engine>: <its words>", else `generic` (also when
  // the words hold a placeholder no prediction filled, ad_protocol.h).
  std::string fix(int id, const std::string &generic) const;
};

// A policy's wording with its placeholders ("{first}", ad_protocol.h) replaced by `values`
// (pairs of placeholder name without braces, text); unknown placeholders are left as they are.
std::string fill_wording(const std::string &words,
                         const std::vector<std::pair<std::string, std::string>> &values);
// Whether the wording still holds a placeholder of the protocol.
bool has_placeholder(const std::string &words);

namespace legacy {
// The table of names written before the protocol (ad/legacy_names.cpp).
NameMeaning meaning_of(std::string_view name);
// A legacy node annotation with this op name was a leaf.
bool is_leaf_op(std::string_view op_name);
// The description a legacy trace implies (only one engine wrote those names).
EngineDescription engine();
}  // namespace legacy

// Reads AD events off the trace's events, resolving name ids through the replay that has
// seen the trace's names so far, and collects the engine's description.
class Decoder {
 public:
  explicit Decoder(const Replay &replay) : replay_(replay) {}

  struct Annotation {
    Kind kind = Kind::kNone;
    std::span<const uint64_t> values;  // in the protocol's layout
  };
  // An annotation event's meaning (kNone: not part of the protocol). The span may point into
  // the decoder's scratch: valid until the next call.
  Annotation annotation(const Event &e);
  // A label event's meaning (kLabelIndexWidened, kLabelArenaIdle or kNone).
  Kind label(const Event &e);
  // A name event defines one of the protocol's names (cheap: names are few).
  static NameMeaning name_event(const Event &e) { return meaning_of(e.text()); }

  // What the engine said about itself so far, or what a legacy trace implies.
  EngineDescription engine() const;
  bool saw_legacy() const { return legacy_; }

 private:
  NameMeaning meaning(uint64_t name_id);
  void describe(Kind kind, std::span<const uint64_t> v);

  const Replay &replay_;
  std::vector<NameMeaning> by_id_;
  std::vector<uint8_t> resolved_;
  std::array<uint64_t, 8> scratch_{};
  EngineDescription engine_;
  bool legacy_ = false;
};

}  // namespace ad
}  // namespace adprof
