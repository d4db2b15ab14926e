// Traces written before the AD protocol (formats 1-3): adcore emitted its own names, with the
// value layouts the protocol took over (ad_protocol.h), except that a leaf was a node of op
// "leaf". This table is the only place in the profiler that knows those names: ctest
// protocol.no_engine_names (tests/protocol/no_engine_names.sh) checks that no other file does
// and that this one still holds them, and Protocol.LegacyTraceStillPredicts
// (tests/protocol/protocol_test.cpp) reads a pre-protocol trace through it.
#include "adprof/ad_events.h"

namespace adprof::ad::legacy {

namespace {
struct Named {
  const char *name;
  Kind kind;
};
constexpr Named kLegacyNames[] = {
    {"adcore.tape.begin", Kind::kTapeBegin},
    {"adcore.tape.node", Kind::kNode},
    {"adcore.tape.save", Kind::kSave},
    {"adcore.tape.release", Kind::kRelease},
    {"adcore.tape.checkpoint", Kind::kCheckpoint},
    {"adcore.tape.backward_begin", Kind::kBackwardBegin},
    {"adcore.tape.requested", Kind::kRequested},
    {"adcore.tape.backward_node", Kind::kBackwardNode},
    {"adcore.tape.grad_contribution", Kind::kContribution},
    {"adcore.tape.adjoint_sum", Kind::kAdjointSum},
    {"adcore.tape.adjoint_complete", Kind::kAdjointComplete},
    {"adcore.tape.optimizer_step", Kind::kOptimizerStep},
    {"adcore.tape.end", Kind::kTapeEnd},
    {"adcore.cuda.oom", Kind::kDeviceOom},
    {"adcore.widened_index", Kind::kLabelIndexWidened},
    {"adcore.arena.idle", Kind::kLabelArenaIdle},
};
}  // namespace

NameMeaning meaning_of(std::string_view name) {
  if (name.starts_with("adcore."))
    for (const Named &n : kLegacyNames)
      if (name == n.name) return {n.kind, true};
  return {};
}

bool is_leaf_op(std::string_view op_name) { return op_name == "leaf"; }

// adcore's policy bits were the protocol's ids, and its users switched policies off with the
// samples' flags: the wording its findings used before the engine described itself.
EngineDescription engine() {
  EngineDescription e;
  e.name = "adcore";
  e.version = "(before the AD protocol)";
  struct Policy {
    adprof_ad_policy id;
    const char *on, *off;
  };
  constexpr Policy kPolicies[] = {
      {ADPROF_AD_POLICY_ACTIVITY_ANALYSIS, "drop --no-activity-analysis", "--no-activity-analysis"},
      {ADPROF_AD_POLICY_EARLY_RELEASE, "drop --no-early-release", "--no-early-release"},
      {ADPROF_AD_POLICY_INPLACE_ACCUMULATION, "drop --no-inplace-accumulation",
       "--no-inplace-accumulation"},
      {ADPROF_AD_POLICY_FUSED_OPTIMIZER, "drop --no-fused-optimizer", "--no-fused-optimizer"},
      {ADPROF_AD_POLICY_CHECKPOINTING,
       "run the chain's layers through adcore::checkpoint_sequential (sqrt(n) segments), no "
       "--no-checkpoint",
       "--no-checkpoint"},
      {ADPROF_AD_POLICY_REUSABLE_TAPE, "drop --no-reuse-tape", "--no-reuse-tape"},
      {ADPROF_AD_POLICY_NO_INDEX_WIDENING, "drop --widen-indices", "--widen-indices"},
  };
  for (const Policy &p : kPolicies) {
    EnginePolicy &ep = e.policies[static_cast<size_t>(p.id)];
    ep.described = true;
    ep.switch_on = p.on;
    ep.switch_off = p.off;
  }
  return e;
}

}  // namespace adprof::ad::legacy
